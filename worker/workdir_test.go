//go:build linux

package worker

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/setting"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// workDirs are the directories openWorkDirs makes with shm and tmp standing for /dev/shm and
// $TMPDIR; log is what it logged.
func workDirs(t *testing.T, shm, tmp string) (*Dirs, *bytes.Buffer, error) {
	t.Helper()
	var log bytes.Buffer
	dirs, err := openWorkDirs("", shm, tmp, slog.New(slog.NewJSONHandler(&log, nil)))
	if err != nil {
		return nil, &log, err
	}
	t.Cleanup(dirs.Remove)
	return dirs, &log, nil
}

// workDirsIn lists the work directories in parent.
func workDirsIn(t *testing.T, parent string) []string {
	t.Helper()
	entries, err := os.ReadDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range entries {
		if strings.Contains(e.Name(), workDirPrefix) {
			dirs = append(dirs, e.Name())
		}
	}
	return dirs
}

// tempDirRefusal checks that err refuses --temp-dir as configuration (exit 2), saying why.
func tempDirRefusal(t *testing.T, err error, why string) {
	t.Helper()
	var le setting.Error
	if !errors.As(err, &le) || le.Setting != listenspec.SettingTempDir || le.Err != nil {
		t.Fatalf("error = %v, want a refusal of %s", err, listenspec.SettingTempDir)
	}
	if !strings.Contains(err.Error(), why) {
		t.Errorf("error = %q, want it to say %q", err, why)
	}
}

func TestWorkDirsRefused(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	log := slog.New(slog.DiscardHandler)
	t.Run("--temp-dir missing", func(t *testing.T) {
		_, err := openWorkDirs(missing, "", "", log)
		tempDirRefusal(t, err, "no such file or directory")
	})
	t.Run("--temp-dir a file", func(t *testing.T) {
		_, err := openWorkDirs(file, "", "", log)
		tempDirRefusal(t, err, "not a directory")
	})
	t.Run("neither /dev/shm nor $TMPDIR", func(t *testing.T) {
		_, err := openWorkDirs("", missing, file, log)
		tempDirRefusal(t, err, "no directory can hold the jobs' files")
	})
	t.Run("no /dev/shm: the work directory is in $TMPDIR", func(t *testing.T) {
		tmp := t.TempDir()
		r, _, err := workDirs(t, missing, tmp)
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Dir(r.work) != tmp || r.spillParent != "" {
			t.Errorf("work directory %s, spill in %q; want one in %s and no spill", r.work, r.spillParent, tmp)
		}
	})
	t.Run("TMPDIR=/dev/shm: no spill", func(t *testing.T) {
		shm := t.TempDir()
		r, _, err := workDirs(t, shm, shm+"/")
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Dir(r.work) != shm || r.spillParent != "" {
			t.Errorf("work directory %s, spill in %q; want one in %s and no spill", r.work, r.spillParent, shm)
		}
	})
	t.Run("no $TMPDIR: no spill directory is made", func(t *testing.T) {
		shm := t.TempDir()
		r, log, err := workDirs(t, shm, missing)
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Dir(r.work) != shm {
			t.Errorf("work directory %s, want one in %s", r.work, shm)
		}
		if !testenv.Logged(log.String(), "level", "WARN", "tmpdir", "*") {
			t.Errorf("log = %q, want a warning that nothing can spill", log)
		}
		files, err := r.writeJobFiles("body")
		if err != nil {
			t.Fatal(err)
		}
		files.remove()
	})
}

