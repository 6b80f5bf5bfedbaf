package limits

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestPauseOf(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000, 0)
	soon, past := now.Add(5*time.Second), now.Add(-time.Second)
	for _, tc := range []struct {
		name   string
		pauses map[string]time.Time
		queue  string
		until  time.Time
		paused bool
	}{
		{"none", nil, "jobs", time.Time{}, false},
		{"every queue until resumed", map[string]time.Time{"": {}}, "jobs", time.Time{}, true},
		{"every queue for a while", map[string]time.Time{"": soon}, "jobs", soon, true},
		{"this queue", map[string]time.Time{"jobs": soon}, "jobs", soon, true},
		{"another queue", map[string]time.Time{"other": {}}, "jobs", time.Time{}, false},
		{"over", map[string]time.Time{"": past}, "jobs", time.Time{}, false},
		{"the later of two", map[string]time.Time{"": soon, "jobs": soon.Add(time.Minute)}, "jobs", soon.Add(time.Minute), true},
		{"until resumed wins", map[string]time.Time{"": soon, "jobs": {}}, "jobs", time.Time{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			until, paused := Control{Pauses: tc.pauses}.PauseOf(tc.queue, now)
			if paused != tc.paused || !until.Equal(tc.until) {
				t.Errorf("PauseOf = %v, %v; want %v, %v", until, paused, tc.until, tc.paused)
			}
		})
	}
}

func TestResumeEndsTheQueuesPauseOrEvery(t *testing.T) {
	t.Parallel()
	c := Control{}.Pause("", time.Time{}).Pause("jobs", time.Time{})
	if _, paused := c.Resume("jobs").PauseOf("jobs", time.Now()); !paused {
		t.Error("resuming one queue ended the pause of every queue")
	}
	if _, paused := c.Resume("").PauseOf("jobs", time.Now()); paused {
		t.Error("resuming every queue left a pause")
	}
	if len(c.Pauses) != 2 {
		t.Errorf("Resume changed the control it was called on: %v", c.Pauses)
	}
}

func TestRefusals(t *testing.T) {
	t.Parallel()
	tasks := []TaskRecord{{Task: "a", Concurrency: 4, BatchSize: 1}, {Task: "b", Concurrency: 8, BatchSize: 10}}
	for _, tc := range []struct {
		name string
		set  Settings
		want []string // the settings refused, in order
	}{
		{"within every task", Settings{Concurrency: 4}, nil},
		{"above one task's", Settings{Concurrency: 6}, []string{"--concurrency 6"}},
		{"into batch mode", Settings{BatchSize: 5}, []string{"--batch-size 5"}},
		{"out of batch mode", Settings{BatchSize: 1}, []string{"--batch-size 1"}},
		{"rates are always live", Settings{RateLimit: new(float64), FleetConcurrency: new(int)}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Refusals(tc.set, tasks)
			if len(got) != len(tc.want) {
				t.Fatalf("Refusals = %q, want %d naming %q", got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(got[i], w+":") {
					t.Errorf("refusal %d = %q, want it to name %s", i, got[i], w)
				}
			}
		})
	}
}

func TestSettingsOver(t *testing.T) {
	t.Parallel()
	rate, none := 20.0, 0.0
	own := Settings{Concurrency: 4, RateLimit: &rate, BatchSize: 1}
	got := own.Over(Settings{Concurrency: 1, RateLimit: &none})
	if got.Concurrency != 1 || *got.RateLimit != 0 || got.BatchSize != 1 || got.FleetConcurrency != nil {
		t.Errorf("Over = %+v", got)
	}
}

