package supervisor

import (
	"sync"
	"time"
)

// Load is what a running supervisor is doing, for readers on other goroutines (the metrics
// gauges, scale-in protection): its worker slots, how many run a job, and whether it holds
// or runs any message. The supervisor's loop writes it; build it with NewLoad and pass it in
// QueueDeps to read it.
type Load struct {
	mu sync.Mutex
	loadState
	// busy is the slot-seconds spent running jobs since the last BusySlots, counted up to
	// mark; since is when that window began. braked is the seconds spent braking since the
	// last BrakingSeconds, counted up to mark.
	busy        float64
	mark, since time.Time
	braked      float64
	// changed receives (without blocking the writer) when active changes.
	changed chan struct{}
	// starts holds when each run under way started, by its first message's job, for the age
	// of the oldest: a job past SQS's in-flight limit is one to watch.
	starts map[*job]time.Time
}

// NewLoad returns an empty Load.
func NewLoad() *Load {
	now := time.Now()
	return &Load{changed: make(chan struct{}, 1), mark: now, since: now, starts: map[*job]time.Time{}}
}

// loadState is the loop's state.
type loadState struct {
	slots   int  // worker slots: --concurrency (1 with --once)
	limit   int  // runs allowed at once now: slots, less while the brake is on
	running int  // runs under way
	held    int  // messages held: running, or waiting for a slot, a batch or their group
	active  bool // holds or runs any message
	braking bool
}

// set records the loop's state at now.
func (l *Load) set(now time.Time, st loadState) {
	l.mu.Lock()
	l.count(now)
	changed := st.active != l.active
	l.loadState = st
	l.mu.Unlock()
	if changed {
		select { // after the lock, as every send
		case l.changed <- struct{}{}:
		default:
		}
	}
}

// count adds the time since mark to the windows. The lock is held.
func (l *Load) count(now time.Time) {
	elapsed := now.Sub(l.mark).Seconds()
	l.busy += float64(l.running) * elapsed
	if l.braking {
		l.braked += elapsed
	}
	l.mark = now
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
	l.count(now)
	busy, elapsed := l.busy, now.Sub(l.since).Seconds()
	l.busy, l.since = 0, now
	if elapsed <= 0 {
		return float64(l.running)
	}
	return busy / elapsed
}

// runStarted records that the run whose first message is j started at at.
func (l *Load) runStarted(j *job, at time.Time) {
	l.mu.Lock()
	l.starts[j] = at
	l.mu.Unlock()
}

// runEnded forgets the run whose first message is j; ending twice is ending once.
func (l *Load) runEnded(j *job) {
	l.mu.Lock()
	delete(l.starts, j)
	l.mu.Unlock()
}

// OldestRun returns how long the longest run under way has run at now; 0 when none runs.
func (l *Load) OldestRun(now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var oldest time.Duration
	for _, at := range l.starts {
		oldest = max(oldest, now.Sub(at))
	}
	return oldest
}

// Running returns the worker runs under way.
func (l *Load) Running() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.running
}

// Held returns the messages held: running, or waiting for a slot, a batch or their group.
func (l *Load) Held() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held
}

// Braking reports whether the brake is on.
func (l *Load) Braking() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.braking
}

// Limit returns the runs allowed at once now: the slots, or fewer while the brake is on.
func (l *Load) Limit() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limit
}

// BrakingSeconds returns the seconds spent braking since the last call (or since the Load
// was made), and starts a new window.
func (l *Load) BrakingSeconds() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.count(time.Now())
	braked := l.braked
	l.braked = 0
	return braked
}

// Active reports whether the supervisor holds or runs any message.
func (l *Load) Active() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.active
}

// Changed receives when Active may have changed.
func (l *Load) Changed() <-chan struct{} { return l.changed }
