package supervisor

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Causes of a worker being stopped by watchbot, carried as context causes.
var (
	errTimedOut  = errors.New("--max-job-duration exceeded")
	errShutdown  = errors.New("shutdown window closed")
	errLeaseLost = errors.New("lease lost")
	errCeiling   = errors.New("12h in-flight limit reached")
)

// maxLogLine is the longest worker output line logged as one entry; longer lines are split.
const maxLogLine = 64 * 1024

// workerSpec says how to run one worker process.
type workerSpec struct {
	Command   []string
	Env       []string
	StdinPath string
	// MaxDuration stops the worker after this long (0: never).
	MaxDuration time.Duration
	KillGrace   time.Duration
	// Started is called with the process group id once the worker runs.
	Started func(pgid int)
}

// workerRun is how a worker process ended.
type workerRun struct {
	End      runEnd
	ExitCode int // exit status, or the signal number when End is endSignaled
	Err      error
	Duration time.Duration
}

// runWorker runs one worker in its own process group and waits for it and for every process
// it left in that group. ctx cancellation stops it: SIGTERM to the group, SIGKILL after
// KillGrace. The cause of the cancellation (errShutdown, errLeaseLost, errCeiling) becomes the
// run's End.
func runWorker(ctx context.Context, spec workerSpec, log *slog.Logger) workerRun {
	if spec.MaxDuration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, spec.MaxDuration, errTimedOut)
		defer cancel()
	}
	stdin, err := os.Open(spec.StdinPath)
	if err != nil {
		return workerRun{End: endSpawnError, Err: err}
	}
	defer stdin.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		return workerRun{End: endSpawnError, Err: err}
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return workerRun{End: endSpawnError, Err: err}
	}

	cmd := exec.CommandContext(ctx, spec.Command[0], spec.Command[1:]...)
	cmd.Env = spec.Env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, outW, errW
	// Its own process group, so signals reach everything it starts; and killed if watchbot
	// dies without stopping it (SIGKILL, OOM), so it cannot run on beside the redelivery of
	// its message.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// stopped records that watchbot signalled the worker, so a worker that finished on its
	// own just as a stop began keeps its own result.
	var stopped atomic.Bool
	cmd.Cancel = func() error {
		stopped.Store(true)
		return signalGroup(cmd.Process.Pid, syscall.SIGTERM)
	}
	cmd.WaitDelay = spec.KillGrace

	start := time.Now()
	err = cmd.Start()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return workerRun{End: endSpawnError, Err: err}
	}
	pgid := cmd.Process.Pid
	if spec.Started != nil {
		spec.Started(pgid)
	}
	var readers sync.WaitGroup
	readers.Add(2)
	go func() { defer readers.Done(); logLines(outR, "stdout", log) }()
	go func() { defer readers.Done(); logLines(errR, "stderr", log) }()

	waitErr := cmd.Wait()
	run := workerRun{Duration: time.Since(start)}
	// Whatever the worker left behind in its group goes with it.
	_ = signalGroup(pgid, syscall.SIGKILL)
	waitReaders(&readers, spec.KillGrace, outR, errR)

	state := cmd.ProcessState
	switch cause := context.Cause(ctx); {
	case stopped.Load() && cause != nil:
		run.End = endFor(cause)
		run.Err = cause
		if state != nil {
			run.ExitCode = state.ExitCode()
		}
	case state == nil:
		run.End, run.Err = endSpawnError, waitErr
	default:
		run.End, run.ExitCode = exitOf(state)
	}
	return run
}

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

// exitOf reads an exit status: its code, or the signal that killed the process.
func exitOf(state *os.ProcessState) (runEnd, int) {
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return endSignaled, int(ws.Signal())
	}
	return endExited, state.ExitCode()
}

// signalGroup signals every process in the group; a group already gone is not an error.
func signalGroup(pgid int, sig syscall.Signal) error {
	err := syscall.Kill(-pgid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}

// waitReaders waits for the output readers to reach end of file. A process that escaped the
// group (a new session) may hold the pipes open: after grace they are closed under it.
func waitReaders(wg *sync.WaitGroup, grace time.Duration, pipes ...*os.File) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(max(grace, time.Second)):
		for _, p := range pipes {
			p.Close()
		}
		<-done
	}
	for _, p := range pipes {
		p.Close()
	}
}

// lineReaders recycles the output readers: two 64 KiB buffers per job would otherwise be
// allocated and cleared for every message.
var lineReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, maxLogLine) }}

// logLines logs each line of r, splitting lines longer than maxLogLine, and drains r to the
// end so the writer never blocks on a full pipe.
func logLines(r io.Reader, stream string, log *slog.Logger) {
	br := lineReaders.Get().(*bufio.Reader)
	br.Reset(r)
	defer func() {
		br.Reset(nil)
		lineReaders.Put(br)
	}()
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			if line[len(line)-1] == '\n' {
				line = line[:len(line)-1]
			}
			log.Info("worker output", "stream", stream, "line", string(line))
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}