// steer writes a change of the control to store, as `watchbot fleet` does.
func steer(t *testing.T, store Store, change func(Control) Control) Control {
	t.Helper()
	c, err := Steer(t.Context(), store, time.Now(), func(c Control, _ []TaskRecord) (Control, error) { return change(c), nil })
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// controlFleet starts tasks of one queue, "jobs", and --concurrency 4 on a table in memory,
// with a 3 s lease.
func controlFleet(t *testing.T, names ...string) (*memStore, []*task) {
	store := newMemStore()
	cfg := DefaultConfig()
	cfg.Lease = 3 * time.Second
	cfg.Member = Member{Host: "h", Queues: []string{"jobs"}, Concurrency: 4, BatchSize: 1}
	ts := fleetOnTable(t, store, "limits", cfg, names...)
	time.Sleep(time.Millisecond)
	return store, ts
}

// Three tasks see a pause within a poll and acknowledge it; --for ends it by itself; a set
// caps each task's running jobs without stopping those that run; a task that stops drops out
// of the live ones.
func TestFleetControlReachesEveryTask(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store, ts := controlFleet(t, "a", "b", "c")
		pause := steer(t, store, func(c Control) Control { return c.Pause("", time.Now().Add(5*time.Second)) })
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		got, err := Await(ctx, store, pause.Version, time.Now)
		cancel()
		if err != nil || len(got.Live) != 3 || len(got.Lagging(pause.Version)) > 0 {
			t.Fatalf("after 2 s: %+v, %v; want 3 tasks applying version %d", got, err, pause.Version)
		}
		for _, tk := range ts {
			if _, paused := tk.FleetPause("jobs", time.Now()); !paused {
				t.Errorf("%s is not paused", tk.cfg.Task)
			}
		}
		if r := got.Live[0]; !r.AllPaused() || r.Host != "h" {
			t.Errorf("record %+v, want it paused", r)
		}
		time.Sleep(5 * time.Second)
		if _, paused := ts[0].FleetPause("jobs", time.Now()); paused {
			t.Error("a pause --for 5s still holds after 5 s")
		}

		var running []Permit
		for range 3 {
			p, ok := ts[0].TryStart("", 1)
			if !ok {
				t.Fatal("refused under no limit")
			}
			running = append(running, p)
		}
		set := steer(t, store, func(c Control) Control { c.Settings.Concurrency = 1; return c })
		time.Sleep(PollInterval + 10*time.Millisecond)
		if v := ts[0].Snapshot().ControlVersion; v != set.Version {
			t.Fatalf("version %d applied, want %d", v, set.Version)
		}
		if n := ts[0].MaxRunning(); n != 1 {
			t.Errorf("MaxRunning %d after the set, want 1", n)
		}
		if _, ok := ts[0].TryStart("", 1); ok || !ts[0].Capped() {
			t.Errorf("a start beyond --concurrency 1 with 3 running, or not capped (%v)", ts[0].Capped())
		}
		for _, p := range running {
			p.Done()
		}
		if ts[0].Capped() {
			t.Error("capped with nothing running")
		}
		if _, ok := ts[0].TryStart("", 1); !ok {
			t.Error("no start with none running under --concurrency 1")
		}

		ts[2].stop()
		<-ts[2].done
		ctx, cancel = context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		now, err := ReadTasks(ctx, store, time.Now())
		if err != nil || !slices.EqualFunc(now.Live, []string{"a", "b"}, func(r TaskRecord, id string) bool { return r.Task == id }) {
			t.Errorf("live after c stopped: %+v, %v; want a and b", now.Live, err)
		}
	})
}

// A task killed (it stops writing, and never leaves) drops out of the live tasks within one
// lease.
func TestAKilledTaskDropsOutWithinALease(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store, ts := controlFleet(t, "a", "b")
		ts[1].store.stalled.Store(true) // every call of b hangs: it is as good as dead
		time.Sleep(3*time.Second + PollInterval)
		got, err := ReadTasks(t.Context(), store, time.Now())
		if err != nil || len(got.Live) != 1 || got.Live[0].Task != "a" {
			t.Errorf("live a lease after b died: %+v, %v; want a alone", got.Live, err)
		}
		ts[1].store.stalled.Store(false)
	})
}

