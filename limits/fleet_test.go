package limits

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// These tests run limiters in a testing/synctest bubble, on a Store in memory that they
// share as tasks share a table (memStore behaves as the table does: whole-ledger writes
// conditional on the version).

// flaky is a Store that counts its calls, fails all of them while down is set, and holds
// them until their context ends while stalled is set. With faults set (faulty) it fails that
// share of the calls at random.
type flaky struct {
	Store
	down, stalled atomic.Bool
	calls         atomic.Int64
	mu            sync.Mutex
	faults        float64
	rng           *rand.Rand
}

// faulty makes f fail share of its calls, in an order seed decides.
func (f *flaky) faulty(share float64, seed uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults, f.rng = share, rand.New(rand.NewPCG(seed, seed))
}

var errDown = errors.New("DynamoDB is down (a test's flaky store)")

func (f *flaky) call(ctx context.Context) error {
	f.calls.Add(1)
	if f.stalled.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	if f.down.Load() {
		return errDown
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.faults > 0 && f.rng.Float64() < f.faults {
		return errDown
	}
	return nil
}

func (f *flaky) Ledger(ctx context.Context, name string) (Ledger, error) {
	if err := f.call(ctx); err != nil {
		return Ledger{}, err
	}
	return f.Store.Ledger(ctx, name)
}

func (f *flaky) PutLedger(ctx context.Context, name string, prev int64, l Ledger) error {
	if err := f.call(ctx); err != nil {
		return err
	}
	return f.Store.PutLedger(ctx, name, prev, l)
}

func (f *flaky) Fleet(ctx context.Context) (Fleet, error) {
	if err := f.call(ctx); err != nil {
		return Fleet{}, err
	}
	return f.Store.Fleet(ctx)
}

func (f *flaky) Beat(ctx context.Context, task string, until time.Time, gone []string) (Fleet, error) {
	if err := f.call(ctx); err != nil {
		return Fleet{}, err
	}
	return f.Store.Beat(ctx, task, until, gone)
}

func (f *flaky) Leave(ctx context.Context, task string) error {
	if err := f.call(ctx); err != nil {
		return err
	}
	return f.Store.Leave(ctx, task)
}

func (f *flaky) Pause(ctx context.Context, until time.Time) error {
	if err := f.call(ctx); err != nil {
		return err
	}
	return f.Store.Pause(ctx, until)
}

func (f *flaky) PutControl(ctx context.Context, prev int64, c Control) error {
	if err := f.call(ctx); err != nil {
		return err
	}
	return f.Store.PutControl(ctx, prev, c)
}

func (f *flaky) PutTask(ctx context.Context, r TaskRecord) error {
	if err := f.call(ctx); err != nil {
		return err
	}
	return f.Store.PutTask(ctx, r)
}

func (f *flaky) Task(ctx context.Context, task string) (TaskRecord, bool, error) {
	if err := f.call(ctx); err != nil {
		return TaskRecord{}, false, err
	}
	return f.Store.Task(ctx, task)
}

// task is one limiter of a fleet in a test, with its own view of the shared store.
type task struct {
	*Limiter
	store *flaky
	stop  context.CancelFunc
	done  chan struct{}
}

// fleet starts one limiter per name on one shared store in memory, each running until the
// test ends or its stop is called.
func fleet(t *testing.T, cfg Config, names ...string) []*task {
	t.Helper()
	return fleetOnTable(t, newMemStore(), "limits", cfg, names...)
}

// driveAll drives every task for d from workers goroutines each, jobs lasting runFor.
func driveAll(t *testing.T, ts []*task, d time.Duration, workers int, key string, n int, runFor time.Duration) *gauge {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	g := &gauge{}
	var wg sync.WaitGroup
	for _, tk := range ts {
		wg.Go(func() { drive(ctx, tk.Limiter, g, workers, key, n, runFor) })
	}
	wg.Wait()
	return g
}

func TestRateBoundsEveryWindow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		rate    float64
		tasks   int
		workers int
		batch   int
		runFor  time.Duration
	}{
		{"one task, quick jobs", 20, 1, 4, 1, 0},
		{"three tasks, quick jobs", 20, 3, 4, 1, 0},
		{"three tasks, one worker each, 100 ms jobs", 20, 3, 1, 1, 100 * time.Millisecond},
		{"three tasks, batches of 3", 20, 3, 2, 3, 10 * time.Millisecond},
		{"five tasks, 300/m", 5, 5, 2, 1, 0},
		{"two tasks, 30/m: one start in any 2 s", 0.5, 2, 2, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := DefaultConfig()
				cfg.Rate = tc.rate
				names := []string{"a", "b", "c", "d", "e"}[:tc.tasks]
				const d = 20 * time.Second
				g := driveAll(t, fleet(t, cfg, names...), d, tc.workers, "", tc.batch, tc.runFor)
				starts := len(g.starts) * tc.batch
				limit := RateCapacity(tc.rate)
				w := RateWindow(tc.rate)
				// A batch counts as many starts as it has messages.
				most := maxInWindow(g.starts, w) * tc.batch
				if most > limit {
					t.Errorf("%d starts in a window of %v, want at most %d", most, w, limit)
				}
				if demand := float64(tc.tasks*tc.workers*tc.batch) / max(tc.runFor.Seconds(), 0.001); demand > tc.rate {
					// Backlogged: the fleet keeps up with the limit (less the
					// chunks' validity, and one window to start).
					// A window admits whole batches only.
					most := float64(limit/tc.batch*tc.batch) / w.Seconds()
					if got := float64(starts) / d.Seconds(); got < 0.9*most {
						t.Errorf("%.2f starts a second, want at least %.2f", got, 0.9*most)
					}
				}
				t.Logf("%d starts in %v, at most %d in a window of %v", starts, d, most, w)
			})
		})
	}
}

