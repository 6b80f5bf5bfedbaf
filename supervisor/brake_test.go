package supervisor

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watchbot/watchbot/internal/testing/testenv"
)

var brakeT0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func newTestBrake(cfg BrakeConfig, concurrency int) (*brake, *testenv.Buffer) {
	logs := &testenv.Buffer{}
	return newBrake(cfg, concurrency, slog.New(slog.NewJSONHandler(logs, nil))), logs
}

func TestBrakeThresholdAndMinRuns(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		failed, ok   int
		wantBraking  bool
		wantLimitNow int
	}{
		{name: "19 failures: too few runs to judge", failed: 19, wantLimitNow: 8},
		{name: "20 failures: braking", failed: 20, wantBraking: true, wantLimitNow: 1},
		{name: "44 of 50 failed (88%): below the threshold", failed: 44, ok: 6, wantLimitNow: 8},
		{name: "45 of 50 failed (90%): braking", failed: 45, ok: 5, wantBraking: true, wantLimitNow: 1},
		{name: "successes only", ok: 100, wantLimitNow: 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := newTestBrake(DefaultBrake(), 8)
			// Successes first, so the failures decide at the end.
			for range tc.ok {
				b.observe(brakeT0, 0, 1)
			}
			for range tc.failed {
				b.observe(brakeT0, 1, 0)
			}
			g := b.gate()
			if g.braking != tc.wantBraking || g.limit != tc.wantLimitNow {
				t.Errorf("gate %+v, want braking %v limit %d", g, tc.wantBraking, tc.wantLimitNow)
			}
		})
	}
}

func TestBrakeForgetsOldRuns(t *testing.T) {
	t.Parallel()
	b, _ := newTestBrake(DefaultBrake(), 4)
	for range 19 {
		b.observe(brakeT0, 1, 0)
	}
	// Eleven minutes later the 19 failures are forgotten: one more is not 20.
	b.observe(brakeT0.Add(11*time.Minute), 1, 0)
	if b.braking() {
		t.Fatal("braking on failures older than the window")
	}
	for range 19 {
		b.observe(brakeT0.Add(11*time.Minute), 1, 0)
	}
	if !b.braking() {
		t.Fatal("not braking on 20 recent failures")
	}
}

func TestBrakeCountsABatchByItsMessages(t *testing.T) {
	t.Parallel()
	b, _ := newTestBrake(DefaultBrake(), 2)
	b.observe(brakeT0, 10, 0) // a batch of ten failed
	if b.braking() {
		t.Fatal("braking after 10 runs")
	}
	b.observe(brakeT0, 9, 1) // 19 of 20
	if !b.braking() {
		t.Fatal("not braking after 19 of 20 batch messages failed")
	}
}

func TestBrakeProbes(t *testing.T) {
	t.Parallel()
	cfg := DefaultBrake()
	cfg.ProbeMax = 30 * time.Second
	b, logs := newTestBrake(cfg, 4)
	probe, other := &job{}, &job{}
	// Not braking: no probe.
	if _, ok := b.probeFor(brakeT0, probe); ok {
		t.Fatal("a probe while open")
	}
	b.observe(brakeT0, 20, 0)
	if g := b.gate(); !g.braking || g.hold || g.limit != 1 || !g.receiveAt.Equal(brakeT0) {
		t.Fatalf("gate %+v right after braking: want braking, limit 1, a probe may be received now", g)
	}
	// The first failed message probes, at doubling intervals up to ProbeMax; others go back.
	var delays []time.Duration
	for i := range brakeProbeTurns {
		d, ok := b.probeFor(brakeT0, probe)
		if !ok {
			t.Fatalf("probe %d refused", i+1)
		}
		delays = append(delays, d)
		if _, ok := b.probeFor(brakeT0, other); ok {
			t.Fatal("a second probe")
		}
		if !b.gate().hold {
			t.Fatal("receiving while a probe is held")
		}
	}
	want := []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second}
	if !slices.Equal(delays, want) {
		t.Errorf("probe intervals %v, want %v", delays, want)
	}
	// Its turns are over: it goes back, and the next message is received a ProbeMax later.
	at := brakeT0.Add(time.Minute)
	if _, ok := b.probeFor(at, probe); ok {
		t.Fatal("the probe kept past its turns")
	}
	if g := b.gate(); g.hold || !g.receiveAt.Equal(at.Add(30*time.Second)) {
		t.Errorf("gate %+v after the probe's turns: want no hold, receive at %v", g, at.Add(30*time.Second))
	}
	if d, ok := b.probeFor(at, other); !ok || d != 30*time.Second {
		t.Errorf("the next message's probe: %v %v, want 30s true", d, ok)
	}
	// A probe that leaves (lost, or handed back at a stop) lets another probe.
	b.left(at, other)
	if b.gate().hold {
		t.Error("hold after the probe left")
	}
	if !testenv.Logged(logs.String(), "level", "WARN", "state", "braking", "failure_ratio", "1.00") {
		t.Errorf("braking not logged with its ratio:\n%s", logs)
	}
}

