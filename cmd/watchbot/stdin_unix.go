//go:build unix

package main

import (
	"os"
	"syscall"
)

// pollable returns a copy of f's descriptor in non-blocking mode, which Go's poller can wake with
// a deadline, and a function that puts the descriptor back in blocking mode (it is shared with
// the shell that started watchbot) and closes the copy.
func pollable(f *os.File) (*os.File, func(), error) {
	fd, err := syscall.Dup(int(f.Fd()))
	if err != nil {
		return nil, nil, err
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		_ = syscall.Close(fd)
		return nil, nil, err
	}
	in := os.NewFile(uintptr(fd), f.Name())
	return in, func() {
		_ = syscall.SetNonblock(fd, false)
		_ = in.Close()
	}, nil
}
