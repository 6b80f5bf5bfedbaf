package worker

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"time"
)

// ErrTimedOut is the cause with which a run's own limit (--max-job-duration) stops it.
var ErrTimedOut = errors.New("--max-job-duration exceeded")

// Spec says how to run one worker process.
type Spec struct {
	Command   []string
	Env       []string
	StdinPath string
	// Stdin, when set, is StdinPath already open at its start; the spawn does not close it.
	Stdin *os.File
	// MaxDuration stops the worker after this long (0: never).
	MaxDuration time.Duration
	KillGrace   time.Duration
	// Started is called with the way to kill the worker's process group at once, once the
	// worker runs.
	Started func(kill func())
	// waiter watches the exit with a waiting goroutine even where pidfds work (tests).
	waiter bool
}

// Spawn runs one worker process and returns how it ended (no directives): a real process
// (Process's default), or a stand-in in the supervisor's tests.
type Spawn func(ctx context.Context, spec Spec, log *slog.Logger) Result

// stoppedBy is the result of a run that ctx stopped, from its cause: TimedOut for the run's
// own limit, Stopped otherwise.
func stoppedBy(cause error) End {
	if errors.Is(cause, ErrTimedOut) {
		return TimedOut
	}
	return Stopped
}
