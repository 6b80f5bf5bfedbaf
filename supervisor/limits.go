package supervisor

// Limits on job starts (docs/limits.md): the gate the loop asks before a run starts, and the
// settings it follows. The limiter itself (tokens, slots, pauses, the table) is package
// limits'; this file decides, on the loop goroutine, what a "no" means for a held message.

import (
	"strings"
	"time"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/setting"
	"github.com/watchbot/watchbot/internal/sqsspec"
	"github.com/watchbot/watchbot/limits"
)

// LimitsConfig is what limits job starts (--rate-limit, --fleet-concurrency, --limit-key and
// the rest). With no limit set it still carries pauses that workers ask for.
type LimitsConfig struct {
	// Fleet is the limiter's configuration: the limits, the table that shares them across
	// tasks ("" holds them per task), and the longest pause (--max-pause).
	Fleet limits.Config
	// Key names a message's limit key: "group" (its MessageGroupId) or "attr:NAME" (a
	// message attribute); "" when no per-key limit is set (--limit-key).
	Key string
	// Wait is how long a message whose key is at its limit waits in place before it is
	// released with a delay (--limit-wait).
	Wait time.Duration
}

// DefaultLimits returns the limits' defaults: none set, a 30 s --limit-wait.
func DefaultLimits() LimitsConfig {
	return LimitsConfig{Fleet: limits.DefaultConfig(), Wait: 30 * time.Second}
}

// The --limit-key forms.
const (
	LimitKeyGroup      = "group"
	limitKeyAttrPrefix = "attr:"
)

// set reports whether any limit is set (a pause needs none).
func (c LimitsConfig) set() bool {
	f := c.Fleet
	return f.Rate > 0 || f.Concurrency > 0 || c.keyed()
}

// keyed reports whether a per-key limit is set.
func (c LimitsConfig) keyed() bool { return c.Fleet.RatePerKey > 0 || c.Fleet.ConcurrencyPerKey > 0 }

// global reports whether a limit over all keys is set.
func (c LimitsConfig) global() bool { return c.Fleet.Rate > 0 || c.Fleet.Concurrency > 0 }

// CheckLimits refuses limits that cannot hold, naming the setting. batchSize is
// --batch-size: a per-key limit counts one message per run.
func CheckLimits(c LimitsConfig, batchSize int) error {
	refuse := func(s setting.Name, v any, reason string) error { return setting.Refuse(s, v, reason) }
	f := c.Fleet
	switch {
	case f.Rate < 0:
		return refuse(listenspec.SettingRateLimit, f.Rate, "must not be negative")
	case f.RatePerKey < 0:
		return refuse(listenspec.SettingRatePerKey, f.RatePerKey, "must not be negative")
	case f.Concurrency < 0:
		return refuse(listenspec.SettingFleetConcurrency, f.Concurrency, "must not be negative")
	case f.ConcurrencyPerKey < 0:
		return refuse(listenspec.SettingConcurrencyPerKey, f.ConcurrencyPerKey, "must not be negative")
	case f.MaxPause <= 0 || f.MaxPause > sqsspec.MaxInFlight:
		return refuse(listenspec.SettingMaxPause, f.MaxPause, "must be between 1s and 12h (a paused message stays in flight)")
	case c.Wait < 0 || c.Wait > sqsspec.MaxInFlight:
		return refuse(listenspec.SettingLimitWait, c.Wait, "must be between 0 and 12h")
	}
	if err := checkLimitKey(c.Key); err != nil {
		return err
	}
	switch {
	case c.keyed() && c.Key == "":
		return refuse(listenspec.SettingLimitKey, nil, "is required with "+setting.Ref(listenspec.SettingRatePerKey)+" or "+
			setting.Ref(listenspec.SettingConcurrencyPerKey)+": say what a message's key is (attr:NAME or group)")
	case c.Key != "" && !c.keyed():
		return refuse(listenspec.SettingLimitKey, c.Key, "needs "+setting.Ref(listenspec.SettingRatePerKey)+" or "+
			setting.Ref(listenspec.SettingConcurrencyPerKey)+": a key without a limit per key limits nothing")
	case c.keyed() && batchSize > 1:
		return refuse(listenspec.SettingLimitKey, c.Key, "cannot be combined with "+setting.Ref(listenspec.SettingBatchSize)+
			" above 1: a batch mixes keys; use "+setting.Ref(listenspec.SettingRateLimit)+" or "+setting.Ref(listenspec.SettingFleetConcurrency))
	}
	if err := f.Validate(); err != nil {
		return setting.Error{Reason: "limits: " + err.Error()}
	}
	return nil
}

