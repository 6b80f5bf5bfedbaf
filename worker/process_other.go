//go:build !linux

package worker

import (
	"context"
	"errors"
	"log/slog"
	"os"
)

// Workers run on Linux only: their process groups, the kill of a worker whose supervisor
// died and the exit watch use Linux calls. Elsewhere the package builds for the operator
// tools, and listen and try refuse to start; what follows is never reached from them.

// errNotLinux is what running a worker gives on another OS.
var errNotLinux = errors.New("worker processes run on Linux only")

func spawn(context.Context, Spec, *slog.Logger) Result {
	return Result{End: NotStarted, Err: errNotLinux}
}

func (f *jobFiles) write(string) error { return errNotLinux }

func newWorkDir(string) (string, *os.File, error) { return "", nil, errNotLinux }

func claimGone(string) (*os.File, bool) { return nil, false }
