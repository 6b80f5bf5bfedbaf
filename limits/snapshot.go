package limits

import (
	"time"
)

// Snapshot is the Limiter's state for metrics and status.
type Snapshot struct {
	// Limits are the limits in force (their table: Table; "" in process).
	Rate              float64
	Concurrency       int
	RatePerKey        float64
	ConcurrencyPerKey int
	Table             string
	// Running is the jobs of this task running under a permit.
	Running int
	// Tokens is the fleet rate's tokens this task holds and may still use.
	Tokens int
	// Slots is the fleet concurrency slots this task holds, running or idle.
	Slots int
	// Keys is the keys this task holds per-key state for.
	Keys int
	// Waited is the total time the task had a start held back by a limit or a pause: from a
	// refusal to the next start it allowed.
	Waited time.Duration
	// HeldBack counts the starts TryStart refused (a start tried again counts again).
	HeldBack int64
	// PausedUntil is when the pause in force ends; zero or past: none.
	PausedUntil time.Time
	// Fallback is true while DynamoDB fails and the task holds to its share of each limit,
	// since FallbackSince; FallbackTotal counts all the time spent so, this one included.
	Fallback      bool
	FallbackSince time.Time
	FallbackTotal time.Duration
	// LiveTasks is the tasks the table last showed live: 0 until it was read, 1 in process.
	LiveTasks int
	// ControlVersion is the version of the operator's control the task applies (0: none).
	ControlVersion int64
	// Applied are the settings the task runs by: its flags, with the control's over them.
	Applied Settings
}

// Snapshot returns the Limiter's state now.
func (l *Limiter) Snapshot() Snapshot {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	s := Snapshot{Rate: l.cfg.Rate, Concurrency: l.cfg.Concurrency, RatePerKey: l.cfg.RatePerKey,
		ConcurrencyPerKey: l.cfg.ConcurrencyPerKey, Running: l.running, Waited: l.blockedTotal,
		HeldBack: l.heldBack, PausedUntil: l.pauseUntil, Fallback: l.fallback,
		FallbackTotal: l.fallbackTotal, LiveTasks: l.live, ControlVersion: l.fleet.control.Version, Applied: l.fleet.applied}
	if !l.local {
		s.Table = l.cfg.Table
	}
	if t := l.tokens[ledgerRate]; t != nil {
		s.Tokens = t.held(now)
	}
	if c := l.slots[ledgerConcurrency]; c != nil {
		s.Slots = c.held
	}
	keys := map[string]bool{}
	for name := range l.tokens {
		keys[name] = true
	}
	for name := range l.slots {
		keys[name] = true
	}
	for name := range keys {
		if len(name) > len(ledgerKeyPrefix) && name[:len(ledgerKeyPrefix)] == ledgerKeyPrefix {
			s.Keys++
		}
	}
	if !l.blockedSince.IsZero() {
		s.Waited += now.Sub(l.blockedSince)
	}
	if l.fallback {
		s.FallbackSince = l.fallbackSince
		s.FallbackTotal += now.Sub(l.fallbackSince)
	}
	return s
}