// The work directories of a watchbot killed with SIGKILL are removed by the next start;
// those of a live one, and whatever is not a work directory of this user's, stay.
func TestWorkDirsOfGoneOwnersAreRemoved(t *testing.T) {
	if parent := os.Getenv("WATCHBOT_TEST_WORKDIR_PARENT"); parent != "" {
		// The watchbot that is killed: it makes its work directory and waits.
		dirs, err := openWorkDirs(parent, "", "", slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Println("dir", dirs.work)
		time.Sleep(time.Minute)
		return
	}
	parent := t.TempDir()
	killed := exec.Command(os.Args[0], "-test.run=^TestWorkDirsOfGoneOwnersAreRemoved$")
	killed.Env = testenv.CleanEnv(t, "WATCHBOT_TEST_WORKDIR_PARENT="+parent)
	out, err := killed.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := killed.Start(); err != nil {
		t.Fatal(err)
	}
	var line [4096]byte
	n, _ := out.Read(line[:])
	_, killedDir, ok := strings.Cut(strings.TrimSpace(string(line[:n])), "dir ")
	_ = killed.Process.Signal(syscall.SIGKILL)
	_ = killed.Wait()
	if !ok {
		t.Fatalf("the killed watchbot said %q", line[:n])
	}

	if _, err := os.Stat(killedDir); err != nil {
		t.Fatalf("the killed watchbot's directory: %v", err)
	}
	liveDir, liveOwner, err := newWorkDir(parent) // a watchbot that runs
	if err != nil {
		t.Fatal(err)
	}
	defer liveOwner.Close()
	// Not work directories, or not ones whose owner can be told: left alone.
	noOwner := filepath.Join(parent, workDirPrefix+"1-noowner")
	staged := filepath.Join(parent, "."+workDirPrefix+"123")
	other := filepath.Join(parent, "other-1-x")
	target := t.TempDir()
	link := filepath.Join(parent, workDirPrefix+"2-link")
	for _, d := range []string{noOwner, staged, other} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{staged, other, target} {
		if err := os.WriteFile(filepath.Join(d, ownerFile), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}

	var log bytes.Buffer
	next, err := openWorkDirs(parent, "", "", slog.New(slog.NewJSONHandler(&log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer next.Remove()
	if _, err := os.Stat(killedDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the killed watchbot's directory is still there (%v)", err)
	}
	if !testenv.Logged(log.String(), "level", "INFO", "dir", killedDir) {
		t.Errorf("log = %q, want the removal of %s", log.String(), killedDir)
	}
	for _, d := range []string{liveDir, noOwner, staged, other, link, filepath.Join(target, ownerFile)} {
		if _, err := os.Lstat(d); err != nil {
			t.Errorf("%s was removed: %v", d, err)
		}
	}
	if name := filepath.Base(next.work); !strings.HasPrefix(name, fmt.Sprintf("%s%d-", workDirPrefix, os.Getpid())) {
		t.Errorf("work directory %s is not named after its owner's pid", name)
	}
}

// inMountNamespace is set in the test binary that TestWorkDirsInTmpfs runs in a mount
// namespace of its own, where it mounts tmpfs file systems as a container has them.
const inMountNamespace = "WATCHBOT_TEST_MOUNT_NAMESPACE"

// The jobs' files where a container's file systems are small, full or read-only: a 64 MiB
// /dev/shm (Docker's default), a read-only root, a writable volume.
func TestWorkDirsInTmpfs(t *testing.T) {
	if os.Getenv(inMountNamespace) == "" {
		testenv.RequireRoot(t, "mounting tmpfs file systems")
		cmd := exec.Command("unshare", "--mount", "--propagation", "private",
			os.Args[0], "-test.run=^TestWorkDirsInTmpfs$", "-test.v", "-test.count=1")
		cmd.Env = testenv.CleanEnv(t, inMountNamespace+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte("--- PASS: TestWorkDirsInTmpfs")) {
			t.Fatalf("in a mount namespace: %v\n%s", err, out)
		}
		t.Logf("in a mount namespace:\n%s", out)
		return
	}
	// tmpfs mounts a tmpfs of size at a new directory; full fills it.
	tmpfs := func(t *testing.T, size string, flags uintptr) string {
		t.Helper()
		dir := t.TempDir()
		if err := unix.Mount("tmpfs", dir, "tmpfs", flags, "size="+size); err != nil {
			t.Fatalf("mount a tmpfs at %s: %v", dir, err)
		}
		t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
		return dir
	}
	full := func(t *testing.T, dir string) {
		t.Helper()
		f, err := os.Create(filepath.Join(dir, "filler"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for chunk := make([]byte, 64*1024); ; {
			if _, err := f.Write(chunk); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatal(err)
				}
				return
			}
		}
	}
	const mib = 1 << 20
	body := func(i int) string { return strings.Repeat(string(rune('a'+i%26)), mib) }

	t.Run("a 64 MiB /dev/shm spills 1 MiB messages at concurrency 100 to the writable volume", func(t *testing.T) {
		shm, volume := tmpfs(t, "64m", 0), t.TempDir()
		r, _, err := workDirs(t, shm, volume)
		if err != nil {
			t.Fatal(err)
		}
		if d := workDirsIn(t, volume); len(d) != 0 {
			t.Fatalf("spill directory made before it is needed: %v", d)
		}
		const concurrency = 100
		files := make([]*jobFiles, concurrency)
		errs := make([]error, concurrency)
		var wg sync.WaitGroup
		for i := range concurrency {
			wg.Go(func() { files[i], errs[i] = r.writeJobFiles(body(i)) })
		}
		wg.Wait()
		var inShm, spilled int
		for i, f := range files {
			if errs[i] != nil {
				t.Fatalf("job %d: %v", i, errs[i])
			}
			switch filepath.Dir(f.message) {
			case r.work:
				inShm++
			case r.spill:
				spilled++
			default:
				t.Fatalf("job %d's message file %s is neither in /dev/shm nor spilled", i, f.message)
			}
			if got := stdinOf(t, f); got != body(i) {
				t.Fatalf("job %d reads %d bytes of %q, want its own 1 MiB", i, len(got), got[:1])
			}
		}
		t.Logf("%d message files in a 64 MiB /dev/shm, %d spilled", inShm, spilled)
		if inShm < 50 || spilled < 30 || filepath.Dir(r.spill) != volume {
			t.Errorf("%d in /dev/shm, %d spilled to %s; want /dev/shm used to the full and the rest in %s", inShm, spilled, r.spill, volume)
		}
		for _, f := range files {
			f.remove()
		}
		r.Remove()
		if d := append(workDirsIn(t, shm), workDirsIn(t, volume)...); len(d) != 0 {
			t.Errorf("left behind: %v", d)
		}
	})

	t.Run("a read-only $TMPDIR stops nothing while /dev/shm has room", func(t *testing.T) {
		shm, readOnly := tmpfs(t, "8m", 0), tmpfs(t, "1m", unix.MS_RDONLY)
		r, log, err := workDirs(t, shm, readOnly)
		if err != nil {
			t.Fatal(err)
		}
		if !testenv.Logged(log.String(), "level", "WARN", "tmpdir", "*") {
			t.Errorf("log = %q, want a warning that nothing can spill", log)
		}
		var held []*jobFiles
		defer func() {
			for _, f := range held {
				f.remove()
			}
		}()
		for i := range 8 {
			f, err := r.writeJobFiles(body(i))
			if err != nil {
				for _, want := range []string{"no space left on device", "no spill directory", "read-only file system", "--temp-dir"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error = %q, want it to say %q", err, want)
					}
				}
				if i == 0 {
					t.Errorf("the first message failed: %v", err)
				}
				return
			}
			held = append(held, f)
		}
		t.Fatal("8 MiB of messages fitted in an 8 MiB /dev/shm beside its work directory")
	})

	t.Run("a full /dev/shm: the jobs' files go to $TMPDIR", func(t *testing.T) {
		shm, volume := tmpfs(t, "1m", 0), t.TempDir()
		full(t, shm)
		r, log, err := workDirs(t, shm, volume)
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Dir(r.work) != volume || r.spillParent != "" {
			t.Errorf("work directory %s, spill in %q; want one in %s", r.work, r.spillParent, volume)
		}
		if !testenv.Logged(log.String(), "level", "INFO", "error", "*") || !strings.Contains(log.String(), syscall.ENOSPC.Error()) {
			t.Errorf("log = %q, want why /dev/shm is not used", log)
		}
		if d := workDirsIn(t, shm); len(d) != 0 {
			t.Errorf("left in the full /dev/shm: %v", d)
		}
	})

	t.Run("read-only root and no /dev/shm: refused, naming --temp-dir", func(t *testing.T) {
		readOnly := tmpfs(t, "1m", unix.MS_RDONLY)
		_, _, err := workDirs(t, filepath.Join(readOnly, "shm"), readOnly)
		tempDirRefusal(t, err, "read-only file system")
	})

	t.Run("--temp-dir read-only or full: refused", func(t *testing.T) {
		readOnly, small := tmpfs(t, "1m", unix.MS_RDONLY), tmpfs(t, "1m", 0)
		full(t, small)
		log := slog.New(slog.DiscardHandler)
		_, err := openWorkDirs(readOnly, "", "", log)
		tempDirRefusal(t, err, "read-only file system")
		_, err = openWorkDirs(small, "", "", log)
		tempDirRefusal(t, err, "no space left on device")
	})
}