// checkLimitKey checks a --limit-key value.
func checkLimitKey(key string) error {
	switch {
	case key == "" || key == LimitKeyGroup:
		return nil
	case strings.HasPrefix(key, limitKeyAttrPrefix) && strings.TrimPrefix(key, limitKeyAttrPrefix) != "":
		return nil
	}
	return setting.Refuse(listenspec.SettingLimitKey, key, "must be attr:NAME (a message attribute) or group (the MessageGroupId)")
}

// limitKey returns a message's limit key under --limit-key: "" when none is set. A message
// without the attribute (or group) has the key "", to which only the limits over all keys
// apply.
func limitKey(key string, m message) string {
	switch {
	case key == LimitKeyGroup:
		return m.GroupID
	case strings.HasPrefix(key, limitKeyAttrPrefix):
		return m.Attributes[strings.TrimPrefix(key, limitKeyAttrPrefix)]
	}
	return ""
}

// runGate is what the brake allows now, with the runs at once held to the --concurrency that
// the fleet's control sets live: the scheduler receives and holds for that many only, and
// the gauges say it.
func (s *Supervisor) runGate() brakeGate {
	g := s.brake.gate()
	if n := s.limiter.MaxRunning(); n > 0 && n < g.limit {
		g.limit = n
	}
	return g
}

// verdict is the gate's answer for one run.
type verdict int

const (
	admitted verdict = iota
	// keyFull: the run's key is at its limit; runs of other keys may start.
	keyFull
	// closed: no run may start (no token or slot over all keys, or a pause).
	closed
)

// startGate decides whether a run the slots allow may start now: it takes a permit from the
// limiter, and gives it back when the run's worker has ended. The loop goroutine alone calls
// it; the limiter's calls never block and make no network call.
type startGate struct {
	lim     *limits.Limiter
	cfg     LimitsConfig
	metrics alarms.Recorder
	// permits are the runs' permits, by their first job, until the worker ends.
	permits map[*job]limits.Permit
	// since is when each held message was first held back, for --limit-wait and the time
	// waited; kept for those held back in the latest pass only.
	since, seen map[*job]time.Time
	// overdue are the messages held back for their key longer than --limit-wait, for the loop
	// to release.
	overdue []*job
	// denied are the runs (by their first job) held back for their key in the pass under
	// way; now is the pass's time.
	denied []*job
	now    time.Time
	// keyHeld are the runs the latest pass held back for their key and did not release, for
	// releaseDue.
	keyHeld []*job
	// pausedUntil is the pause in force at the latest pass (zero: none).
	pausedUntil time.Time
	// queue is the queue's name, which an operator's pause may name; fleetSince is when a
	// pass first found such a pause holding the queue (zero: none holds).
	queue      string
	fleetSince time.Time
}

func newStartGate(lim *limits.Limiter, cfg LimitsConfig, queue string, metrics alarms.Recorder) *startGate {
	return &startGate{lim: lim, cfg: cfg, queue: queue, metrics: metrics, permits: map[*job]limits.Permit{}, since: map[*job]time.Time{}}
}

// begin starts a pass of the scheduler over what is held, and reports whether a pause is in
// force: then nothing starts, and nothing is received.
func (g *startGate) begin(now time.Time) (paused bool) {
	g.seen, g.overdue, g.denied, g.now = map[*job]time.Time{}, nil, nil, now
	g.pausedUntil = g.pause(now)
	return !g.pausedUntil.IsZero()
}

// pause returns when the pause in force at now ends, a worker's or an operator's, whichever
// ends later; zero when none holds. An operator's pause until a resume is looked at again
// after retryRefused: a resume wakes the loop through the limiter, and a wake-up lost costs
// at most that. It keeps when an operator's pause began to hold.
func (g *startGate) pause(now time.Time) time.Time {
	var at time.Time
	if u := g.lim.PausedUntil(); now.Before(u) {
		at = u
	}
	until, fleet := g.lim.FleetPause(g.queue, now)
	if !fleet {
		g.fleetSince = time.Time{}
		return at
	}
	if g.fleetSince.IsZero() {
		g.fleetSince = now
	}
	if until.IsZero() {
		until = now.Add(retryRefused)
	}
	if until.After(at) {
		at = until
	}
	return at
}

// pausedLong reports whether an operator's pause has held the queue for --limit-wait by
// now: the messages held and not started go back to the queue rather than wait longer.
func (g *startGate) pausedLong(now time.Time) bool {
	return !g.fleetSince.IsZero() && now.Sub(g.fleetSince) >= g.cfg.Wait
}

