package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// spawn runs one worker in its own process group and waits for it and for every process it
// left in that group. ctx cancellation stops it: SIGTERM to the group, SIGKILL after
// KillGrace; the run is then Stopped with the cancellation's cause (TimedOut for its own
// MaxDuration).
//
// It is the hot path of every message, so it costs the least it can: the process is started
// directly, not through os/exec (whose context watcher and I/O goroutines cost a goroutine
// each), and one poll(2) on the output pipes and the child's pidfd, in this goroutine, reads
// the output and notices the exit. The netpoller would park and wake a goroutine per pipe.
func spawn(ctx context.Context, spec Spec, log *slog.Logger) Result {
	if spec.MaxDuration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, spec.MaxDuration, ErrTimedOut)
		defer cancel()
	}
	stdin := spec.Stdin
	if stdin == nil {
		f, err := os.Open(spec.StdinPath)
		if err != nil {
			return Result{End: NotStarted, Err: err}
		}
		defer f.Close()
		stdin = f
	}
	out, err := newOutput(log)
	if err != nil {
		return Result{End: NotStarted, Err: err}
	}
	defer out.close()

	pidfd := -1
	attr := &os.ProcAttr{
		Env:   spec.Env,
		Files: []*os.File{stdin, out.w[0], out.w[1]},
		// Its own process group, so signals reach everything it starts; and killed if
		// watchbot dies without stopping it (SIGKILL, OOM), so it cannot run on beside the
		// redelivery of its message.
		Sys: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, PidFD: &pidfd},
	}
	start := time.Now()
	proc, err := os.StartProcess(spec.Command[0], spec.Command, attr)
	out.closeWriters()
	if err != nil {
		return Result{End: NotStarted, Err: err}
	}
	pgid := proc.Pid
	if spec.Started != nil {
		spec.Started(func() { _ = signalGroup(pgid, syscall.SIGKILL) })
	}
	stop := &stopper{pgid: pgid, grace: spec.KillGrace}
	unhook := context.AfterFunc(ctx, stop.term)
	defer unhook()

	exited, err := newExitWatch(proc, pidfd, spec.waiter)
	if err != nil {
		stop.finish()
		_ = signalGroup(pgid, syscall.SIGKILL)
		_, _ = proc.Wait()
		return Result{End: NotStarted, Err: err}
	}
	// stopped records that watchbot signalled the worker, so a worker that finished on its
	// own just as a stop began keeps its own result.
	var stopped bool
	out.pump(exited.fd, max(spec.KillGrace, time.Second), func() {
		stopped = stop.finish()
		// Whatever the worker left behind in its group goes with it.
		_ = signalGroup(pgid, syscall.SIGKILL)
	})
	state, waitErr := exited.wait()
	run := Result{Duration: time.Since(start)}

	switch cause := context.Cause(ctx); {
	case stopped && cause != nil:
		run.End = stoppedBy(cause)
		run.Err = cause
		if state != nil {
			run.Code = state.ExitCode()
		}
	case state == nil:
		run.End, run.Err = NotStarted, waitErr
	default:
		run.End, run.Code = exitOf(state)
	}
	return run
}

// stopper stops a worker when its context ends: SIGTERM to its group, SIGKILL after grace.
// Once finish is called (the worker has exited) it signals nothing more, so no signal can
// reach a process group whose id was reused.
type stopper struct {
	pgid  int
	grace time.Duration

	mu      sync.Mutex
	done    bool
	stopped bool
	kill    *time.Timer
}

func (s *stopper) term() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done || s.stopped {
		return
	}
	s.stopped = true
	_ = signalGroup(s.pgid, syscall.SIGTERM)
	s.kill = time.AfterFunc(s.grace, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.done {
			_ = signalGroup(s.pgid, syscall.SIGKILL)
		}
	})
}

// finish ends the stopper's watch and reports whether it signalled the worker.
func (s *stopper) finish() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done = true
	if s.kill != nil {
		s.kill.Stop()
	}
	return s.stopped
}

// exitWatch tells when a worker has exited, through a file descriptor that poll(2) reports
// readable then: the child's pidfd, or, on a kernel without pidfds (before Linux 5.3), an
// eventfd a waiting goroutine writes to.
type exitWatch struct {
	proc *os.Process
	fd   int
	// pidfd: fd is the child's pidfd, closed by wait; else waited is closed once state and err
	// are set.
	pidfd  bool
	waited chan struct{}
	state  *os.ProcessState
	err    error
}

func newExitWatch(proc *os.Process, pidfd int, waiter bool) (*exitWatch, error) {
	if pidfd >= 0 && !waiter {
		return &exitWatch{proc: proc, fd: pidfd, pidfd: true}, nil
	}
	if pidfd >= 0 {
		unix.Close(pidfd)
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("watch the worker's exit: %w", err)
	}
	w := &exitWatch{proc: proc, fd: efd, waited: make(chan struct{})}
	go func() {
		defer close(w.waited)
		w.state, w.err = proc.Wait()
		_, _ = unix.Write(w.fd, []byte{1, 0, 0, 0, 0, 0, 0, 0})
	}()
	return w, nil
}

