package worker

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// write writes the message file with body and keeps it open, rewound, as stdin. It makes the
// system calls itself: os.WriteFile and a second open for stdin cost twice as many. A kept
// file is written over, its pages kept, unless it is no longer a plain file of the pool's (a
// worker may have removed it, or put something else in its place): that is removed and the
// file made anew.
func (f *jobFiles) write(body string) error {
	const flags = unix.O_RDWR | unix.O_CREAT | unix.O_CLOEXEC | unix.O_NOFOLLOW
	fd, size, err := -1, int64(0), error(unix.ENOENT)
	if f.kept != nil {
		fd, size, err = f.reopen(flags)
	}
	if err != nil {
		fd, err = unix.Open(f.message, flags|unix.O_EXCL, 0o600)
	}
	if err != nil {
		return &os.PathError{Op: "open", Path: f.message, Err: err}
	}
	f.stdin = os.NewFile(uintptr(fd), f.message)
	// WriteString writes the body as it is, with no copy of it made for each run.
	if _, err := f.stdin.WriteString(body); err != nil {
		// What was written stays out of a full /dev/shm while the slot waits.
		_ = unix.Ftruncate(fd, 0)
		return err
	}
	f.size = int64(len(body))
	if size > f.size {
		if err := unix.Ftruncate(fd, f.size); err != nil {
			return &os.PathError{Op: "truncate", Path: f.message, Err: err}
		}
	}
	if _, err := unix.Seek(fd, 0, io.SeekStart); err != nil {
		return &os.PathError{Op: "seek", Path: f.message, Err: err}
	}
	return nil
}

// reopen opens the kept message file and returns its size, when it is still a plain file of
// the pool's: regular, with no other name, readable by watchbot's user alone. Otherwise it
// removes whatever is in its place and fails, for write to make the file anew.
func (f *jobFiles) reopen(flags int) (fd int, size int64, err error) {
	fd, err = unix.Open(f.message, flags, 0o600)
	if err == nil {
		var st unix.Stat_t
		err = unix.Fstat(fd, &st)
		if err == nil && (st.Mode&unix.S_IFMT != unix.S_IFREG || st.Mode&0o077 != 0 || st.Nlink != 1) {
			err = unix.EEXIST
		}
		if err == nil {
			return fd, st.Size, nil
		}
		unix.Close(fd)
	}
	_ = os.RemoveAll(f.message)
	return -1, 0, err
}
