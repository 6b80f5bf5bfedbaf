package supervisor

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/setting"
	"github.com/watchbot/watchbot/internal/testing/testenv"
	"github.com/watchbot/watchbot/limits"
)

func TestCheckLimits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		edit    func(*LimitsConfig)
		batch   int
		setting setting.Name // "" for none
	}{
		{name: "defaults: pauses only", edit: func(*LimitsConfig) {}},
		{name: "rate and fleet concurrency", edit: func(c *LimitsConfig) { c.Fleet.Rate, c.Fleet.Concurrency = 20, 4 }},
		{name: "per key with a key", edit: func(c *LimitsConfig) { c.Fleet.ConcurrencyPerKey, c.Key = 1, "attr:tenant" }},
		{name: "per key by group", edit: func(c *LimitsConfig) { c.Fleet.RatePerKey, c.Key = 2, "group" }},
		{name: "negative rate", edit: func(c *LimitsConfig) { c.Fleet.Rate = -1 }, setting: listenspec.SettingRateLimit},
		{name: "negative fleet concurrency", edit: func(c *LimitsConfig) { c.Fleet.Concurrency = -1 }, setting: listenspec.SettingFleetConcurrency},
		{name: "per key without a key", edit: func(c *LimitsConfig) { c.Fleet.ConcurrencyPerKey = 1 }, setting: listenspec.SettingLimitKey},
		{name: "a key without a per-key limit", edit: func(c *LimitsConfig) { c.Key = "attr:tenant" }, setting: listenspec.SettingLimitKey},
		{name: "a malformed key", edit: func(c *LimitsConfig) { c.Fleet.ConcurrencyPerKey, c.Key = 1, "attr:" }, setting: listenspec.SettingLimitKey},
		{name: "another malformed key", edit: func(c *LimitsConfig) { c.Fleet.ConcurrencyPerKey, c.Key = 1, "tenant" }, setting: listenspec.SettingLimitKey},
		{name: "per key in batch mode", edit: func(c *LimitsConfig) { c.Fleet.ConcurrencyPerKey, c.Key = 1, "group" }, batch: 10, setting: listenspec.SettingLimitKey},
		{name: "fleet concurrency below the batch size counts as the whole limit", edit: func(c *LimitsConfig) { c.Fleet.Concurrency = 5 }, batch: 10},
		{name: "no max pause", edit: func(c *LimitsConfig) { c.Fleet.MaxPause = 0 }, setting: listenspec.SettingMaxPause},
		{name: "max pause past 12h", edit: func(c *LimitsConfig) { c.Fleet.MaxPause = 13 * time.Hour }, setting: listenspec.SettingMaxPause},
		{name: "negative limit wait", edit: func(c *LimitsConfig) { c.Wait = -time.Second }, setting: listenspec.SettingLimitWait},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultLimits()
			tc.edit(&c)
			batch := max(tc.batch, 1)
			err := CheckLimits(c, batch)
			var le setting.Error
			switch {
			case tc.setting == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.setting != "" && (!errors.As(err, &le) || le.Setting != tc.setting):
				t.Fatalf("error %v, want one naming %s", err, tc.setting)
			}
		})
	}
}

func TestLimitKey(t *testing.T) {
	t.Parallel()
	m := message{GroupID: "g1", Attributes: map[string]string{"tenant": "acme"}}
	for key, want := range map[string]string{"": "", "group": "g1", "attr:tenant": "acme", "attr:other": ""} {
		if got := limitKey(key, m); got != want {
			t.Errorf("limitKey(%q) = %q, want %q", key, got, want)
		}
	}
}

// newLimitsRig is the supervisor in a testing/synctest bubble on a standard queue of
// fakesqs, with a stand-in worker and the limits edit sets (per task: no table).
func newLimitsRig(t *testing.T, o rigOptions, edit func(*LimitsConfig)) *dedupeRig {
	t.Helper()
	r := newDedupeRig(t, false, o)
	r.cfg.Dedupe = DefaultConfig().Dedupe
	edit(&r.cfg.Limits)
	r.stop = nil
	return r
}

