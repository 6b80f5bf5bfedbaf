package limits

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/watchbot/watchbot/internal/testing/faultproxy"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// These tests run limiters in real time on a table of the DynamoDB emulator, reached
// through the real SDK over HTTP. They assert the limits, never a speed.

// emulatorTable creates a fresh limits table and returns the store of it through endpoint
// (the emulator's, or a proxy's in front of it), with the SDK's retries as opts set them.
func emulatorTable(t *testing.T, endpoint func(d *testenv.Dynamo) string, opts ...func(*dynamodb.Options)) (Store, string) {
	t.Helper()
	d := testenv.DynamoDB(t)
	table := d.NewTable(t, TableDefinition)
	return NewDynamoStore(testenv.DynamoClientFor(endpoint(d), opts...), table), table
}

func direct(d *testenv.Dynamo) string { return d.Endpoint }

// fleetOnTable returns one limiter of cfg per task, each with its own flaky view of store
// (down stops its calls, as if the task died), running until the test ends.
func fleetOnTable(t *testing.T, store Store, table string, cfg Config, tasks ...string) []*task {
	t.Helper()
	cfg.Table = table
	var out []*task
	for _, name := range tasks {
		c := cfg
		c.Task = name
		f := &flaky{Store: store}
		l := New(c, f, time.Now, slog.New(slog.DiscardHandler))
		ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
		tk := &task{Limiter: l, store: f, stop: cancel, done: make(chan struct{})}
		go func() {
			defer close(tk.done)
			_ = l.Run(ctx)
		}()
		t.Cleanup(func() { cancel(); <-tk.done })
		out = append(out, tk)
	}
	return out
}

func TestDynamoStoreWritesOnlyOverTheVersionItRead(t *testing.T) {
	t.Parallel()
	store, _ := emulatorTable(t, direct)
	ctx := t.Context()
	now := time.Now().Truncate(time.Millisecond)
	led, err := store.Ledger(ctx, "rate")
	if err != nil || led.Version != 0 {
		t.Fatalf("a new ledger: %+v, %v; want version 0", led, err)
	}
	first := led.With(now, "a/1", Hold{N: 3, Until: now.Add(time.Second)})
	// Two tasks write over version 0 at once: one wins.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, holder := range []string{"a/1", "b/1"} {
		wg.Go(func() {
			errs[i] = store.PutLedger(ctx, "rate", 0, led.With(now, holder, Hold{N: 3, Until: now.Add(time.Second)}))
		})
	}
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) || !errors.Is(errors.Join(errs...), ErrConflict) {
		t.Fatalf("two writes over version 0: %v; want one ErrConflict", errs)
	}
	got, err := store.Ledger(ctx, "rate")
	if err != nil || got.Version != 1 || len(got.Holds) != 1 || got.Used(now) != 3 {
		t.Fatalf("after the race: %+v, %v", got, err)
	}
	if err := store.PutLedger(ctx, "rate", 0, first); !errors.Is(err, ErrConflict) {
		t.Fatalf("a write over a stale version: %v, want ErrConflict", err)
	}
	next := got.With(now, "c/1", Hold{N: 2, Until: now.Add(2 * time.Second)})
	if err := store.PutLedger(ctx, "rate", got.Version, next); err != nil {
		t.Fatal(err)
	}
	if got, _ := store.Ledger(ctx, "rate"); got.Version != 2 || got.Used(now) != 5 || !got.Holds["c/1"].Until.Equal(now.Add(2*time.Second)) {
		t.Fatalf("after the second write: %+v", got)
	}
}

