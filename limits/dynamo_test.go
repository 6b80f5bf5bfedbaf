package limits

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// fleetOn returns limiters of cfg, one per task, sharing a fresh table of the emulator
// through the real SDK over HTTP.
func fleetOn(t *testing.T, cfg Config, tasks ...string) []*Limiter {
	t.Helper()
	d := testenv.DynamoDB(t)
	cfg.Table = d.NewTable(t, TableDefinition)
	store := NewDynamoStore(d.Client(), cfg.Table)
	var out []*Limiter
	for _, task := range tasks {
		c := cfg
		c.Task = task
		l, err := New(c, store, time.Now, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
	return out
}

// runFleet runs every limiter, and drives each from workers goroutines, until d has
// passed; then it waits for all of them.
func runFleet(t *testing.T, ls []*Limiter, d time.Duration, workers int, key string, runFor time.Duration) *gauge {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	g := &gauge{}
	var wg sync.WaitGroup
	for _, l := range ls {
		wg.Go(func() { _ = l.Run(ctx) })
		wg.Go(func() { drive(ctx, l, g, workers, key, 1, runFor) })
	}
	wg.Wait()
	return g
}

func TestDynamoTasksShareTheConcurrency(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Concurrency = 4
	ls := fleetOn(t, cfg, "a", "b", "c")
	const d, job = 4 * time.Second, 200 * time.Millisecond
	g := runFleet(t, ls, d, 4, "", job)
	if g.maxRun > 4 {
		t.Errorf("%d jobs ran at once, want at most 4", g.maxRun)
	}
	t.Logf("at most %d at once, %.2f on average", g.maxRun, g.ran.Seconds()/d.Seconds())
}

func TestDynamoTasksShareTheRate(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Rate = 20
	ls := fleetOn(t, cfg, "a", "b", "c")
	const d = 5 * time.Second
	g := runFleet(t, ls, d, 4, "", 0)
	starts := g.startTimes()
	if got := maxInWindow(starts, time.Second); got > 20 {
		t.Errorf("%d starts in one second, want at most 20", got)
	}
	t.Logf("%d starts (%.1f/s), at most %d in a second", len(starts), float64(len(starts))/d.Seconds(), maxInWindow(starts, time.Second))
}