func startLimitsRig(r *dedupeRig) *limits.Limiter {
	r.t.Helper()
	lim := limits.New(r.cfg.Limits.Fleet, nil, time.Now, nil)
	r.stop = testenv.Run(r.t, "supervisor", 10*time.Minute, func(ctx context.Context) error {
		return Run(ctx, r.cfg, Deps{SQS: r.sqs, Logger: slog.New(slog.NewJSONHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			Metrics: r.metrics, spawn: r.spawn, Limiter: lim})
	}, r.trail)
	return lim
}

func TestLimitsFleetConcurrency(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newLimitsRig(t, rigOptions{concurrency: 4}, func(c *LimitsConfig) { c.Fleet.Concurrency = 2 })
		lim := startLimitsRig(r)
		r.sendKeyed("a1=", "a2=", "a3=", "a4=", "a5=", "a6=")
		r.waitFor("an empty queue", 5*time.Minute, r.empty)
		time.Sleep(time.Second)
		if n := lim.Snapshot().Running; n != 0 {
			t.Errorf("%d permits not given back once every run ended", n)
		}
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		if r.maxBusy != 2 {
			t.Errorf("at most %d runs at once, want 2 (--fleet-concurrency) of 4 slots", r.maxBusy)
		}
		if got := r.metrics.get(alarms.MessageReceives); got != 6 {
			t.Errorf("MessageReceives = %v, want 6: a message held back waits in place", got)
		}
		if r.metrics.get(alarms.StartsHeldBack) == 0 || r.metrics.get(alarms.LimitWaitSeconds) == 0 {
			t.Errorf("StartsHeldBack %v, LimitWaitSeconds %v: want both counted", r.metrics.get(alarms.StartsHeldBack), r.metrics.get(alarms.LimitWaitSeconds))
		}
	})
}

func TestLimitsRate(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newLimitsRig(t, rigOptions{concurrency: 8}, func(c *LimitsConfig) { c.Fleet.Rate = 2 })
		r.behave = func(workerCall) workerAct { return workerAct{Took: 10 * time.Millisecond} }
		startLimitsRig(r)
		var bodies []string
		for i := range 20 {
			bodies = append(bodies, "m"+string(rune('a'+i))+"=")
		}
		r.sendKeyed(bodies...)
		r.waitFor("an empty queue", 5*time.Minute, r.empty)
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		runs := r.runs
		// A burst of one second's worth, then 2 a second: 20 starts take about 9 s.
		if took := runs[len(runs)-1].At.Sub(runs[0].At); took < 8*time.Second {
			t.Errorf("20 starts took %v at 2/s, want at least 8s", took)
		}
		for i := range runs {
			n := 0
			for j := i; j < len(runs) && runs[j].At.Sub(runs[i].At) < time.Second; j++ {
				n++
			}
			if n > 3 {
				t.Fatalf("%d starts within a second from %v, want at most 3 at 2/s with a burst of 2", n, runs[i].At.Sub(runs[0].At))
			}
		}
	})
}

func TestLimitsPauseInPlace(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newLimitsRig(t, rigOptions{concurrency: 2}, func(*LimitsConfig) {})
		r.behave = func(c workerCall) workerAct {
			if c.Body == "a1" && c.Run == 1 {
				return workerAct{Took: 100 * time.Millisecond, Result: `{"pause":"5s"}`}
			}
			return workerAct{Took: 100 * time.Millisecond}
		}
		startLimitsRig(r)
		r.sendKeyed("a1=")
		r.waitFor("a1's first run", time.Minute, func() bool { return len(r.callsOf("a1")) == 1 })
		time.Sleep(time.Second)
		r.sendKeyed("b1=", "b2=")
		r.waitFor("an empty queue", 5*time.Minute, r.empty)
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		a := r.callsOf("a1")
		if len(a) != 2 {
			t.Fatalf("a1 ran %d times, want twice: %v", len(a), r.bodies())
		}
		pausedAt := a[0].At
		for _, c := range r.runs[1:] {
			if d := c.At.Sub(pausedAt); d < 5*time.Second {
				t.Errorf("%s started %v after the pause began, want no start for 5s", c.Body, d)
			}
		}
		if a[1].ReceiveCount != a[0].ReceiveCount {
			t.Errorf("a1's receive count went from %d to %d: a paused message waits in place", a[0].ReceiveCount, a[1].ReceiveCount)
		}
		if a[1].Attempt != a[0].Attempt {
			t.Errorf("a1's attempt went from %d to %d: a pause is not an attempt", a[0].Attempt, a[1].Attempt)
		}
		wantCounts(t, map[alarms.Metric]float64{alarms.WorkerErrors: 0, alarms.MessagesProcessed: 3, alarms.MessageReceives: 3}, r.metrics)
	})
}