func TestBurstIsOneSecondsWorth(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Rate = 20
		ts := fleet(t, cfg, "a")
		t0 := time.Now()
		g := driveAll(t, ts, 1500*time.Millisecond, 30, "", 1, 0)
		atOnce := 0
		for _, s := range g.starts {
			if s.Sub(t0) < 50*time.Millisecond {
				atOnce++
			}
		}
		if atOnce != 20 {
			t.Errorf("an idle limiter started %d at once, want 20 (a second's worth)", atOnce)
		}
		if n := maxInWindow(g.starts, time.Second); n > 20 {
			t.Errorf("%d starts in a second, want at most 20", n)
		}
	})
}

func TestChunksFollowDemandAndSpareCalls(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Rate = 1000
		ts := fleet(t, cfg, "busy", "slow")
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		busy, slow := &gauge{}, &gauge{}
		var wg sync.WaitGroup
		// Far below the limit: 400 starts a second, and 2.
		wg.Go(func() { drive(ctx, ts[0].Limiter, busy, 4, "", 1, 10*time.Millisecond) })
		wg.Go(func() { drive(ctx, ts[1].Limiter, slow, 1, "", 1, 500*time.Millisecond) })
		wg.Wait()
		if got := len(busy.starts); got < 3900 {
			t.Errorf("the busy task started %d in 10 s, want about 4000: a limit far from binding held it back", got)
		}
		if got := len(slow.starts); got < 19 {
			t.Errorf("the slow task started %d in 10 s, want 20", got)
		}
		// Calls: the busy task's chunks are a second's worth of its starts.
		calls := ts[0].store.calls.Load()
		if per := float64(calls) / float64(len(busy.starts)); per > 0.05 {
			t.Errorf("the busy task made %d calls for %d starts (%.3f a start), want at most 0.05", calls, len(busy.starts), per)
		}
		t.Logf("busy: %d starts, %d calls; slow: %d starts, %d calls", len(busy.starts), calls, len(slow.starts), ts[1].store.calls.Load())
	})
}

func TestConcurrencyIsSharedAndSlotsComeBack(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Concurrency = 4
		const d, job = 60 * time.Second, 2 * time.Second
		g := driveAll(t, fleet(t, cfg, "a", "b", "c"), d, 4, "", 1, job)
		if g.maxRun > 4 {
			t.Errorf("%d jobs ran at once, want at most 4", g.maxRun)
		}
		if avg := g.ran.Seconds() / d.Seconds(); avg < 3.5 {
			t.Errorf("%.2f jobs ran on average, want at least 3.5", avg)
		}
	})
}

