package supervisor

import (
	"errors"
	"os"
	"time"
)

// Causes of a worker being stopped by watchbot, carried as context causes.
var (
	errTimedOut  = errors.New("--max-job-duration exceeded")
	errShutdown  = errors.New("shutdown window closed")
	errSecond    = errors.New("second signal: stopped at once")
	errLeaseLost = errors.New("lease lost")
	errCeiling   = errors.New("12h in-flight limit reached")
)

// workerSpec says how to run one worker process.
type workerSpec struct {
	Command   []string
	Env       []string
	StdinPath string
	// Stdin, when set, is StdinPath already open at its start; runWorker does not close it.
	Stdin *os.File
	// MaxDuration stops the worker after this long (0: never).
	MaxDuration time.Duration
	KillGrace   time.Duration
	// Started is called with the process group id once the worker runs.
	Started func(pgid int)
	// waiter watches the exit with a waiting goroutine even where pidfds work (tests).
	waiter bool
}

// workerRun is how a worker process ended.
type workerRun struct {
	End      runEnd
	ExitCode int // exit status, or the signal number when End is endSignaled
	Err      error
	Duration time.Duration
}

// endFor is the end of a run that watchbot stopped, from the cause it stopped it for.
func endFor(cause error) runEnd {
	switch {
	case errors.Is(cause, errTimedOut):
		return endTimedOut
	case errors.Is(cause, errLeaseLost):
		return endLeaseLost
	case errors.Is(cause, errCeiling):
		return endCeiling
	default:
		return endShutdown
	}
}
