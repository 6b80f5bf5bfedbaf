package supervisor

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// A call that hangs at the end of a drain ends at the stop's last moment, 1.5 s after
// --kill-grace: the stop ends within --shutdown-timeout + --kill-grace + 2 s. A dead-letter
// send cut short leaves its message in the queue, never deleted without its copy sent.
func TestStopCutsCallsThatHangAtTheEndOfADrain(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		body   string // "group+n kind ms", as the interleaving suite's
		dedupe bool
		hangs  string // the operation that hangs: SQS's, or the dedupe table's
		// keep: the message is still in the queue after the stop, and not dead-lettered.
		keep bool
	}{
		{"dead-letter send", "a0 reject 4900", false, "SendMessage", true},
		{"dedupe completion", "a0 ok 4900", true, "Complete", false},
		{"dedupe release", "a0 fail 4900", true, "Release", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inBubble(t, "TestStopCutsCallsThatHangAtTheEndOfADrain/"+tt.name, time.Minute, func(t *testing.T) {
				r, deps := chaosSetup(t, seedRand(1), map[bool]string{false: "standard", true: "dedupe"}[tt.dedupe])
				r.cfg.Concurrency, r.cfg.AckTimeout = 1, DefaultConfig().AckTimeout
				r.cfg.ShutdownTimeout, r.cfg.KillGrace = 5*time.Second, time.Second
				r.sqs.setPlan(func(op string, _ []string) fault { return fault{hang: op == tt.hangs} })
				if db, ok := deps.Dedupe.(*fakeDedupe); ok {
					db.hangIf = func(op string) bool { return op == tt.hangs }
				}
				stop := r.start(deps)
				r.send(tt.body)
				time.Sleep(time.Second) // the worker runs, and ends 0.1 s before the drain window
				limit := r.cfg.ShutdownTimeout + r.cfg.KillGrace + 2*time.Second
				took, err := stopWithin(t, stop, limit)
				if err != nil {
					t.Errorf("Run: %v", err)
				}
				if took > limit {
					t.Errorf("stop took %v, want at most %v\n%s", took, limit, r.logs)
				}
				if !r.ran(tt.body) {
					t.Fatalf("%q did not run\n%s", tt.body, r.logs)
				}
				left, dead := r.srv.Messages(r.queue), r.srv.Messages(r.dlq)
				if tt.keep && (len(left) != 1 || len(dead) != 0) {
					t.Errorf("after the stop %d messages in the queue, %d in the dead-letter queue; want the message left in the queue\n%s",
						len(left), len(dead), r.logs)
				}
				if !strings.Contains(r.logs.String(), "context canceled") {
					t.Errorf("no call was cut short\n%s", r.logs)
				}
			})
		})
	}
}

// A cutoff ends the calls under way when it comes, and every call after it at once; a call
// that ended before it is left alone; the earliest cutoff set counts.
func TestCutoffEndsCallsUnderWayAndLater(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := newCutoff()
		defer c.release()
		done, _ := c.bound(context.Background(), time.Hour)
		undo := c.cuts(func() { t.Error("the cutoff ended a call that had ended before it") })
		if !undo() {
			t.Error("a call that ended before the cutoff was not taken off it")
		}
		c.set(time.Now().Add(10 * time.Second))
		c.set(time.Now().Add(time.Minute)) // later: the first counts
		time.Sleep(9 * time.Second)
		if done.Err() != nil {
			t.Fatal("a call ended before the cutoff")
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if done.Err() == nil {
			t.Error("a call under way outlived the cutoff")
		}
		late, cancel := c.bound(context.Background(), time.Hour)
		defer cancel()
		if late.Err() == nil {
			t.Error("a call made after the cutoff did not end at once")
		}
	})
}

// A nil cutoff never cuts: its calls end by their own timeout.
func TestNilCutoffBoundsByTimeoutAlone(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var c *cutoff
		ctx, cancel := c.bound(context.Background(), time.Second)
		defer cancel()
		<-ctx.Done()
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Errorf("ended with %v, want its timeout", ctx.Err())
		}
	})
}
