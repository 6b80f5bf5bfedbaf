package supervisor

import (
	"errors"
	"testing"

	"github.com/watchbot/watchbot/worker"
)

// TestRunEndOf: each way a worker kind reports a run's end is read as one row of the outcome
// table's input; a stop is told apart by its cause.
func TestRunEndOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		res  worker.Result
		want runEnd
	}{
		{"a process exited", worker.Result{End: worker.Exited, Code: 1}, endExited},
		{"an application answered success", worker.Result{End: worker.Succeeded}, endExited},
		{"an application answered a failure", worker.Result{End: worker.Failed, Code: 500}, endHTTPStatus},
		{"killed by a signal", worker.Result{End: worker.Signaled, Code: 9}, endSignaled},
		{"ran out of time", worker.Result{End: worker.TimedOut}, endTimedOut},
		{"could not start", worker.Result{End: worker.NotStarted, Err: errors.New("no such file")}, endSpawnError},
		{"stopped at shutdown", worker.Result{End: worker.Stopped, Err: errShutdown}, endShutdown},
		{"stopped at a second signal", worker.Result{End: worker.Stopped, Err: errSecond}, endShutdown},
		{"stopped for a lost lease", worker.Result{End: worker.Stopped, Err: errLeaseLost}, endLeaseLost},
		{"stopped before 12 hours", worker.Result{End: worker.Stopped, Err: errCeiling}, endCeiling},
		{"stopped by its own limit", worker.Result{End: worker.Stopped, Err: worker.ErrTimedOut}, endTimedOut},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := runEndOf(tt.res); got != tt.want {
				t.Errorf("runEndOf(%+v) = %d, want %d", tt.res, got, tt.want)
			}
		})
	}
}
