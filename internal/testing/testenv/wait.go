package testenv

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Require skips tb when err says a tool the test needs is missing, or fails it under
// CI=true, so CI never passes without having run the test. what says what went wrong, as in
// "SQS emulator did not start".
func Require(tb testing.TB, what string, err error) {
	tb.Helper()
	if err == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		tb.Fatalf("%s (required under CI=true): %v", what, err)
	}
	tb.Skipf("%s: %v", what, err)
}

// Eventually polls cond every 100 ms until it holds, and fails tb when it still does not
// after limit. The failure names what was awaited and ends with logs(), for each logs given.
// Inside a testing/synctest bubble it polls on the bubble's clock.
func Eventually(tb testing.TB, what string, limit time.Duration, cond func() bool, logs ...func() string) {
	tb.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s%s", limit, what, joinLogs(logs))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Run calls run in a goroutine with a context that the returned stop cancels. stop then
// waits for run to return and returns its error; it fails tb when run, named by what, has not
// returned within limit, adding logs() for each logs given. stop may be called more than
// once; it is called when the test ends.
func Run(tb testing.TB, what string, limit time.Duration, run func(ctx context.Context) error, logs ...func() string) (stop func() error) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(limit):
				tb.Fatalf("%s did not stop within %v%s", what, limit, joinLogs(logs))
			}
		})
		return err
	}
	tb.Cleanup(func() { _ = stop() })
	return stop
}

// Process is a command started by Spawn.
type Process struct {
	// Cmd is the running command; send it signals through Cmd.Process.
	Cmd  *exec.Cmd
	done chan struct{}
}

// Spawn starts cmd and waits for it in the background. When the test ends the process is
// killed, if it still runs, and waited for.
func Spawn(tb testing.TB, cmd *exec.Cmd) *Process {
	tb.Helper()
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start %s: %v", cmd.Path, err)
	}
	p := &Process{Cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	tb.Cleanup(func() { _ = cmd.Process.Kill(); <-p.done })
	return p
}

// Done is closed once the process has exited and its output has been copied.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait waits for the process to exit and returns its exit code. It fails tb when the process
// still runs after limit, adding logs() for each logs given.
func (p *Process) Wait(tb testing.TB, limit time.Duration, logs ...func() string) int {
	tb.Helper()
	// An exit already seen wins, whatever limit says: of two ready cases, select picks one at
	// random, and a limit of 0 is ready at once.
	select {
	case <-p.done:
		return p.Cmd.ProcessState.ExitCode()
	default:
	}
	select {
	case <-p.done:
		return p.Cmd.ProcessState.ExitCode()
	case <-time.After(limit):
		tb.Fatalf("%s did not exit within %v%s", filepath.Base(p.Cmd.Path), limit, joinLogs(logs))
		return -1
	}
}

// Stop sends SIGTERM to every one of procs still running, all at once (an idle listen's stop
// waits for its last long poll, up to 20 s: one after another, a fleet's stops add up), then
// waits up to limit for each and returns their exit codes in order.
func Stop(tb testing.TB, limit time.Duration, logs func() string, procs ...*Process) []int {
	tb.Helper()
	for _, p := range procs {
		select {
		case <-p.done:
		default:
			_ = p.Cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	codes := make([]int, len(procs))
	for i, p := range procs {
		codes[i] = p.Wait(tb, limit, logs)
	}
	return codes
}

// joinLogs renders what logs return for a failure message.
func joinLogs(logs []func() string) string {
	var b strings.Builder
	for _, l := range logs {
		b.WriteString("; logs:\n")
		b.WriteString(l())
	}
	return b.String()
}

// Buffer collects output that goroutines or a process write while the test reads it, such as
// a supervisor's log. The zero value is ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Alive reports whether pid is a live process; a zombie, killed but not yet reaped, is not.
func Alive(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses, which may itself hold spaces.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