func TestBrakeRampsBackUp(t *testing.T) {
	t.Parallel()
	b, logs := newTestBrake(DefaultBrake(), 5)
	b.observe(brakeT0, 20, 0)
	probe := &job{}
	b.probeFor(brakeT0, probe)
	// Failures of runs started before the brake do not count while braking.
	b.observe(brakeT0, 3, 0)
	b.observe(brakeT0.Add(time.Minute), 0, 1) // the probe succeeded
	var limits []int
	limits = append(limits, b.gate().limit)
	for range 4 {
		b.observe(brakeT0.Add(time.Minute), 0, 1)
		limits = append(limits, b.gate().limit)
	}
	if want := []int{2, 3, 4, 5, 5}; !slices.Equal(limits, want) {
		t.Errorf("limits %v, want %v", limits, want)
	}
	if b.braking() || b.state != brakeOpen {
		t.Errorf("state %v, want open", b.state)
	}
	for _, want := range [][]string{{"state", "recovering", "braked_for", "1m0s"}, {"state", "open"}} {
		if !testenv.Logged(logs.String(), want...) {
			t.Errorf("no record with %q in the log:\n%s", want, logs)
		}
	}
	// Recovering, the outage's failures are forgotten: a few failures do not brake again.
	b2, _ := newTestBrake(DefaultBrake(), 5)
	b2.observe(brakeT0, 20, 0)
	b2.observe(brakeT0, 0, 1)
	for range 5 {
		b2.observe(brakeT0, 1, 0)
	}
	if b2.braking() {
		t.Error("braking again on 5 failures after recovery began")
	}
}

// TestBrakeDoesNotFlapOnANoisyWorker feeds 100,000 runs failing at random for their own
// reasons: the brake never engages.
func TestBrakeDoesNotFlapOnANoisyWorker(t *testing.T) {
	t.Parallel()
	for _, share := range []float64{0.3, 0.4, 0.5} {
		b, _ := newTestBrake(DefaultBrake(), 8)
		r := rand.New(rand.NewPCG(1, uint64(share*100)))
		now := brakeT0
		for i := range 100_000 {
			now = now.Add(50 * time.Millisecond)
			if r.Float64() < share {
				b.observe(now, 1, 0)
			} else {
				b.observe(now, 0, 1)
			}
			if b.braking() {
				t.Fatalf("%.0f%% failures: braked at run %d", share*100, i)
			}
		}
	}
}

func TestBrakeOff(t *testing.T) {
	t.Parallel()
	b, _ := newTestBrake(BrakeConfig{}, 4)
	b.observe(brakeT0, 1000, 0)
	if _, ok := b.probeFor(brakeT0, &job{}); ok || b.braking() || b.gate().limit != 4 {
		t.Errorf("the brake engaged while off: %+v", b.gate())
	}
}

