package supervisor

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/setting"
)

// BrakeConfig configures the brake: when nearly every worker run fails (a dependency is
// down), watchbot stops receiving and probes with one message until a run succeeds, then
// ramps back to --concurrency.
type BrakeConfig struct {
	// Enabled turns the brake on (--brake on).
	Enabled bool
	// Threshold is the share of failed runs in the window that brakes (--brake-threshold).
	Threshold float64
	// Window is how many of the latest runs are judged (--brake-window); runs older than
	// WindowAge are forgotten.
	Window int
	// MinRuns is how many runs the window must hold before it is judged (--brake-min-runs).
	MinRuns int
	// ProbeMax caps the growing interval between probes (--brake-probe-max).
	ProbeMax time.Duration
}

// Brake defaults and limits.
const (
	// BrakeWindowAge is how long a run's outcome counts in the window.
	BrakeWindowAge = 10 * time.Minute
	// brakeProbeMin is the first interval between probes; it doubles after each failed probe.
	brakeProbeMin = 2 * time.Second
	// brakeProbeTurns is how many probes one message makes before it goes back to the queue
	// (its one receive counted) and another message probes: a message that fails for its
	// own reasons cannot hold the brake on.
	brakeProbeTurns = 5
)

// DefaultBrake is listen's brake: on, braking when 90% of at least 20 of the last 50 runs
// failed, probes at most a minute apart.
func DefaultBrake() BrakeConfig {
	return BrakeConfig{Enabled: true, Threshold: 0.9, Window: 50, MinRuns: 20, ProbeMax: time.Minute}
}

// CheckBrake checks the brake's settings.
func CheckBrake(b BrakeConfig) error {
	switch {
	case !b.Enabled:
		return nil
	case !(b.Threshold > 0 && b.Threshold <= 1):
		return setting.Refuse(listenspec.SettingBrakeThreshold, b.Threshold, "must be a share of failed runs above 0 and at most 1")
	case b.Window < 1 || b.Window > 10000:
		return setting.Refuse(listenspec.SettingBrakeWindow, b.Window, "must be between 1 and 10000 runs")
	case b.MinRuns < 1 || b.MinRuns > b.Window:
		return setting.Refuse(listenspec.SettingBrakeMinRuns, b.MinRuns, fmt.Sprintf("must be between 1 and %s (%d)", setting.Ref(listenspec.SettingBrakeWindow), b.Window))
	case b.ProbeMax < brakeProbeMin || b.ProbeMax > time.Hour:
		return setting.Refuse(listenspec.SettingBrakeProbeMax, b.ProbeMax, fmt.Sprintf("must be between %v and 1h", brakeProbeMin))
	}
	return nil
}

// brakeState is where the brake stands.
type brakeState int

const (
	brakeOpen       brakeState = iota // full concurrency
	brakeBraking                      // one probe at a time, nothing else received
	brakeRecovering                   // the limit grows by one per successful run
)

func (s brakeState) String() string { return [...]string{"open", "braking", "recovering"}[s] }

// brakeRun is one worker run's outcome as the brake counts it: failed (non-zero exit,
// signal, timeout, spawn error) or succeeded; the worker's own decisions (exit 3 and 4,
// result-file directives) are neither.
type brakeRun struct {
	at     time.Time
	failed bool
}

// brake watches the runs' outcomes and limits concurrency when nearly all fail. The rules:
//   - open or recovering: once the window (the last Window runs of the last BrakeWindowAge)
//     holds MinRuns runs of which Threshold or more failed, brake.
//   - braking: the limit is one run and nothing is received while a probe is held. The
//     first run to fail becomes the probe: it is kept, leased, and run again in place after
//     an interval that doubles from 2 s to ProbeMax, its receive count untouched and the
//     run not counted as an attempt. After brakeProbeTurns probes it goes back to the queue
//     and the next message received (one, after the interval) probes instead.
//   - a run that succeeds while braking starts recovery: the limit grows by one per
//     successful run until it reaches the concurrency, and the window starts afresh, so
//     the outage's failures do not brake again; failures then brake only by the same rule.
//
// Its owner is the runs, which change it (observe, probeFor) as their outcomes are judged;
// the loop reads what it allows (gate) and tells it when a message leaves (left). mu guards
// every field below it, held only to read or change them: the transitions are logged once it
// is released.
type brake struct {
	cfg         BrakeConfig
	concurrency int
	log         *slog.Logger

	mu       sync.Mutex
	state    brakeState
	limit    int
	runs     []brakeRun // the window, oldest first
	probe    *job       // the message probing, nil when none
	turns    int        // probes the current probe message has made
	failures int        // failed probes since braking began
	nextAt   time.Time  // braking without a probe: when one may be received
	since    time.Time  // when the state began
}

func newBrake(cfg BrakeConfig, concurrency int, log *slog.Logger) *brake {
	return &brake{cfg: cfg, concurrency: concurrency, limit: concurrency, log: log}
}

