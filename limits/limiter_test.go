package limits

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// gauge counts starts and running jobs across the limiters of a test.
type gauge struct {
	mu      sync.Mutex
	starts  []time.Time
	running int
	maxRun  int
	// ran sums the time each job ran.
	ran time.Duration
}

func (g *gauge) started(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.starts = append(g.starts, time.Now())
	g.running += n
	g.maxRun = max(g.maxRun, g.running)
}

func (g *gauge) ended(n int, d time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.running -= n
	g.ran += time.Duration(n) * d
}

func (g *gauge) startTimes() []time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]time.Time(nil), g.starts...)
}

// drive uses l as the supervisor does, from workers goroutines until ctx ends: each tries
// to start n for key, and when refused waits until Changed fires (every waiting worker then
// tries again, as the supervisor tries every waiting message) or a second passes. Each run
// lasts runFor.
func drive(ctx context.Context, l *Limiter, g *gauge, workers int, key string, n int, runFor time.Duration) {
	b, stop := watch(ctx, l)
	defer stop()
	driveWith(ctx, l, b, g, workers, key, n, runFor)
}

// watch relays l's Changed to every waiter until stop is called. A limiter has one: two
// would share its signals out between them.
func watch(ctx context.Context, l *Limiter) (b *broadcast, stop func()) {
	var wg sync.WaitGroup
	b = &broadcast{c: make(chan struct{})}
	ctx, cancel := context.WithCancel(ctx)
	wg.Go(func() { b.relay(ctx, l.Changed()) })
	return b, func() { cancel(); wg.Wait() }
}

// driveWith is drive, for a limiter that b watches already.
func driveWith(ctx context.Context, l *Limiter, b *broadcast, g *gauge, workers int, key string, n int, runFor time.Duration) {
	var workersWG sync.WaitGroup
	for range workers {
		workersWG.Go(func() {
			for ctx.Err() == nil {
				changed := b.wait()
				p, ok := l.TryStart(key, n)
				if !ok {
					select {
					case <-ctx.Done():
					case <-changed:
					case <-time.After(time.Second):
					}
					continue
				}
				g.started(n)
				began := time.Now()
				if runFor > 0 {
					// A run ends early when the test ends.
					select {
					case <-ctx.Done():
					case <-time.After(runFor):
					}
				}
				g.ended(n, time.Since(began))
				p.Done()
			}
		})
	}
	workersWG.Wait()
}

// broadcast turns the coalesced Changed signal into one every waiter sees.
type broadcast struct {
	mu sync.Mutex
	c  chan struct{}
}

// wait returns a channel that closes at the next signal after the call.
func (b *broadcast) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.c
}

func (b *broadcast) relay(ctx context.Context, changed <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
			b.mu.Lock()
			close(b.c)
			b.c = make(chan struct{})
			b.mu.Unlock()
		}
	}
}

// maxInWindow is the most starts in any window of w.
func maxInWindow(starts []time.Time, w time.Duration) int {
	best, j := 0, 0
	for i := range starts {
		for starts[i].Sub(starts[j]) >= w {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

func TestLocalRateHoldsEveryWindowAndKeepsUp(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Rate = 20
		l := New(cfg, nil, time.Now, nil)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		wg.Go(func() { _ = l.Run(ctx) })
		g := &gauge{}
		drive(ctx, l, g, 4, "", 1, 0)
		wg.Wait()
		if got := maxInWindow(g.starts, time.Second); got > 20 {
			t.Errorf("%d starts in one second, want at most 20", got)
		}
		if rate := float64(len(g.starts)) / 10; rate < 18 {
			t.Errorf("%.1f starts a second, want at least 18", rate)
		}
	})
}

func TestSnapshotSaysWhatTheTaskHoldsAndWaited(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Rate, cfg.Concurrency = 10, 2
		l := runningLimiter(t, cfg)
		var permits []Permit
		for len(permits) < 2 {
			if p, ok := l.TryStart("", 1); ok {
				permits = append(permits, p)
				continue
			}
			time.Sleep(100 * time.Millisecond)
		}
		if _, ok := l.TryStart("", 1); ok {
			t.Fatal("a third run started under a concurrency of 2")
		}
		time.Sleep(time.Second)
		s := l.Snapshot()
		if s.Running != 2 || s.Slots != 2 || s.HeldBack < 2 || s.Waited < time.Second || s.Rate != 10 || s.Concurrency != 2 ||
			s.Table != "" || s.LiveTasks != 1 || s.Fallback {
			t.Errorf("snapshot %+v: want 2 running on 2 slots, starts held back, a second waited, in process", s)
		}
		for _, p := range permits {
			p.Done()
			p.Done() // a second Done does nothing
		}
		if s := l.Snapshot(); s.Running != 0 {
			t.Errorf("%d running after every Done", s.Running)
		}
		Permit{}.Done()
	})
}