func TestIdleSlotsGoToTheTaskThatNeedsThem(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Concurrency = 4
		ts := fleet(t, cfg, "a", "b")
		// a fills every slot for 5 s, then has nothing to run; b waits.
		g := driveAll(t, ts[:1], 5*time.Second, 4, "", 1, time.Second)
		if g.maxRun != 4 {
			t.Fatalf("a ran %d at once, want 4", g.maxRun)
		}
		t1 := time.Now()
		gb := driveAll(t, ts[1:], 3*time.Second, 4, "", 1, time.Second)
		if len(gb.starts) < 4 || gb.starts[3].Sub(t1) > time.Second {
			t.Errorf("b had %d starts, the 4th at %v; want a's 4 idle slots within a second", len(gb.starts), gb.startTimes())
		}
	})
}

func TestLeasesRenewWhileJobsRunAndLapseWhenATaskDies(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Concurrency = 2
		cfg.Lease = 6 * time.Second
		ts := fleet(t, cfg, "a", "b")
		a, b := ts[0], ts[1]
		// a takes both slots for jobs far longer than a lease.
		permits := take(t, a.Limiter, 2, time.Second)
		// While a renews, b gets nothing.
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		gb := &gauge{}
		drive(ctx, b.Limiter, gb, 1, "", 1, time.Second)
		cancel()
		if len(gb.starts) != 0 {
			t.Fatalf("b started %d while a held both slots and renewed its lease", len(gb.starts))
		}
		// a dies: no call of it reaches the table any more.
		died := time.Now()
		a.store.down.Store(true)
		ctx, cancel = context.WithTimeout(t.Context(), 2*cfg.Lease)
		defer cancel()
		drive(ctx, b.Limiter, gb, 2, "", 1, 30*time.Second)
		if len(gb.starts) != 2 {
			t.Fatalf("b started %d after a died, want both slots", len(gb.starts))
		}
		if wait := gb.starts[1].Sub(died); wait > cfg.Lease+PollInterval {
			t.Errorf("a's slots were free %v after it died, want within a lease (%v)", wait, cfg.Lease)
		}
		doneAll(permits)
	})
}

func TestPerKeyLimitsHoldOneKeyAndNotTheOthers(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.ConcurrencyPerKey = 1
		cfg.Concurrency = 10
		ts := fleet(t, cfg, "a", "b", "c")
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		gauges := map[string]*gauge{"busy": {}, "x": {}, "y": {}}
		var wg sync.WaitGroup
		var watches []*broadcast
		for _, tk := range ts {
			b, stop := watch(ctx, tk.Limiter)
			defer stop()
			watches = append(watches, b)
			wg.Go(func() { driveWith(ctx, tk.Limiter, b, gauges["busy"], 3, "busy", 1, time.Second) })
			wg.Go(func() { driveWith(ctx, tk.Limiter, b, gauges["x"], 1, "x", 1, time.Second) })
		}
		wg.Go(func() { driveWith(ctx, ts[0].Limiter, watches[0], gauges["y"], 1, "y", 1, time.Second) })
		wg.Wait()
		for key, g := range gauges {
			if g.maxRun > 1 {
				t.Errorf("key %s ran %d at once, want 1", key, g.maxRun)
			}
			// One at a time for 20 s, a second each, less the time slots take to move.
			if len(g.starts) < 18 {
				t.Errorf("key %s started %d in 20 s, want about 20: another key held it back", key, len(g.starts))
			}
		}
	})
}