func TestLimitsPerKey(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newLimitsRig(t, rigOptions{concurrency: 4}, func(c *LimitsConfig) {
			c.Fleet.ConcurrencyPerKey, c.Key, c.Wait = 1, "attr:idem", 30*time.Second
		})
		r.behave = func(c workerCall) workerAct {
			if strings.HasPrefix(c.Body, "a") {
				return workerAct{Took: 10 * time.Second}
			}
			return workerAct{Took: time.Second}
		}
		startLimitsRig(r)
		r.sendKeyed("a1=k1", "a2=k1", "b1=k2", "b2=k2", "c1=k3")
		r.waitFor("an empty queue", 5*time.Minute, r.empty)
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		type span struct{ from, to time.Time }
		byKey := map[string][]span{}
		for _, c := range r.runs {
			took := time.Second
			if strings.HasPrefix(c.Body, "a") {
				took = 10 * time.Second
			}
			k := c.Body[:1]
			for _, s := range byKey[k] {
				if c.At.Before(s.to) && s.from.Before(c.At.Add(took)) {
					t.Errorf("%s ran while another run of its key did", c.Body)
				}
			}
			byKey[k] = append(byKey[k], span{c.At, c.At.Add(took)})
		}
		a1 := r.callsOf("a1")[0].At
		for _, b := range []string{"b1", "c1"} {
			if d := r.callsOf(b)[0].At.Sub(a1); d >= 10*time.Second {
				t.Errorf("%s started %v after a1: held behind another key", b, d)
			}
		}
		wantCounts(t, map[alarms.Metric]float64{alarms.LimitReleases: 0, alarms.MessageReceives: 5}, r.metrics)
	})
}

func TestLimitsKeyWaitReleases(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newLimitsRig(t, rigOptions{concurrency: 4}, func(c *LimitsConfig) {
			c.Fleet.ConcurrencyPerKey, c.Key, c.Wait = 1, "attr:idem", 5*time.Second
		})
		r.behave = func(c workerCall) workerAct {
			if c.Body == "a1" {
				return workerAct{Took: 30 * time.Second}
			}
			return workerAct{Took: time.Second}
		}
		startLimitsRig(r)
		r.sendKeyed("a1=k1")
		r.waitFor("a1 running", time.Minute, func() bool { return len(r.callsOf("a1")) == 1 })
		r.sendKeyed("a2=k1")
		r.waitFor("an empty queue", 5*time.Minute, r.empty)
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		// a2 waits 5 s in place, goes back for 5 s, is received again, ... until a1 ends.
		a2 := r.callsOf("a2")
		if len(a2) != 1 || a2[0].At.Before(r.callsOf("a1")[0].At.Add(30*time.Second)) {
			t.Fatalf("a2 runs %+v, want one after a1 ended", a2)
		}
		releases := r.metrics.get(alarms.LimitReleases)
		if releases < 1 || int(releases) != a2[0].ReceiveCount-1 {
			t.Errorf("LimitReleases = %v, a2's receive count %d: want every receive but the last released", releases, a2[0].ReceiveCount)
		}
		// A release is not a warning: the worker did not fail, the limits held it back.
		if !testenv.Logged(r.logs.String(), "level", "INFO", "limit_key", "*", "limit_wait", "*") {
			t.Error("the release is not logged")
		}
	})
}

// A pause is in force before the run that asked gives its slot back: a message already
// held for that slot does not start in between.
func TestLimitsPauseBeforeSlotFrees(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newLimitsRig(t, rigOptions{concurrency: 1}, func(*LimitsConfig) {})
		r.behave = func(c workerCall) workerAct {
			if c.Body == "a1" && c.Run == 1 {
				return workerAct{Took: 100 * time.Millisecond, Result: `{"pause":"5s"}`}
			}
			return workerAct{Took: 100 * time.Millisecond}
		}
		startLimitsRig(r)
		// z1's run teaches the scheduler the jobs' length, so that it reads b1 ahead and holds
		// it while a1 runs.
		r.sendKeyed("z1=")
		r.waitFor("z1's run", time.Minute, r.empty)
		r.sendKeyed("a1=", "b1=")
		r.waitFor("b1 held while a1 runs", time.Minute, func() bool { return len(r.callsOf("a1")) == 1 && r.metrics.get(alarms.MessageReceives) == 3 })
		r.waitFor("an empty queue", 5*time.Minute, r.empty)
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		first := r.callsOf("a1")[0]
		pausedAt := first.At.Add(100 * time.Millisecond)
		for _, c := range r.runs[2:] {
			if d := c.At.Sub(pausedAt); d < 5*time.Second {
				t.Errorf("%s started %v after %s asked for a 5s pause, want none before it ends", c.Body, d, first.Body)
			}
		}
	})
}