func TestDynamoStoreFleetItem(t *testing.T) {
	t.Parallel()
	store, _ := emulatorTable(t, direct)
	ctx := t.Context()
	now := time.Now().Truncate(time.Millisecond)
	if f, err := store.Fleet(ctx); err != nil || !f.PauseUntil.IsZero() || f.Live(now) != 1 {
		t.Fatalf("a new fleet item: %+v, %v", f, err)
	}
	for _, task := range []string{"a", "b", "dead"} {
		if _, err := store.Beat(ctx, task, now.Add(time.Minute), nil); err != nil {
			t.Fatal(err)
		}
	}
	f, err := store.Beat(ctx, "c", now.Add(time.Minute), []string{"dead"})
	if err != nil || f.Live(now) != 3 || f.Tasks["dead"] != (time.Time{}) {
		t.Fatalf("after a, b, dead and c beat, and dead was forgotten: %+v, %v", f, err)
	}
	if err := store.Leave(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := store.Pause(ctx, now.Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	// A shorter pause leaves the longer one in force.
	if err := store.Pause(ctx, now.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	f, err = store.Fleet(ctx)
	if err != nil || f.Live(now) != 2 || !f.PauseUntil.Equal(now.Add(5*time.Second)) {
		t.Fatalf("after a left and two pauses: %+v, %v", f, err)
	}
}

func TestDynamoTasksShareTheConcurrency(t *testing.T) {
	t.Parallel()
	store, table := emulatorTable(t, direct)
	cfg := DefaultConfig()
	cfg.Concurrency = 4
	ts := fleetOnTable(t, store, table, cfg, "a", "b", "c")
	g := driveAll(t, ts, 4*time.Second, 4, "", 1, 200*time.Millisecond)
	if g.maxRun > 4 {
		t.Errorf("%d jobs ran at once, want at most 4", g.maxRun)
	}
	t.Logf("at most %d at once, %.2f on average", g.maxRun, g.ran.Seconds()/4)
}

func TestDynamoTasksShareTheRate(t *testing.T) {
	t.Parallel()
	store, table := emulatorTable(t, direct)
	cfg := DefaultConfig()
	cfg.Rate = 20
	ts := fleetOnTable(t, store, table, cfg, "a", "b", "c")
	g := driveAll(t, ts, 4*time.Second, 4, "", 1, 0)
	starts := g.startTimes()
	if got := maxInWindow(starts, time.Second); got > 20 {
		t.Errorf("%d starts in one second, want at most 20", got)
	}
	t.Logf("%d starts in 4 s, at most %d in a second", len(starts), maxInWindow(starts, time.Second))
}

func TestDynamoSlotsOfADeadTaskLapseWithinALease(t *testing.T) {
	t.Parallel()
	store, table := emulatorTable(t, direct)
	cfg := DefaultConfig()
	cfg.Concurrency = 2
	cfg.Lease = 3 * time.Second
	ts := fleetOnTable(t, store, table, cfg, "a", "b")
	a, b := ts[0], ts[1]
	for held := 0; held < 2; {
		if _, ok := a.TryStart("", 1); ok {
			held++
			continue
		}
		select {
		case <-a.Changed():
		case <-time.After(time.Second):
		}
	}
	// a dies holding both slots: none of its calls reaches the table any more.
	a.store.down.Store(true)
	died := time.Now()
	if _, ok := b.TryStart("", 1); ok {
		t.Fatal("b started while a held both slots")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*cfg.Lease)
	defer cancel()
	g := &gauge{}
	drive(ctx, b.Limiter, g, 2, "", 1, time.Hour)
	starts := g.startTimes()
	if len(starts) != 2 {
		t.Fatalf("b started %d after a died, want both slots", len(starts))
	}
	// Within one lease of a's last renewal, which was at most a lease before it died; a
	// poll of b's on top.
	if wait := starts[1].Sub(died); wait > cfg.Lease+PollInterval+time.Second {
		t.Errorf("a's slots were free %v after it died, want within a lease (%v)", wait, cfg.Lease)
	}
}

func TestDynamoPauseReachesEveryTask(t *testing.T) {
	t.Parallel()
	store, table := emulatorTable(t, direct)
	cfg := DefaultConfig()
	ts := fleetOnTable(t, store, table, cfg, "a", "b")
	asked := time.Now()
	ts[0].Pause(3 * time.Second)
	until := ts[0].PausedUntil()
	for ts[1].PausedUntil().IsZero() {
		if time.Since(asked) > 3*PollInterval {
			t.Fatalf("b did not see a's pause in %v", time.Since(asked))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := ts[1].PausedUntil(); got.Sub(until).Abs() > time.Millisecond {
		t.Errorf("b's pause ends at %v, a's at %v", got, until)
	}
	if _, ok := ts[1].TryStart("", 1); ok && time.Now().Before(until) {
		t.Error("b started in a's pause")
	}
	t.Logf("b saw the pause %v after a asked", time.Since(asked))
}

// TestDynamoFaults runs three tasks on a table behind a proxy that fails 30% of the calls
// (a fifth answered with a 500, a tenth forwarded and their answers lost), with the SDK's
// retries off so that the limiter sees every failure. The limits hold: exceeded, at most,
// by the shares of the tasks in fallback.
func TestDynamoFaults(t *testing.T) {
	t.Parallel()
	proxy := (*faultproxy.Proxy)(nil)
	store, table := emulatorTable(t, func(d *testenv.Dynamo) string {
		p, url := faultproxy.Serve(t, d.Endpoint, faultproxy.Config{Seed: 36, Rules: []faultproxy.Rule{
			{Operations: []string{faultproxy.AnyOperation}, Fault: faultproxy.ServerError, Rate: 0.2},
			{Operations: []string{faultproxy.AnyOperation}, Fault: faultproxy.DropAfter, Rate: 0.125},
		}})
		proxy = p
		return url
	}, func(o *dynamodb.Options) { o.RetryMaxAttempts = 1 })
	cfg := DefaultConfig()
	cfg.Concurrency = 4
	cfg.Rate = 20
	ts := fleetOnTable(t, store, table, cfg, "a", "b", "c")
	const d = 8 * time.Second
	g := driveAll(t, ts, d, 4, "", 1, 100*time.Millisecond)
	fallback := 0
	for _, tk := range ts {
		if tk.Snapshot().FallbackTotal > 0 {
			fallback++
		}
	}
	// Each task in fallback may add its share: 4/3 slots (rounded down, at least 1) and
	// 20/3 starts a second (6 in a window).
	if most := 4 + fallback*1; g.maxRun > most {
		t.Errorf("%d ran at once, want at most %d (%d tasks fell back)", g.maxRun, most, fallback)
	}
	if n, most := maxInWindow(g.startTimes(), time.Second), 20+fallback*6; n > most {
		t.Errorf("%d starts in a second, want at most %d (%d tasks fell back)", n, most, fallback)
	}
	if g.running != 0 {
		t.Errorf("%d runs never ended", g.running)
	}
	var faults, calls int
	for _, op := range proxy.Stats().Operations {
		for _, n := range op.Faults {
			faults += n
		}
		calls += op.Requests
	}
	t.Logf("%d starts, at most %d at once and %d in a second; %d of %d calls faulted; %d tasks fell back",
		len(g.starts), g.maxRun, maxInWindow(g.startTimes(), time.Second), faults, calls, fallback)
}

// The limiter's client tries a call a few times, quickly, whatever the client's own setting:
// Run retries on its own, and falls back after FallbackAfter.
func TestClientOptionsRetryFewAndSoon(t *testing.T) {
	t.Parallel()
	c := dynamodb.New(dynamodb.Options{Region: "us-east-1", RetryMaxAttempts: 8}, ClientOptions)
	r := c.Options().Retryer
	if got := r.MaxAttempts(); got != callAttempts {
		t.Errorf("%d attempts, want %d", got, callAttempts)
	}
	for attempt := 1; attempt <= 5; attempt++ {
		if d, err := r.RetryDelay(attempt, errors.New("500")); err != nil || d > callMaxBackoff {
			t.Errorf("attempt %d: a wait of %v (%v), want at most %v", attempt, d, err, callMaxBackoff)
		}
	}
}
