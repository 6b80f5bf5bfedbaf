//go:build !linux

package supervisor

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"syscall"
)

// Workers run on Linux only: their process groups, the kill of a worker whose supervisor
// died and the exit watch use Linux calls. Elsewhere the package builds for the operator
// tools, and listen and try refuse to start (PlatformError); what follows is never
// reached from them.

// errNotLinux is what running a worker gives on another OS.
var errNotLinux = errors.New("worker processes run on Linux only")

func runWorker(context.Context, workerSpec, *slog.Logger) workerRun {
	return workerRun{End: endSpawnError, Err: errNotLinux}
}

func signalGroup(int, syscall.Signal) error { return errNotLinux }

func (f *jobFiles) write(string) error { return errNotLinux }

func newWorkDir(string) (string, *os.File, error) { return "", nil, errNotLinux }

func claimGone(string) (*os.File, bool) { return nil, false }
