//go:build linux

package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// outputLog records the worker output lines runWorker logs.
type outputLog struct {
	slog.Handler
	mu    sync.Mutex
	lines []string // "stream: line"
}

func (h *outputLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *outputLog) Handle(_ context.Context, r slog.Record) error {
	var stream, line string
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "stream":
			stream = a.Value.String()
		case "line":
			line = a.Value.String()
		}
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lines = append(h.lines, stream+": "+line)
	return nil
}
func (h *outputLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *outputLog) WithGroup(string) slog.Handler      { return h }

// goneSoon reports whether a process signalled to die is gone within 10 s.
func goneSoon(pid int) bool {
	for range 1000 {
		if !testenv.Alive(pid) {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// Causes a test stops a run with, as the supervisor's stops carry theirs.
var (
	errShutdown  = errors.New("shutdown window closed")
	errLeaseLost = errors.New("lease lost")
	errSecond    = errors.New("second signal: stopped at once")
)

// TestRunWorker runs real processes through spawn, with the child's pidfd and with the
// waiting goroutine kernels without pidfds get.
func TestRunWorker(t *testing.T) {
	stdin := filepath.Join(t.TempDir(), "message")
	if err := os.WriteFile(stdin, []byte("the body\nsecond line"), 0o600); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", maxLogLine+10)
	tests := []struct {
		name     string
		script   string
		maxDur   time.Duration
		cancel   error // cancels the run with this cause once it has started
		end      End
		code     int      // with Exited and Signaled
		lines    []string // exactly these output lines, when set
		pidLines bool     // the first stdout line is a pid that must be gone afterwards
		check    func(t *testing.T, run Result, lines []string)
	}{
		{name: "exit code", script: "exit 7", end: Exited, code: 7},
		{name: "success", script: "exit 0", end: Exited, code: 0, lines: []string{}},
		{name: "signal", script: "kill -9 $$", end: Signaled, code: 9},
		{name: "stdin is the message file", script: "cat", end: Exited,
			lines: []string{"stdout: the body", "stdout: second line"}},
		{name: "both streams, a last line without newline", script: "echo out; echo err >&2; printf tail", end: Exited,
			lines: []string{"stdout: out", "stderr: err", "stdout: tail"}},
		{name: "empty lines are lines", script: "printf 'a\\n\\nb\\n'", end: Exited,
			lines: []string{"stdout: a", "stdout: ", "stdout: b"}},
		{name: "long lines are split", script: "printf '%s\\n' " + long, end: Exited,
			lines: []string{"stdout: " + long[:maxLogLine], "stdout: " + long[maxLogLine:]}},
		{name: "a child left in the group is killed", script: "sleep 30 & echo $!; exit 0", end: Exited, pidLines: true},
		{name: "a child that escaped the group is left, its pipe closed after the grace", script: "setsid sleep 30 & echo $!; exit 0",
			end: Exited, check: func(t *testing.T, _ Result, lines []string) {
				pid, err := strconv.Atoi(strings.TrimPrefix(lines[0], "stdout: "))
				if err != nil {
					t.Fatalf("no pid in %q", lines)
				}
				syscall.Kill(pid, syscall.SIGKILL)
			}},
		{name: "stopped: SIGTERM, then SIGKILL after the grace", script: `trap "" TERM; echo $$; sleep 30`,
			cancel: errShutdown, end: Stopped, pidLines: true},
		{name: "stopped for a lost lease", script: "sleep 30", cancel: errLeaseLost, end: Stopped},
		{name: "stopped by a second signal", script: "sleep 30", cancel: errSecond, end: Stopped,
			check: func(t *testing.T, run Result, _ []string) {
				if !strings.Contains(fmt.Sprint(run.Err), "second signal") {
					t.Errorf("reason %q does not say second signal", run.Err)
				}
			}},
		{name: "max duration", script: "sleep 30", maxDur: 100 * time.Millisecond, end: TimedOut},
	}
	for _, waiter := range []bool{false, true} {
		name := "pidfd"
		if waiter {
			name = "waiting goroutine"
		}
		t.Run(name, func(t *testing.T) {
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					t.Parallel()
					h := &outputLog{}
					ctx, cancel := context.WithCancelCause(context.Background())
					defer cancel(nil)
					spec := Spec{Command: []string{"/bin/sh", "-c", tt.script}, Env: testenv.CleanEnv(t), StdinPath: stdin,
						MaxDuration: tt.maxDur, KillGrace: 200 * time.Millisecond, waiter: waiter}
					if tt.cancel != nil {
						spec.Started = func(func()) {
							go func() { time.Sleep(100 * time.Millisecond); cancel(tt.cancel) }()
						}
					}
					run := spawn(ctx, spec, slog.New(h))
					if run.End != tt.end || tt.cancel != nil && !errors.Is(run.Err, tt.cancel) {
						t.Errorf("run = %+v, want end %d", run, tt.end)
					}
					if (tt.end == Exited || tt.end == Signaled) && run.Code != tt.code {
						t.Errorf("exit code %d, want %d", run.Code, tt.code)
					}
					h.mu.Lock()
					lines := slices.Clone(h.lines)
					h.mu.Unlock()
					// Each stream has its own reader, so only the order within a stream is kept.
					if tt.lines != nil && !maps.EqualFunc(byStream(lines), byStream(tt.lines), slices.Equal) {
						t.Errorf("output lines = %q, want %q", lines, tt.lines)
					}
					if tt.pidLines {
						pid, err := strconv.Atoi(strings.TrimPrefix(lines[0], "stdout: "))
						if err != nil {
							t.Fatalf("no pid in %q", lines)
						}
						if !goneSoon(pid) {
							syscall.Kill(pid, syscall.SIGKILL)
							t.Errorf("process %d outlived its run", pid)
						}
					}
					if tt.check != nil {
						tt.check(t, run, lines)
					}
				})
			}
		})
	}
}

func TestRunWorkerSpawnError(t *testing.T) {
	stdin := filepath.Join(t.TempDir(), "message")
	os.WriteFile(stdin, nil, 0o600)
	run := spawn(context.Background(), Spec{Command: []string{"/nonexistent/worker"}, StdinPath: stdin, KillGrace: time.Second},
		slog.New(slog.DiscardHandler))
	if run.End != NotStarted || !errors.Is(run.Err, os.ErrNotExist) {
		t.Errorf("run = %+v, want a spawn error for a missing command", run)
	}
	run = spawn(context.Background(), Spec{Command: []string{"/bin/true"}, StdinPath: stdin + ".gone", KillGrace: time.Second},
		slog.New(slog.DiscardHandler))
	if run.End != NotStarted {
		t.Errorf("run = %+v, want a spawn error for a missing message file", run)
	}
}

// byStream groups output lines ("stdout: …", "stderr: …") by their stream, in order.
func byStream(lines []string) map[string][]string {
	out := map[string][]string{}
	for _, l := range lines {
		stream, _, _ := strings.Cut(l, ":")
		out[stream] = append(out[stream], l)
	}
	return out
}
