//go:build unix

package main

import (
	"bytes"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// stdinCommands read stdin when no --body or --file is given. The queue is never reached: each
// stops before it would send.
var stdinCommands = []struct {
	name string
	args []string
}{
	{"send", []string{"send", "--queue-url", "http://127.0.0.1:9/000000000000/never"}},
	{"send, several lines", []string{"send", "--queue-url", "http://127.0.0.1:9/000000000000/never", "--delay", "0"}},
	{"try", []string{"try", "--", "/bin/true"}},
	{"try --batch", []string{"try", "--batch", "--", "/bin/true"}},
}

// TestStdinTerminalIsRefused runs send and try with a terminal on stdin and no body: both refuse
// at once, saying what to give, instead of waiting for typing nobody knows is expected.
func TestStdinTerminalIsRefused(t *testing.T) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatalf("no pseudo-terminal: %v", err)
	}
	defer ptmx.Close()
	defer tty.Close()
	for _, tt := range stdinCommands {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(append([]string{"watchbot"}, tt.args...), tty, &out, &errOut)
			if code != 2 || !strings.Contains(errOut.String(), "stdin is a terminal: give --body, --file, or pipe messages") {
				t.Errorf("exit %d, stderr %q; want 2 and what to give", code, errOut.String())
			}
		})
	}
}

// TestStdinReadStopsOnSignal runs send and try on a pipe that never ends and sends SIGINT (what
// Ctrl-C sends) or SIGTERM: each stops, sends or runs nothing, and exits 130.
func TestStdinReadStopsOnSignal(t *testing.T) {
	// While this channel is registered a signal never ends the test binary, even one that
	// arrives before run has registered its own.
	caught := make(chan os.Signal, 16)
	signal.Notify(caught, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(caught)
	for i, tt := range stdinCommands {
		sig := []syscall.Signal{syscall.SIGINT, syscall.SIGTERM}[i%2]
		t.Run(tt.name+", "+sig.String(), func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			defer w.Close()
			if _, err := w.WriteString("one\ntwo\n"); err != nil { // and nothing more, ever
				t.Fatal(err)
			}
			var out, errOut bytes.Buffer
			done := make(chan int, 1)
			go func() { done <- run(append([]string{"watchbot"}, tt.args...), r, &out, &errOut) }()
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			deadline := time.After(30 * time.Second)
			for {
				select {
				case code := <-done:
					if code != 130 || !strings.Contains(errOut.String(), "interrupted") || out.Len() != 0 {
						t.Errorf("exit %d, stdout %q, stderr %q; want 130, nothing done", code, out.String(), errOut.String())
					}
					return
				case <-tick.C:
					// Repeated until run has seen one: a signal before its handler is in place
					// is only caught here.
					_ = syscall.Kill(os.Getpid(), sig)
				case <-deadline:
					t.Fatalf("still reading stdin 30 s after the first %v; stderr %q", sig, errOut.String())
				}
			}
		})
	}
	for len(caught) > 0 {
		<-caught
	}
}

// TestReplayInterrupted stops a slow replay with SIGINT, as Ctrl-C does: it prints its summary
// after "interrupted:", exits 130, and leaves no message in flight.
func TestReplayInterrupted(t *testing.T) {
	emu := operatorEnv(t)
	c := emu.Client()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	deadLetterDirectly(t, c, q, 12, nil)
	caught := make(chan os.Signal, 16)
	signal.Notify(caught, syscall.SIGINT)
	defer signal.Stop(caught)

	var out, errOut bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"watchbot", "dead-letter", "--queue-url", q.URL, "replay", "--rate", "1"}, strings.NewReader(""), &out, &errOut)
	}()
	// The first message goes at once, the next a second later: the replay is under way.
	testenv.Eventually(t, "the first message replayed", 30*time.Second, func() bool {
		return testenv.Depth(t, c, q.URL).Visible >= 1
	})
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for code := -1; code < 0; {
		select {
		case code = <-done:
			if code != 130 || !strings.Contains(out.String(), "interrupted: replayed ") || !strings.Contains(errOut.String(), "interrupted: replay stopped") {
				t.Fatalf("exit %d\nstdout: %s\nstderr: %s\nwant 130 and the summary", code, out.String(), errOut.String())
			}
		case <-tick.C:
			_ = syscall.Kill(os.Getpid(), syscall.SIGINT)
		case <-deadline:
			t.Fatal("replay still runs 30 s after the first SIGINT")
		}
	}
	dlq, src := testenv.Depth(t, c, q.DLQURL), testenv.Depth(t, c, q.URL)
	if dlq.InFlight != 0 || dlq.Visible+src.Visible != 12 || src.Visible == 12 {
		t.Errorf("after the interrupt: DLQ %+v, source %+v; want nothing in flight, 12 in all, some not replayed", dlq, src)
	}
}