func TestPauseIsCappedAndHoldsTheFleet(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.MaxPause = 5 * time.Second
		ts := fleet(t, cfg, "a", "b")
		a, b := ts[0], ts[1]
		t0 := time.Now()
		a.Pause(time.Hour)
		if got := a.PausedUntil(); !got.Equal(t0.Add(cfg.MaxPause)) {
			t.Fatalf("a pause of an hour lasts until %v, want capped at %v", got, t0.Add(cfg.MaxPause))
		}
		if _, ok := a.TryStart("", 1); ok {
			t.Fatal("a started in its own pause")
		}
		time.Sleep(PollInterval + 10*time.Millisecond)
		if got := b.PausedUntil(); !got.Equal(t0.Add(cfg.MaxPause)) {
			t.Fatalf("b sees a pause until %v one poll later, want %v", got, t0.Add(cfg.MaxPause))
		}
		if _, ok := b.TryStart("", 1); ok {
			t.Fatal("b started in the fleet's pause")
		}
		// A shorter pause does not shorten it.
		b.Pause(time.Second)
		if got := b.PausedUntil(); !got.Equal(t0.Add(cfg.MaxPause)) {
			t.Errorf("a shorter pause moved the end to %v", got)
		}
		<-b.Changed()
		if now := time.Now(); now.Before(t0.Add(cfg.MaxPause)) {
			t.Errorf("Changed fired at %v, before the pause ended", now.Sub(t0))
		}
		if _, ok := b.TryStart("", 1); !ok {
			t.Error("b could not start once the pause ended")
		}
		if s := a.Snapshot(); !s.PausedUntil.Equal(t0.Add(cfg.MaxPause)) {
			t.Errorf("snapshot pause = %v", s.PausedUntil)
		}
	})
}

func TestLocalPauseHoldsTheTaskAlone(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		l := New(DefaultConfig(), nil, time.Now, nil)
		l.Pause(2 * time.Second)
		if _, ok := l.TryStart("", 1); ok {
			t.Fatal("started in a pause")
		}
		time.Sleep(2 * time.Second)
		p, ok := l.TryStart("", 1)
		if !ok {
			t.Fatal("could not start once the pause ended")
		}
		p.Done()
	})
}

func TestFallbackHoldsToTheShareAndComesBack(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Concurrency = 6
		cfg.Rate = 30
		ts := fleet(t, cfg, "a", "b", "c")
		// Every task beats at once, and reads the fleet row again a poll later.
		time.Sleep(PollInterval + time.Second/2)
		for _, tk := range ts {
			if s := tk.Snapshot(); s.LiveTasks != 3 {
				t.Fatalf("%s sees %d live tasks, want 3", tk.cfg.Task, s.LiveTasks)
			}
			tk.store.down.Store(true)
		}
		down := time.Now()
		g := driveAll(t, ts, 20*time.Second, 4, "", 1, 500*time.Millisecond)
		// Each task's share: 6/3 = 2 running, 30/3 = 10 starts a second.
		if g.maxRun > 6 {
			t.Errorf("%d ran at once in fallback, want at most 3 shares of 2", g.maxRun)
		}
		if n := maxInWindow(g.starts, time.Second); n > 30 {
			t.Errorf("%d starts in a second in fallback, want at most 3 shares of 10", n)
		}
		if len(g.starts) < 200 {
			t.Errorf("%d starts in 20 s of fallback, want about 240: the shares did not run", len(g.starts))
		}
		for _, tk := range ts {
			s := tk.Snapshot()
			if !s.Fallback || s.FallbackSince.Sub(down) > FallbackAfter+time.Second {
				t.Errorf("%s: fallback %v since %v, want since about %v", tk.cfg.Task, s.Fallback, s.FallbackSince.Sub(down), FallbackAfter)
			}
			tk.store.down.Store(false)
		}
		time.Sleep(2 * HeartbeatInterval)
		for _, tk := range ts {
			if s := tk.Snapshot(); s.Fallback || s.FallbackTotal < 15*time.Second {
				t.Errorf("%s: fallback %v, %v in all, after DynamoDB came back", tk.cfg.Task, s.Fallback, s.FallbackTotal)
			}
		}
	})
}

