package worker

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/setting"
)

// sharedMemory is a tmpfs most Linux systems and containers have. Job files there cost a few
// microseconds; on a disk file system creating and removing them costs far more per job.
const sharedMemory = "/dev/shm"

// A work directory is named workDirPrefix, its owner's pid, "-" and a random part
// (watchbot-4242-123456789), and holds ownerFile, which its owner keeps locked (flock) for as
// long as it runs. The lock, not the pid, tells a live owner from a gone one: in a container
// the pids repeat from one start to the next. A directory is made under a hidden name and
// renamed once its owner file is locked, so a directory with the public name and an unlocked
// owner file is always one whose owner is gone.
const (
	workDirPrefix = "watchbot-"
	ownerFile     = "owner"
)

// Dirs are the directories that hold the runs' files: the work directory, where the message
// and result files of the slots are, and a spill directory for a message file that does not
// fit in the work directory when that is a size-limited tmpfs (a container's /dev/shm is
// often 64 MiB), and for fetched payloads. The spill directory is made on first need, so a
// read-only $TMPDIR stops nothing while /dev/shm has room.
type Dirs struct {
	work string
	// spillParent is where the spill directory is made: $TMPDIR when work is in /dev/shm;
	// "" when work is already on the disk.
	spillParent string

	mu     sync.Mutex // guards spill and owners
	spill  string
	owners []*os.File // the directories' owner files, locked

	// slots name the work directory's job files; seq names the files of a job's own.
	slots slotFiles
	seq   atomic.Uint64
}

// errNoSpill is the reason a message file that did not fit has nowhere else to go.
var errNoSpill = errors.New("no spill directory")

// OpenDirs makes the directories of the runs' files, as openWorkDirs does with /dev/shm and
// $TMPDIR. Remove removes them.
func OpenDirs(tempDir string, log *slog.Logger) (*Dirs, error) {
	return openWorkDirs(tempDir, sharedMemory, os.TempDir(), log)
}

// openWorkDirs makes the work directory: in tempDir (--temp-dir) when set; otherwise in shm
// when it can be written, with tmp ($TMPDIR) for the spill; or else in tmp. Each directory
// is tried by making it and writing its owner file, so a read-only, full or missing one is
// refused here, at start, naming --temp-dir, rather than failing every job. First it removes
// the work directories that watchbots now gone (SIGKILL, OOM) left where it looks.
func openWorkDirs(tempDir, shm, tmp string, log *slog.Logger) (*Dirs, error) {
	if tempDir != "" {
		sweepWorkDirs(tempDir, log)
		dir, owner, err := newWorkDir(tempDir)
		if err != nil {
			return nil, setting.Refuse(listenspec.SettingTempDir, tempDir, fmt.Sprintf("cannot hold the jobs' files: %v", err))
		}
		return newDirs(dir, "", owner), nil
	}
	sweepWorkDirs(shm, log)
	sweepWorkDirs(tmp, log)
	dir, owner, shmErr := newWorkDir(shm)
	if shmErr == nil && filepath.Clean(tmp) == filepath.Clean(shm) {
		return newDirs(dir, "", owner), nil // TMPDIR=/dev/shm: nowhere to spill
	}
	if shmErr == nil {
		if err := probeDir(tmp); err != nil {
			log.Warn("the jobs' files are in "+shm+", and a message file that does not fit there fails its attempt: "+
				"$TMPDIR cannot be written; set --temp-dir or TMPDIR to a writable volume", "tmpdir", tmp, "error", err)
		}
		return newDirs(dir, tmp, owner), nil
	}
	dir, owner, err := newWorkDir(tmp)
	if err != nil {
		return nil, setting.Refuse(listenspec.SettingTempDir, nil, fmt.Sprintf(
			"no directory can hold the jobs' files (%v; %v): set it to a writable directory, such as the container's writable volume", shmErr, err))
	}
	log.Info("the jobs' files are in "+tmp+": "+shm+" cannot be used", "error", shmErr)
	return newDirs(dir, "", owner), nil
}

func newDirs(work, spillParent string, owner *os.File) *Dirs {
	d := &Dirs{work: work, spillParent: spillParent, owners: []*os.File{owner}}
	d.slots.dir = work
	return d
}

// spillDir returns the spill directory, made the first time it is asked for; a failure is
// tried again at the next need.
func (d *Dirs) spillDir() (string, error) {
	if d.spillParent == "" {
		return "", errNoSpill
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.spill == "" {
		dir, owner, err := newWorkDir(d.spillParent)
		if err != nil {
			return "", fmt.Errorf("%w: %v", errNoSpill, err)
		}
		d.spill = dir
		d.owners = append(d.owners, owner)
	}
	return d.spill, nil
}

// Remove removes the directories and then lets go of their owner files.
func (d *Dirs) Remove() {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	_ = os.RemoveAll(d.work)
	if d.spill != "" {
		_ = os.RemoveAll(d.spill)
	}
	for _, f := range d.owners {
		f.Close()
	}
	d.owners = nil
}

// probeDir tells whether dir takes a new file with something in it, by writing one and
// removing it.
func probeDir(dir string) error {
	f, err := os.CreateTemp(dir, "."+workDirPrefix+"probe-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, err = f.WriteString("watchbot\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// isWorkDirName tells whether name is a work directory's: workDirPrefix, digits, "-".
func isWorkDirName(name string) bool {
	rest, ok := strings.CutPrefix(name, workDirPrefix)
	pid, _, ok2 := strings.Cut(rest, "-")
	return ok && ok2 && pid != "" && strings.Trim(pid, "0123456789") == ""
}

// sweepWorkDirs removes the work directories in parent whose owner is gone.
func sweepWorkDirs(parent string, log *slog.Logger) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !isWorkDirName(e.Name()) {
			continue
		}
		dir := filepath.Join(parent, e.Name())
		lock, gone := claimGone(dir)
		if !gone {
			continue
		}
		err := os.RemoveAll(dir)
		lock.Close()
		if err != nil {
			log.Warn("could not remove the work directory of a watchbot that is gone", "dir", dir, "error", err)
			continue
		}
		log.Info("removed the work directory of a watchbot that is gone", "dir", dir)
	}
}
