package supervisor

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/internal/testing/testenv"
	"github.com/watchbot/watchbot/limits"
)

// controlTable is a limits table in memory that keeps the fleet's control, as the limits
// table does, for an operator's pause; its ledgers are always empty, and no limit is set.
type controlTable struct {
	mu      sync.Mutex
	control limits.Control
}

func (c *controlTable) steer(change func(limits.Control) limits.Control) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := c.control.Version
	c.control = change(c.control)
	c.control.Version = v + 1
}

func (c *controlTable) Fleet(context.Context) (limits.Fleet, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return limits.Fleet{Control: c.control}, nil
}

func (c *controlTable) Beat(ctx context.Context, _ string, _ time.Time, _ []string) (limits.Fleet, error) {
	return c.Fleet(ctx)
}

func (*controlTable) Ledger(context.Context, string) (limits.Ledger, error) {
	return limits.Ledger{Holds: map[string]limits.Hold{}}, nil
}
func (*controlTable) PutLedger(context.Context, string, int64, limits.Ledger) error { return nil }
func (*controlTable) Leave(context.Context, string) error                           { return nil }
func (*controlTable) Pause(context.Context, time.Time) error                        { return nil }
func (*controlTable) PutControl(context.Context, int64, limits.Control) error       { return nil }
func (*controlTable) PutTask(context.Context, limits.TaskRecord) error              { return nil }
func (*controlTable) Task(context.Context, string) (limits.TaskRecord, bool, error) {
	return limits.TaskRecord{}, false, nil
}

// steeredRig starts a supervisor of o (its --concurrency, --batch-size) and --limit-wait wait
// on the queue "jobs", its jobs 3 s long, steered through a table in memory; load receives
// its gauges.
func steeredRig(t *testing.T, o rigOptions, wait time.Duration, load *Load) (*dedupeRig, *controlTable) {
	t.Helper()
	r := newLimitsRig(t, o, func(c *LimitsConfig) {
		c.Wait = wait
		c.Fleet.Table, c.Fleet.Task = "limits", "task"
		c.Fleet.Member = limits.Member{Queues: []string{"jobs"}, Concurrency: o.concurrency, BatchSize: max(1, o.batchSize)}
	})
	r.behave = func(workerCall) workerAct { return workerAct{Took: 3 * time.Second} }
	table := &controlTable{}
	lim := limits.New(r.cfg.Limits.Fleet, table, time.Now, nil)
	r.stop = testenv.Run(r.t, "supervisor", 10*time.Minute, func(ctx context.Context) error {
		return Run(ctx, r.cfg, Deps{SQS: r.sqs, Logger: slog.New(slog.NewJSONHandler(r.logs, nil)), Metrics: r.metrics, spawn: r.spawn,
			Limiter: lim, PerQueue: map[string]QueueDeps{"jobs": {Load: load}}})
	}, r.trail)
	return r, table
}

// holdReadAhead sends ten messages and returns once four have run: the first runs have
// ended, and a read-ahead is held beside the runs under way.
func holdReadAhead(r *dedupeRig) {
	r.t.Helper()
	r.sendKeyed("a=", "b=", "c=", "d=", "e=", "f=", "g=", "h=", "i=", "j=")
	r.waitFor("four runs", time.Minute, func() bool { return len(r.bodies()) == 4 })
}

// An operator's pause of the queue: within a poll no run starts and nothing is received,
// the runs under way finish and are deleted, and the held messages go back to the queue
// once the pause has lasted --limit-wait; a resume lets the rest run, once each.
func TestFleetPauseStopsTheQueue(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r, table := steeredRig(t, rigOptions{concurrency: 2}, 5*time.Second, NewLoad())
		holdReadAhead(r)
		table.steer(func(c limits.Control) limits.Control { return c.Pause("jobs", time.Time{}) })
		time.Sleep(limits.PollInterval + 10*time.Millisecond)
		receives, runs := r.metrics.get(alarms.MessageReceives), len(r.bodies())
		time.Sleep(4 * time.Second)
		if n := len(r.bodies()); n != runs || runs != 4 {
			t.Errorf("%d runs started in the pause, %d before it; want none and 4", n-runs, runs)
		}
		if got := r.metrics.get(alarms.MessageReceives); got != receives {
			t.Errorf("%v messages received in the pause", got-receives)
		}
		time.Sleep(2 * time.Second) // past --limit-wait
		for _, m := range r.sqs.Messages(r.queue) {
			if m.InFlight {
				t.Errorf("message %s still held %v into the pause, past --limit-wait", m.Body, 6*time.Second)
			}
		}
		if r.metrics.get(alarms.LimitReleases) == 0 {
			t.Error("no held message released: want the read-ahead back in the queue")
		}
		if n := len(r.sqs.Messages(r.queue)); n != 6 {
			t.Errorf("%d messages in the queue, want the 6 not started: the 4 that ran deleted", n)
		}
		table.steer(func(c limits.Control) limits.Control { return c.Resume("") })
		r.waitFor("an empty queue", 5*time.Minute, r.empty)
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		for body, n := range r.runsOf() {
			if n != 1 {
				t.Errorf("%s ran %d times, want once", body, n)
			}
		}
	})
}