func TestAStalledTableFallsBackAndRecovers(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Concurrency = 4
		ts := fleet(t, cfg, "a", "b")
		time.Sleep(PollInterval + time.Second/2)
		for _, tk := range ts {
			tk.store.stalled.Store(true)
		}
		stalled := time.Now()
		ctx, cancel := context.WithCancel(t.Context())
		g := &gauge{}
		var wg sync.WaitGroup
		for _, tk := range ts {
			wg.Go(func() { drive(ctx, tk.Limiter, g, 4, "", 1, time.Second) })
		}
		// Every call hangs: each task falls back to its share, 2 of the 4.
		time.Sleep(FallbackAfter + callTimeout + time.Second)
		for _, tk := range ts {
			if s := tk.Snapshot(); !s.Fallback || s.FallbackSince.Sub(stalled) > FallbackAfter+callTimeout {
				t.Errorf("%s: fallback %v since %v after the stall", tk.cfg.Task, s.Fallback, s.FallbackSince.Sub(stalled))
			}
			tk.store.stalled.Store(false)
		}
		time.Sleep(callTimeout + 2*PollInterval)
		for _, tk := range ts {
			if s := tk.Snapshot(); s.Fallback {
				t.Errorf("%s still in fallback once the table answers", tk.cfg.Task)
			}
		}
		cancel()
		wg.Wait()
		// The documented bound: the limit, plus the share of each task in fallback.
		if g.maxRun > 4+2*2 {
			t.Errorf("%d ran at once, want at most 8 (4, and two shares of 2)", g.maxRun)
		}
		t.Logf("at most %d at once", g.maxRun)
	})
}

func TestRatePerKeyHoldsEachKeyApart(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.RatePerKey = 5
		cfg.Rate = 100
		ts := fleet(t, cfg, "a", "b")
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		gauges := map[string]*gauge{"x": {}, "y": {}}
		var wg sync.WaitGroup
		for _, tk := range ts {
			b, stop := watch(ctx, tk.Limiter)
			defer stop()
			for key, g := range gauges {
				wg.Go(func() { driveWith(ctx, tk.Limiter, b, g, 3, key, 1, 0) })
			}
		}
		wg.Wait()
		for key, g := range gauges {
			if n := maxInWindow(g.starts, time.Second); n > 5 {
				t.Errorf("key %s: %d starts in a second, want at most 5", key, n)
			}
			if len(g.starts) < 45 {
				t.Errorf("key %s: %d starts in 10 s, want about 50", key, len(g.starts))
			}
		}
	})
}

func TestABatchLargerThanTheLimitTakesTheWholeLimit(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Rate, cfg.Concurrency = 5, 4
		g := driveAll(t, fleet(t, cfg, "a"), 10*time.Second, 2, "", 10, 500*time.Millisecond)
		// Each batch of 10 counts as 5 starts and 4 slots: one runs at a time, one a second.
		if len(g.starts) < 9 {
			t.Errorf("%d batches of 10 in 10 s, want about 10", len(g.starts))
		}
		if n := maxInWindow(g.starts, time.Second); n > 1 {
			t.Errorf("%d batches in a second, want 1", n)
		}
	})
}

// take starts n runs on l as the supervisor does (trying again when Changed fires or a
// second passes), and returns their permits; when they are not all running within limit it
// fails the test and returns those it has.
func take(t *testing.T, l *Limiter, n int, limit time.Duration) []Permit {
	t.Helper()
	deadline := time.After(limit)
	var permits []Permit
	for len(permits) < n {
		if p, ok := l.TryStart("", 1); ok {
			permits = append(permits, p)
			continue
		}
		select {
		case <-l.Changed():
		case <-time.After(time.Second):
		case <-deadline:
			led, _ := l.store.(*flaky).Store.Ledger(context.Background(), ledgerConcurrency)
			t.Errorf("%s: %d of %d runs within %v; the table: %+v", l.cfg.Task, len(permits), n, limit, led)
			return permits
		}
	}
	return permits
}

func doneAll(permits []Permit) {
	for _, p := range permits {
		p.Done()
	}
}