// ratio returns the window's failure share and size, dropping runs older than
// BrakeWindowAge. The lock is held.
func (b *brake) ratio(now time.Time) (float64, int) {
	cut := 0
	for cut < len(b.runs) && now.Sub(b.runs[cut].at) > BrakeWindowAge {
		cut++
	}
	b.runs = b.runs[cut:]
	failed := 0
	for _, r := range b.runs {
		if r.failed {
			failed++
		}
	}
	if len(b.runs) == 0 {
		return 0, 0
	}
	return float64(failed) / float64(len(b.runs)), len(b.runs)
}

// observe records a run's outcomes: failed and succeeded messages (a batch run reports its
// messages; neutral outcomes are left out), and logs the change of state they make.
func (b *brake) observe(now time.Time, failed, succeeded int) {
	if !b.cfg.Enabled || failed+succeeded == 0 {
		return
	}
	if t := b.record(now, failed, succeeded); t != nil {
		t.log(b.log)
	}
}

// record is observe under the lock: it returns the change of state the outcomes made, nil
// when none, to be logged once the lock is released.
func (b *brake) record(now time.Time, failed, succeeded int) *brakeChange {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == brakeBraking {
		if succeeded == 0 {
			return nil
		}
		t := b.to(now, brakeRecovering, "a probe succeeded: ramping back up", 0)
		b.limit = min(b.concurrency, 1+succeeded)
		return t
	}
	for range failed {
		b.runs = append(b.runs, brakeRun{at: now, failed: true})
	}
	for range succeeded {
		b.runs = append(b.runs, brakeRun{at: now})
	}
	if over := len(b.runs) - b.cfg.Window; over > 0 {
		b.runs = b.runs[over:]
	}
	ratio, n := b.ratio(now)
	if n >= b.cfg.MinRuns && ratio >= b.cfg.Threshold {
		t := b.to(now, brakeBraking, "nearly every run fails: braking to one probe at a time, receiving nothing else", ratio)
		b.limit, b.failures, b.nextAt = 1, 0, now
		return t
	}
	if b.state == brakeRecovering && succeeded > 0 {
		b.limit = min(b.concurrency, b.limit+succeeded)
		if b.limit == b.concurrency {
			return b.to(now, brakeOpen, "recovered: back to full concurrency", ratio)
		}
	}
	return nil
}

// brakeChange is a change of the brake's state, and why, to log.
type brakeChange struct {
	to    brakeState
	why   string
	attrs []any
}

// log logs the change: braking is a warning, the rest information.
func (t *brakeChange) log(log *slog.Logger) {
	if t.to == brakeBraking {
		log.Warn(t.why, t.attrs...)
	} else {
		log.Info(t.why, t.attrs...)
	}
}

// to changes state and returns the change, with the failure ratio, for the caller to log
// once the lock is released. The lock is held.
func (b *brake) to(now time.Time, s brakeState, why string, ratio float64) *brakeChange {
	attrs := []any{"state", s.String(), "failure_ratio", fmt.Sprintf("%.2f", ratio), "concurrency", b.concurrency}
	if b.state == brakeBraking {
		attrs = append(attrs, "braked_for", now.Sub(b.since).Round(time.Second).String(), "failed_probes", b.failures)
	}
	b.state, b.since, b.runs = s, now, nil
	b.probe, b.turns = nil, 0
	return &brakeChange{to: s, why: why, attrs: attrs}
}

// probeFor is asked when a run of j failed: it returns how long j waits to probe again,
// kept in place, and true when j is (now) the probe; false when j goes back to the queue as
// usual (not braking, another message probes, or j has had its turns).
func (b *brake) probeFor(now time.Time, j *job) (time.Duration, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state != brakeBraking || (b.probe != nil && b.probe != j) {
		return 0, false
	}
	b.failures++
	delay := brakeProbeMin << min(b.failures-1, 20)
	delay = min(delay, b.cfg.ProbeMax)
	if b.probe == j && b.turns >= brakeProbeTurns {
		// Its turns are over: back to the queue; the next message probes after delay.
		b.probe, b.turns, b.nextAt = nil, 0, now.Add(delay)
		return 0, false
	}
	b.probe = j
	b.turns++
	return delay, true
}

// left is told that j left watchbot (settled, handed back or lost): if it was the probe,
// another message may probe.
func (b *brake) left(now time.Time, j *job) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.probe == j {
		b.probe, b.turns = nil, 0
		if b.nextAt.Before(now) {
			b.nextAt = now
		}
	}
}

// brakeGate is what the brake allows the loop now.
type brakeGate struct {
	limit   int  // runs at once
	braking bool // receive one message at a time, to probe with
	// hold: a probe is held, receive nothing; else receive no sooner than receiveAt.
	hold      bool
	receiveAt time.Time
}

// gate returns what the brake allows now.
func (b *brake) gate() brakeGate {
	b.mu.Lock()
	defer b.mu.Unlock()
	return brakeGate{limit: b.limit, braking: b.state == brakeBraking, hold: b.probe != nil, receiveAt: b.nextAt}
}

// braking reports whether the brake is on.
func (b *brake) braking() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state == brakeBraking
}
