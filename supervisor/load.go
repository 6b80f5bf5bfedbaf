package supervisor

import (
	"sync"
	"time"
)

// Load is what a running supervisor is doing, for readers on other goroutines (the metrics
// gauges, scale-in protection): its worker slots, how many run a job, and whether it holds
// or runs any message. The supervisor's loop writes it; build it with NewLoad and pass it in
// Deps to read it.
type Load struct {
	mu      sync.Mutex
	slots   int
	running int
	active  bool
	// busy is the slot-seconds spent running jobs since the last BusySlots, counted up to
	// mark; since is when that window began.
	busy        float64
	mark, since time.Time
	// changed receives (without blocking the writer) when active changes.
	changed chan struct{}
}

// NewLoad returns an empty Load.
func NewLoad() *Load {
	now := time.Now()
	return &Load{changed: make(chan struct{}, 1), mark: now, since: now}
}

// set records the loop's state at now.
func (l *Load) set(now time.Time, slots, running int, active bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.busy += float64(l.running) * now.Sub(l.mark).Seconds()
	l.mark = now
	l.slots, l.running = slots, running
	if active != l.active {
		l.active = active
		select {
		case l.changed <- struct{}{}:
		default:
		}
	}
}

// Slots returns the worker slots: how many worker runs may be under way at once.
func (l *Load) Slots() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.slots
}

// BusySlots returns the slots that ran a job on average since the last call (or since the
// Load was made), and starts a new window.
func (l *Load) BusySlots() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	busy := l.busy + float64(l.running)*now.Sub(l.mark).Seconds()
	elapsed := now.Sub(l.since).Seconds()
	l.busy, l.mark, l.since = 0, now, now
	if elapsed <= 0 {
		return float64(l.running)
	}
	return busy / elapsed
}

// Active reports whether the supervisor holds or runs any message.
func (l *Load) Active() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.active
}

// Changed receives when Active may have changed.
func (l *Load) Changed() <-chan struct{} { return l.changed }
