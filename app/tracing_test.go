package app

import (
	"context"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"
)

// The spans' flush ends when the drain's window does, counted from the stop, however long the
// drain took; a supervisor that ended without a stop gives the flush a whole window.
func TestFlushSpansEndsWithTheDrainWindow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		stopped bool
		drain   time.Duration
		left    time.Duration
	}{
		{name: "stopped, drained in 3s", stopped: true, drain: 3 * time.Second, left: 2 * time.Second},
		{name: "stopped, drain used the window", stopped: true, drain: 5 * time.Second, left: 0},
		{name: "ended on its own", drain: 3 * time.Second, left: 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				var left time.Duration
				flush := flushSpans(ctx, func(fctx context.Context) error {
					deadline, _ := fctx.Deadline()
					left = time.Until(deadline)
					return nil
				}, 5*time.Second, slog.New(slog.DiscardHandler))
				if tc.stopped {
					cancel()
					synctest.Wait()
				}
				time.Sleep(tc.drain)
				flush()
				if left != tc.left {
					t.Errorf("flush given %v, want %v", left, tc.left)
				}
			})
		})
	}
}