// A stop during a pause does not wait for it: the message that asked goes back at once,
// visible when the pause ends, with the receive it has.
func TestLimitsStopDuringPause(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newLimitsRig(t, rigOptions{concurrency: 1}, func(*LimitsConfig) {})
		r.behave = func(c workerCall) workerAct {
			return workerAct{Took: 100 * time.Millisecond, Result: `{"pause":"10m"}`}
		}
		startLimitsRig(r)
		r.sendKeyed("a1=")
		r.waitFor("a1's run", time.Minute, func() bool { return len(r.callsOf("a1")) == 1 })
		time.Sleep(time.Second)
		stopAt := time.Now()
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(stopAt); took > time.Minute {
			t.Errorf("the stop took %v during a pause, want it not to wait for the pause", took)
		}
		msgs := r.sqs.Messages(r.queue)
		if len(msgs) != 1 || len(r.callsOf("a1")) != 1 {
			t.Fatalf("messages %+v after %d runs, want a1 in the queue, run once", msgs, len(r.callsOf("a1")))
		}
		m := msgs[0]
		pauseEnds := r.callsOf("a1")[0].At.Add(100*time.Millisecond + 10*time.Minute)
		if m.ReceiveCount != 1 || m.VisibleAt.Before(pauseEnds.Add(-2*time.Second)) || m.VisibleAt.After(pauseEnds.Add(2*time.Second)) {
			t.Errorf("a1 went back with receive count %d, visible at %v, want 1 and about %v (the pause's end)", m.ReceiveCount, m.VisibleAt, pauseEnds)
		}
	})
}

// A worker that asks for a pause on every run holds its message in place no longer than
// SQS lets a message stay in flight: near the 12 h limit it goes back, one receive on its
// count, and the pauses stop no run's message forever.
func TestLimitsEndlessPauseBounded(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newLimitsRig(t, rigOptions{concurrency: 1, maxReceiveCount: 2}, func(*LimitsConfig) {})
		r.behave = func(workerCall) workerAct {
			return workerAct{Took: time.Second, Result: `{"pause":"15m"}`}
		}
		startLimitsRig(r)
		r.sendKeyed("a1=")
		r.waitFor("a1 dead-lettered", 30*time.Hour, func() bool { return len(r.sqs.Messages(r.queue)) == 0 })
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		a := r.callsOf("a1")
		last := a[len(a)-1]
		if last.ReceiveCount != 2 || last.At.Sub(a[0].At) > 24*time.Hour {
			t.Errorf("a1's last run at %v with receive count %d, want about 12h on, the second receive", last.At.Sub(a[0].At), last.ReceiveCount)
		}
		if got := len(r.sqs.Messages(r.dlq)); got != 1 {
			t.Errorf("%d messages in the dead-letter queue, want a1 there after maxReceiveCount", got)
		}
	})
}

// A batch whose window has passed while a limit holds it back waits for the limiter (its
// Changed, or the retry a second on), not in a loop that wakes at once again and again:
// spinning, the loop would hold a core and never let the bubble's clock move on. The
// watchdog outside the bubble sees a spin by the starts the limiter refuses, and fails the
// test rather than let it hang.
func TestLimitsBatchWindowPastNoSpin(t *testing.T) {
	t.Parallel()
	var watched atomic.Pointer[limits.Limiter]
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
				if lim := watched.Load(); lim != nil && lim.Snapshot().HeldBack > 100_000 {
					panic("the loop spins: 100,000 starts refused without the clock moving on")
				}
			}
		}
	}()
	synctest.Test(t, func(t *testing.T) {
		r := newLimitsRig(t, rigOptions{concurrency: 4, batchSize: 2}, func(c *LimitsConfig) { c.Fleet.Concurrency = 1 })
		r.cfg.BatchWindow = time.Second
		r.behave = func(workerCall) workerAct { return workerAct{Took: 30 * time.Second} }
		lim := startLimitsRig(r)
		watched.Store(lim)
		r.sendKeyed("a1=", "a2=")
		r.waitFor("the first batch", time.Minute, func() bool { return len(r.bodies()) == 2 })
		r.sendKeyed("b1=")
		r.waitFor("an empty queue", 5*time.Minute, r.empty)
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		// About one try a second while the first batch runs, and one per change.
		if n := lim.Snapshot().HeldBack; n > 100 {
			t.Errorf("%d starts refused while b1 waited about 30s for the first batch, want about one a second", n)
		}
	})
}