// A --concurrency set live below the task's own stops no run under way, then holds the task
// to it: the runs at once, the ConcurrencyLimit gauge and what the scheduler receives for.
func TestFleetSetConcurrencyHoldsTheRunsAndTheGauge(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		load := NewLoad()
		r, table := steeredRig(t, rigOptions{concurrency: 4}, 30*time.Second, load)
		r.sendKeyed("a=", "b=", "c=", "d=", "e=", "f=", "g=", "h=", "i=", "j=")
		r.waitFor("four runs", time.Minute, func() bool { return load.Running() == 4 })
		if got := load.Limit(); got != 4 {
			t.Fatalf("ConcurrencyLimit %d before the set, want 4", got)
		}
		table.steer(func(c limits.Control) limits.Control { c.Settings.Concurrency = 1; return c })
		time.Sleep(limits.PollInterval + 10*time.Millisecond)
		if got, running := load.Limit(), load.Running(); got != 1 || running != 4 {
			t.Errorf("ConcurrencyLimit %d with %d running after the set, want 1 with the 4 under way", got, running)
		}
		r.mu.Lock()
		r.maxBusy = 0
		r.mu.Unlock()
		r.waitFor("an empty queue", 5*time.Minute, r.empty)
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		if r.maxBusy > 1 {
			t.Errorf("%d runs at once after the set's runs ended, want 1", r.maxBusy)
		}
		for body, n := range r.runsOf() {
			if n != 1 {
				t.Errorf("%s ran %d times, want once: a run under way at the set was stopped", body, n)
			}
		}
	})
}

// A pause that ends within --limit-wait costs the held messages nothing: none goes back to
// the queue, and the heartbeat keeps their leases past the visibility timeout (30 s), so
// each is received once and runs once after it.
func TestAShortFleetPauseKeepsTheHeldMessages(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r, table := steeredRig(t, rigOptions{concurrency: 2}, time.Minute, NewLoad())
		holdReadAhead(r)
		table.steer(func(c limits.Control) limits.Control { return c.Pause("", time.Now().Add(40*time.Second)) })
		time.Sleep(35 * time.Second)
		for _, m := range r.sqs.Messages(r.queue) {
			if !m.InFlight {
				t.Errorf("message %s visible again 35 s into the pause: its lease lapsed", m.Body)
			}
		}
		r.waitFor("an empty queue", 5*time.Minute, r.empty)
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		if n := r.metrics.get(alarms.LimitReleases); n != 0 {
			t.Errorf("%v held messages released in a pause shorter than --limit-wait, want none", n)
		}
		if got := r.metrics.get(alarms.MessageReceives); got != 10 {
			t.Errorf("MessageReceives = %v, want 10: each message received once", got)
		}
		for body, n := range r.runsOf() {
			if n != 1 {
				t.Errorf("%s ran %d times, want once", body, n)
			}
		}
	})
}

// A --batch-size set live on a task in batch mode makes its next runs that size: nine messages
// run in runs of at most 3 (of up to 9 at the task's own 10), at least one of them full. How
// the nine split otherwise depends on how the receives meet the sends.
func TestFleetSetBatchSize(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r, table := steeredRig(t, rigOptions{concurrency: 1, batchSize: 10}, 30*time.Second, NewLoad())
		table.steer(func(c limits.Control) limits.Control { c.Settings.BatchSize = 3; return c })
		time.Sleep(limits.PollInterval + 10*time.Millisecond)
		r.sendKeyed("a=", "b=", "c=", "d=", "e=", "f=", "g=", "h=", "i=")
		r.waitFor("an empty queue", 5*time.Minute, r.empty)
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		sizes := map[time.Time]int{} // a run's messages start at one instant
		r.mu.Lock()
		for _, c := range r.runs {
			sizes[c.At]++
		}
		r.mu.Unlock()
		got := slices.Sorted(maps.Values(sizes))
		total := 0
		for _, n := range got {
			total += n
		}
		if total != 9 || len(got) == 0 || got[len(got)-1] != 3 {
			t.Errorf("runs of %v messages, want the nine in runs of at most 3, one of them 3", got)
		}
	})
}