// admit asks for a permit for run. A message held back is timed from the first time it was.
func (g *startGate) admit(run []*job, now time.Time) verdict {
	key := ""
	if g.cfg.Key != "" {
		key = limitKey(g.cfg.Key, run[0].msg)
	}
	var p limits.Permit
	ok := false
	// A task at the fleet's --concurrency is closed to every key, not to this run's alone.
	capped := g.lim.Capped()
	if g.pausedUntil.IsZero() && !capped {
		p, ok = g.lim.TryStart(key, len(run))
	}
	if ok {
		g.permits[run[0]] = p
		for _, j := range run {
			if t, held := g.since[j]; held {
				g.metrics.Add(alarms.LimitWaitSeconds, now.Sub(t).Seconds())
			}
		}
		return admitted
	}
	for _, j := range run {
		t, held := g.since[j]
		if !held {
			t = now
			g.metrics.Add(alarms.StartsHeldBack, 1)
		}
		g.seen[j] = t
	}
	if !g.cfg.keyed() || !g.pausedUntil.IsZero() || capped {
		return closed
	}
	// With limits both over all keys and per key, a "no" may be either: the run is skipped
	// and the pass goes on; end decides.
	g.denied = append(g.denied, run[0])
	return keyFull
}

// end finishes a pass, and reports whether the limiter is closed to every key: only the
// messages held back in it keep their first time, and those held back for their key longer
// than --limit-wait are overdue. A pass that held everything back under limits both over
// all keys and per key counts as closed, and releases none: the limit over all keys may be
// what holds them.
func (g *startGate) end(startedAny bool) (closedToAll bool) {
	g.since = g.seen
	denied := g.denied
	g.denied, g.keyHeld = nil, nil
	if len(denied) == 0 {
		return false
	}
	// The fleet's control may set a limit over all keys live.
	if (g.cfg.global() || g.lim.Global()) && !startedAny {
		return true
	}
	for _, j := range denied {
		if g.now.Sub(g.since[j]) >= g.cfg.Wait {
			g.overdue = append(g.overdue, j)
			delete(g.since, j)
		} else {
			g.keyHeld = append(g.keyHeld, j)
		}
	}
	return false
}

// releaseDue makes overdue the messages the latest pass held back for their key that have
// waited --limit-wait by now, without a pass: with several queues a step that the shared
// slots granted nothing makes none, and a release needs no slot.
func (g *startGate) releaseDue(now time.Time) {
	kept := g.keyHeld[:0]
	for _, j := range g.keyHeld {
		t, held := g.since[j]
		switch {
		case !held:
		case now.Sub(t) >= g.cfg.Wait:
			g.overdue = append(g.overdue, j)
			delete(g.since, j)
		default:
			kept = append(kept, j)
		}
	}
	g.keyHeld = kept
}

// takeOverdue returns the messages found overdue since the last call, for the loop to hand
// back, and forgets them.
func (g *startGate) takeOverdue() []*job {
	overdue := g.overdue
	g.overdue = nil
	return overdue
}

// done gives back the permit of a run whose worker has ended.
func (g *startGate) done(run []*job) {
	if p, ok := g.permits[run[0]]; ok {
		p.Done()
		delete(g.permits, run[0])
	}
}

// retryRefused is how soon a refused start is tried again even when the limiter's Changed
// has not fired: a refusal re-arms the limiter's demand, so a wake-up lost for any reason
// costs at most this much.
const retryRefused = time.Second

// wake returns when the gate next has something to decide without the limiter saying so:
// the end of the pause, the end of the oldest --limit-wait, or the retry of a refused start.
// Zero: never. A time not after now is none: with several queues a step may pass over the
// gate (the shared slots granted nothing), leaving the latest pass's times behind, and a
// wake-up at once would only find the same.
func (g *startGate) wake(now time.Time) time.Time {
	var at time.Time
	next := func(w time.Time) {
		if w.After(now) && (at.IsZero() || w.Before(at)) {
			at = w
		}
	}
	next(g.pausedUntil)
	if !g.fleetSince.IsZero() {
		next(g.fleetSince.Add(g.cfg.Wait))
	}
	if len(g.since) > 0 && g.pausedUntil.IsZero() {
		next(g.now.Add(retryRefused))
	}
	if g.cfg.keyed() {
		for _, t := range g.since {
			next(t.Add(g.cfg.Wait))
		}
	}
	return at
}

// due reports whether a message held back for its key has waited --limit-wait by now: a pass
// over it is due, to release it.
func (g *startGate) due(now time.Time) bool {
	if !g.cfg.keyed() {
		return false
	}
	for _, t := range g.since {
		if !now.Before(t.Add(g.cfg.Wait)) {
			return true
		}
	}
	return false
}