// wait reaps the worker, which has exited, and releases the watch's descriptor.
func (w *exitWatch) wait() (*os.ProcessState, error) {
	if w.pidfd {
		state, err := w.proc.Wait()
		unix.Close(w.fd)
		return state, err
	}
	<-w.waited
	unix.Close(w.fd)
	return w.state, w.err
}

// output is a worker's stdout and stderr: pipes whose write ends the worker gets, and whose
// read ends watchbot reads line by line into the log. The read ends stay blocking: pump
// polls them itself.
type output struct {
	r     [2]int
	w     [2]*os.File
	lines [2]lineLog
}

var streams = [2]string{"stdout", "stderr"}

func newOutput(log *slog.Logger) (*output, error) {
	o := &output{r: [2]int{-1, -1}}
	for i := range 2 {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			o.close()
			return nil, fmt.Errorf("create the worker's %s pipe: %w", streams[i], err)
		}
		o.r[i], o.w[i] = p[0], os.NewFile(uintptr(p[1]), streams[i])
		o.lines[i] = lineLog{stream: streams[i], log: log}
	}
	return o, nil
}

// closeWriters closes watchbot's copies of the write ends, once the worker has its own.
func (o *output) closeWriters() {
	for i, w := range o.w {
		if w != nil {
			w.Close()
			o.w[i] = nil
		}
	}
}

// close releases every descriptor still open.
func (o *output) close() {
	o.closeWriters()
	for i, fd := range o.r {
		if fd >= 0 {
			unix.Close(fd)
			o.r[i] = -1
		}
	}
}

// readBuffers recycles pump's read buffers.
var readBuffers = sync.Pool{New: func() any { return new([32 * 1024]byte) }}

// pump logs the worker's output until both pipes reach end of file and exitFd (exitWatch's)
// says the worker has exited; it calls exited as soon as it has. A process that escaped the
// group (a new session) may hold the pipes open: grace after the exit, watchbot stops reading
// and closes them under it.
func (o *output) pump(exitFd int, grace time.Duration, exited func()) {
	buf := readBuffers.Get().(*[32 * 1024]byte)
	defer readBuffers.Put(buf)
	fds := []unix.PollFd{{Fd: int32(o.r[0]), Events: unix.POLLIN}, {Fd: int32(o.r[1]), Events: unix.POLLIN}, {Fd: int32(exitFd), Events: unix.POLLIN}}
	open := 2
	var deadline time.Time // set once the worker has exited
	for open > 0 || deadline.IsZero() {
		timeout := -1
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				break
			}
			timeout = int(left/time.Millisecond) + 1
		}
		n, err := unix.Poll(fds, timeout)
		if err == unix.EINTR || n == 0 {
			continue
		}
		if err != nil {
			// Not expected of poll(2) on descriptors of its own; stop reading rather than spin.
			break
		}
		for i := range 2 {
			if fds[i].Fd < 0 || fds[i].Revents == 0 {
				continue
			}
			k, err := unix.Read(int(fds[i].Fd), buf[:])
			switch {
			case k > 0:
				o.lines[i].write(buf[:k])
			case err == unix.EINTR || err == unix.EAGAIN:
			default: // end of file, or a pipe that cannot be read
				o.lines[i].flush()
				fds[i].Fd = -1
				open--
			}
		}
		if fds[2].Fd >= 0 && fds[2].Revents != 0 {
			fds[2].Fd = -1
			deadline = time.Now().Add(grace)
			exited()
		}
	}
	if deadline.IsZero() {
		exited() // poll failed: the caller reaps the worker, which may still run
	}
	for i := range 2 {
		if fds[i].Fd >= 0 {
			o.lines[i].flush()
		}
	}
}

// maxLogLine is the longest worker output line logged as one entry; longer lines are split.
const maxLogLine = 64 * 1024

// lineLog logs what one output stream writes, a line at a time, splitting lines longer than
// maxLogLine.
type lineLog struct {
	stream string
	log    *slog.Logger
	buf    []byte
}

func (l *lineLog) write(p []byte) {
	for len(p) > 0 {
		room := maxLogLine - len(l.buf)
		chunk := p[:min(len(p), room)]
		if i := bytes.IndexByte(chunk, '\n'); i >= 0 {
			l.buf = append(l.buf, chunk[:i]...)
			l.emit()
			p = p[i+1:]
			continue
		}
		l.buf = append(l.buf, chunk...)
		p = p[len(chunk):]
		if len(l.buf) == maxLogLine {
			l.emit()
		}
	}
}

// flush logs a last line the stream did not end.
func (l *lineLog) flush() {
	if len(l.buf) > 0 {
		l.emit()
	}
}

func (l *lineLog) emit() {
	l.log.Info("worker output", "stream", l.stream, "line", string(l.buf))
	l.buf = l.buf[:0]
}

// exitOf reads an exit status: its code, or the signal that killed the process.
func exitOf(state *os.ProcessState) (End, int) {
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return Signaled, int(ws.Signal())
	}
	return Exited, state.ExitCode()
}

// signalGroup signals every process in the group; a group already gone is not an error.
func signalGroup(pgid int, sig syscall.Signal) error {
	err := syscall.Kill(-pgid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}
