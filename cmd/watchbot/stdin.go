package main

import (
	"context"
	"errors"
	"io"
	"os"
	"time"

	"github.com/urfave/cli/v2"
)

// errStdinTerminal refuses to wait for a message typed at a terminal: a user who forgot --body
// would otherwise face a silent wait.
var errStdinTerminal = errors.New("stdin is a terminal: give --body, --file, or pipe messages")

// readStdin runs read on the command's stdin and stops it when the command's context is
// cancelled (SIGINT, SIGTERM): a read of a pipe that never ends, or of a terminal, would
// otherwise ignore them. A terminal is refused at once. A stopped read is an interrupted error.
func readStdin[T any](c *cli.Context, read func(io.Reader) (T, error)) (T, error) {
	var zero T
	r := c.App.Reader
	if opTerminal(r) {
		return zero, usageError{errStdinTerminal}
	}
	f, ok := r.(*os.File)
	if !ok {
		return read(r)
	}
	in, restore, err := pollable(f)
	if err != nil {
		return read(r)
	}
	defer restore()
	// A read deadline in the past wakes the read that waits, with os.ErrDeadlineExceeded.
	stop := context.AfterFunc(c.Context, func() { _ = in.SetReadDeadline(time.Now()) })
	defer stop()
	v, err := read(in)
	if c.Context.Err() != nil {
		return zero, interrupted{"nothing was sent or run"}
	}
	return v, err
}