// A --concurrency set above a task's own (the task started after the set, with less) holds
// it to its own, a --batch-size leaves a task of one message a run as it is, and that is
// what it runs by and records.
func TestASetATaskCannotTakeKeepsItsOwn(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := newMemStore()
		set := steer(t, store, func(c Control) Control { c.Settings.Concurrency, c.Settings.BatchSize = 3, 10; return c })
		cfg := DefaultConfig()
		cfg.Member = Member{Host: "h", Queues: []string{"jobs"}, Concurrency: 2, BatchSize: 1}
		ts := fleetOnTable(t, store, "limits", cfg, "small")
		time.Sleep(PollInterval + 10*time.Millisecond)
		if n := ts[0].MaxRunning(); n != 2 {
			t.Errorf("MaxRunning %d under a set of 3, want its own 2", n)
		}
		r, ok, err := store.Task(t.Context(), "small")
		if err != nil || !ok || r.Version != set.Version || r.Applied.Concurrency != 2 || r.Applied.BatchSize != 1 || ts[0].BatchSize() != 0 {
			t.Errorf("record %+v (%v, %v), batch size %d; want version %d applied with --concurrency 2 and --batch-size 1",
				r, ok, err, ts[0].BatchSize(), set.Version)
		}
	})
}

// A command's wait reads through a blip of the table: it sees the tasks once the table
// answers again, and fails only when no read succeeded by the end.
func TestAwaitReadsThroughFailures(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store, _ := controlFleet(t, "a", "b")
		pause := steer(t, store, func(c Control) Control { return c.Pause("", time.Time{}) })
		reader := &flaky{Store: store}
		reader.down.Store(true)
		go func() {
			time.Sleep(500 * time.Millisecond)
			reader.down.Store(false)
		}()
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		got, err := Await(ctx, reader, pause.Version, time.Now)
		cancel()
		if err != nil || len(got.Live) != 2 || len(got.Lagging(pause.Version)) > 0 {
			t.Errorf("after a blip: %+v, %v; want a and b applying version %d", got.Live, err, pause.Version)
		}

		reader.down.Store(true)
		ctx, cancel = context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if _, err := Await(ctx, reader, pause.Version, time.Now); !errors.Is(err, errDown) {
			t.Errorf("a table down for the whole wait: %v, want its failure", err)
		}
	})
}

// A --rate-limit and a --fleet-concurrency set live hold the fleet as listen's flags would,
// and a set of 0 lifts them.
func TestLiveLimitsHoldTheFleet(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store, ts := controlFleet(t, "a", "b", "c")
		rate, slots := 10.0, 2
		steer(t, store, func(c Control) Control { c.Settings.RateLimit, c.Settings.FleetConcurrency = &rate, &slots; return c })
		time.Sleep(PollInterval + 10*time.Millisecond)
		const d = 20 * time.Second
		g := driveAll(t, ts, d, 4, "", 1, 100*time.Millisecond)
		if most := maxInWindow(g.starts, RateWindow(rate)); most > RateCapacity(rate) {
			t.Errorf("%d starts in a window of %v under --rate-limit 10/s set live, want at most %d", most, RateWindow(rate), RateCapacity(rate))
		}
		if g.maxRun > slots {
			t.Errorf("%d jobs at once under --fleet-concurrency 2 set live, want at most 2", g.maxRun)
		}
		none, unlimited := 0.0, 0
		steer(t, store, func(c Control) Control {
			c.Settings.RateLimit, c.Settings.FleetConcurrency = &none, &unlimited
			return c
		})
		time.Sleep(PollInterval + 10*time.Millisecond)
		g = driveAll(t, ts, d, 4, "", 1, 100*time.Millisecond)
		if per := float64(len(g.starts)) / d.Seconds(); per < 100 || g.maxRun <= slots {
			t.Errorf("%.0f starts a second, %d at once, once the limits were set to none: want 120 and 12", per, g.maxRun)
		}
	})
}