func TestCheckBrake(t *testing.T) {
	t.Parallel()
	ok := DefaultBrake()
	for _, tc := range []struct {
		mod  func(*BrakeConfig)
		flag string
	}{
		{func(b *BrakeConfig) {}, ""},
		{func(b *BrakeConfig) { *b = BrakeConfig{} }, ""}, // off: the rest is not read
		{func(b *BrakeConfig) { b.Threshold = 0 }, "Brake.Threshold"},
		{func(b *BrakeConfig) { b.Threshold = 1.5 }, "Brake.Threshold"},
		{func(b *BrakeConfig) { b.Window = 0 }, "Brake.Window"},
		{func(b *BrakeConfig) { b.MinRuns = 51 }, "Brake.MinRuns"},
		{func(b *BrakeConfig) { b.ProbeMax = time.Second }, "Brake.ProbeMax"},
		{func(b *BrakeConfig) { b.ProbeMax = 2 * time.Hour }, "Brake.ProbeMax"},
	} {
		b := ok
		tc.mod(&b)
		err := CheckBrake(b)
		switch {
		case tc.flag == "" && err != nil:
			t.Errorf("%+v: %v", b, err)
		case tc.flag != "" && (err == nil || !strings.Contains(err.Error(), tc.flag)):
			t.Errorf("%+v: error %v, want one naming %s", b, err, tc.flag)
		}
	}
}

// brakeOutage runs a FIFO rig through a 10-minute outage of the worker's dependency (every
// run fails while it lasts) and checks what the brake promises: group order kept, every
// message processed after it but a handful, few runs during it, and no run of a probe
// counted as an attempt.
func brakeOutage(t *testing.T, o rigOptions) {
	o.batchSize = max(1, o.batchSize)
	synctest.Test(t, func(t *testing.T) {
		r := newFIFORig(t, o)
		r.cfg.Brake.ProbeMax = 30 * time.Second
		outageEnds := time.Now().Add(10 * time.Minute)
		r.behave = func(c workerCall) workerAct {
			if time.Now().Before(outageEnds) {
				return workerAct{Took: 50 * time.Millisecond, Exit: 1}
			}
			return workerAct{Took: 50 * time.Millisecond}
		}
		var bodies []string
		for _, g := range "abcdefgh" {
			for i := range 25 {
				bodies = append(bodies, fmt.Sprintf("%c%02d", g, i))
			}
		}
		r.send(bodies...)
		r.start()
		r.waitFor("an empty queue", 20*time.Minute, r.empty)
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		r.check()
		during := 0
		for _, c := range r.runs {
			if c.At.Before(outageEnds) {
				during++
			}
		}
		dead := len(r.dlqBodies())
		t.Logf("%d runs during the outage, %d dead-lettered, %d runs in all", during, dead, len(r.runs))
		// On a FIFO queue failures retry in place, so the runs before the brake engages can
		// use up the attempts of about MinRuns / maxReceiveCount messages; then those at their
		// last attempt in the runs under way.
		if most := r.cfg.Brake.MinRuns/o.maxReceiveCount + o.concurrency; dead > most {
			t.Errorf("%d messages dead-lettered, want at most %d", dead, most)
		}
		// Braking within the first runs, then probes at 2, 4, 8, 16, 30 s ... for 10 minutes:
		// about 25 probe runs (a new probe message after every 5), each of one message (a
		// batch: the probe and what its group holds behind it, up to a batch).
		if most := r.cfg.Brake.MinRuns + 2*o.concurrency*o.batchSize + 30*o.batchSize; during > most {
			t.Errorf("%d messages run during the outage, want at most %d", during, most)
		}
		for _, c := range r.runs {
			if c.Attempt > o.maxReceiveCount {
				t.Errorf("%s ran at attempt %d, past the %d allowed: probing counted attempts", c.Body, c.Attempt, o.maxReceiveCount)
			}
		}
		if !testenv.Logged(r.logs.String(), "state", "braking", "failure_ratio", "*") || !testenv.Logged(r.logs.String(), "state", "open", "failure_ratio", "*") {
			t.Errorf("the brake's states were not logged")
		}
	})
}

func TestBrakeOnAFIFOQueue(t *testing.T) {
	t.Parallel()
	brakeOutage(t, rigOptions{maxReceiveCount: 3, concurrency: 4})
}

func TestBrakeInBatchMode(t *testing.T) {
	t.Parallel()
	brakeOutage(t, rigOptions{maxReceiveCount: 3, concurrency: 2, batchSize: 5})
}
