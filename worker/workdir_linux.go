package worker

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// newWorkDir makes a work directory in parent and returns it with its owner file, locked
// for as long as the file stays open. Writing the owner's pid and start time into that file
// is the proof that parent takes files: a full tmpfs takes a new directory, but not a page
// of data.
func newWorkDir(parent string) (string, *os.File, error) {
	stage, err := os.MkdirTemp(parent, "."+workDirPrefix)
	if err != nil {
		return "", nil, err
	}
	owner, err := os.OpenFile(filepath.Join(stage, ownerFile), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		err = unix.Flock(int(owner.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			_, err = fmt.Fprintf(owner, "watchbot pid %d, started %s\n", os.Getpid(), time.Now().UTC().Format(time.RFC3339))
		}
		if err != nil {
			owner.Close()
			err = &os.PathError{Op: "write", Path: owner.Name(), Err: err}
		}
	}
	if err != nil {
		_ = os.RemoveAll(stage)
		return "", nil, err
	}
	random := strings.TrimPrefix(filepath.Base(stage), "."+workDirPrefix)
	dir := filepath.Join(parent, fmt.Sprintf("%s%d-%s", workDirPrefix, os.Getpid(), random))
	if err := os.Rename(stage, dir); err != nil {
		owner.Close()
		_ = os.RemoveAll(stage)
		return "", nil, err
	}
	return dir, owner, nil
}

// claimGone tells whether dir, a work directory, belongs to this user and has an owner that
// is gone; then it returns the owner file, locked, for the caller to close once dir is
// removed. A directory without an owner file is left alone: its owner cannot be told.
func claimGone(dir string) (*os.File, bool) {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Geteuid() {
		return nil, false
	}
	fd, err := unix.Open(filepath.Join(dir, ownerFile), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, false
	}
	if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) != nil {
		unix.Close(fd)
		return nil, false
	}
	return os.NewFile(uintptr(fd), ownerFile), true
}