// A task that was refused again and again while the fleet was full, and then ran out of
// work, gives its slots back: its demand of the time does not keep them from a task that
// waits.
func TestSlotsOfATaskWhoseDemandPassedGoBack(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Concurrency = 4
		ts := fleet(t, cfg, "a", "b", "c")
		a, b, c := ts[0].Limiter, ts[1].Limiter, ts[2].Limiter
		bp := take(t, b, 2, time.Second)
		ap := take(t, a, 2, time.Second)
		// a holds a third message: the supervisor tries it on every pass while the fleet
		// is full.
		for range 5 {
			if _, ok := a.TryStart("", 1); ok {
				t.Fatal("a started a fifth run of a fleet of 4")
			}
			time.Sleep(300 * time.Millisecond)
		}
		// c waits for slots too; then a's runs end and its third message takes one of its
		// slots, and b's runs end.
		var wg sync.WaitGroup
		var cp []Permit
		waited := time.Now()
		wg.Go(func() { cp = take(t, c, 4, 10*time.Second) })
		time.Sleep(500 * time.Millisecond)
		doneAll(ap)
		doneAll(take(t, a, 1, 100*time.Millisecond))
		doneAll(bp)
		freed := time.Now()
		wg.Wait()
		if d := time.Since(freed); d > 2*time.Second {
			t.Errorf("c had every slot %v after a and b ran out of work, want within 2 s", d)
		}
		t.Logf("c waited %v, %v after the slots were free", time.Since(waited), time.Since(freed))
		doneAll(cp)
	})
}

// DynamoDB fails 30% of the calls while three tasks share 3 slots, then two of them run out
// of work: the third has every slot soon after, not a lease later, though the give-backs
// fail as often as the other calls; and at most a fallback share per task in fallback runs
// beyond the limit.
func TestSlotsGoToTheTaskThatNeedsThemUnderFaults(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Concurrency = 3
		ts := fleet(t, cfg, "a", "b", "c")
		for i, tk := range ts {
			tk.store.faulty(0.3, uint64(i+1))
		}
		g := driveAll(t, ts, 10*time.Second, 3, "", 1, 300*time.Millisecond)
		wanted := time.Now()
		// c's runs outlast the drive, which ends them.
		gc := driveAll(t, ts[2:], 10*time.Second, 3, "", 1, time.Minute)
		if len(gc.starts) != 3 {
			t.Fatalf("c started %d runs once a and b ran out of work, want 3: at %v", len(gc.starts), gc.starts)
		}
		if d := gc.starts[2].Sub(wanted); d > 3*time.Second {
			t.Errorf("c had its third slot %v after a and b ran out of work, want within 3 s", d)
		}
		fallback := 0
		for _, tk := range ts {
			if tk.Snapshot().FallbackTotal > 0 {
				fallback++
			}
		}
		if most := 3 + fallback; g.maxRun > most {
			t.Errorf("%d ran at once, want at most %d (%d tasks fell back, a share of 1 each)", g.maxRun, most, fallback)
		}
		t.Logf("%d starts, at most %d at once; %d tasks fell back; c's starts %v after", len(g.starts), g.maxRun, fallback, gc.starts[2].Sub(wanted))
	})
}

// Tasks that could never read the table do not know how many share the limits: in fallback
// each takes the smallest share, one slot and one start a second.
func TestAFallbackBeforeTheTableWasReadTakesTheSmallestShare(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Concurrency, cfg.Rate = 6, 30
		down := &flaky{Store: newMemStore()}
		down.down.Store(true)
		ts := fleetOnTable(t, down, "limits", cfg, "a", "b", "c")
		g := driveAll(t, ts, 10*time.Second, 4, "", 1, 500*time.Millisecond)
		if g.maxRun > 3 {
			t.Errorf("%d ran at once, want at most 3 (one each)", g.maxRun)
		}
		if n := maxInWindow(g.starts, time.Second); n > 3 {
			t.Errorf("%d starts in a second, want at most 3 (one each)", n)
		}
		// From the fallback on, 2 s in: a start a second each, less the retries' lag.
		if len(g.starts) < 15 {
			t.Errorf("%d starts in 10 s, want about 20: the fallback shares did not run", len(g.starts))
		}
		for _, tk := range ts {
			if s := tk.Snapshot(); !s.Fallback || s.LiveTasks != 0 {
				t.Errorf("%s: fallback %v, %d live tasks; want the fallback, with the fleet unknown", tk.cfg.Task, s.Fallback, s.LiveTasks)
			}
		}
	})
}
