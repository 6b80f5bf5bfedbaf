// Package limits holds job starts to a rate and running jobs to a concurrency, for the fleet
// (every task that names one DynamoDB table) or for one task, overall and per key (a
// tenant), and carries the pauses workers ask for (`watchbot listen --rate-limit`,
// `--fleet-concurrency`, `--limit-key`, `--limits-table`) and the operator's control of the
// fleet (`watchbot fleet`: pauses by queue, settings applied live; control.go).
//
// The hot path makes no network call: TryStart takes what the task already holds, tokens
// (starts) and slots (running jobs), and Permit.Done gives slots back. Run, one goroutine,
// makes every DynamoDB call: it takes tokens in chunks sized to the task's demand, leases
// slots and renews the leases, gives back slots the task no longer needs, records the task
// as live, reads the fleet's pause and the operator's control, and writes the task's record.
// Every write is a single conditional write (no
// transactions). When DynamoDB fails, a task starts only with what it holds, then falls back
// to its share of each limit. The table layout, the guarantees and their cost:
// docs/limits.md.
package limits

import (
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Names of the ledgers: one per limit, per key for the keyed limits.
const (
	ledgerRate        = "rate"
	ledgerConcurrency = "concurrency"
	ledgerKeyPrefix   = "key:"
)

// Limiter decides which starts may go ahead now. Its methods are safe for concurrent use;
// Run must run for the table's ledgers to reach it (and, in process, for tokens to arrive).
type Limiter struct {
	cfg   Config
	store Store
	local bool
	// tag names this task's chunks of tokens in the table: short, since a ledger holds
	// one entry a chunk (taskTag).
	tag string
	now func() time.Time
	log *slog.Logger

	// wake tells Run that a start was refused, a slot came back or a pause was asked
	// (capacity 1: a pending wake stands for any number).
	wake chan struct{}
	// changed tells the caller that a refused start may now succeed (capacity 1).
	changed chan struct{}

	// mu guards what TryStart, Done and Run share, below. It is never held across a store
	// call or a channel send.
	mu         sync.Mutex
	tokens     map[string]*tokens
	slots      map[string]*slots
	pauseUntil time.Time
	// pauseAsked is a pause asked in this task that Run has yet to write to the table.
	pauseAsked time.Time
	// live is the tasks the table showed live when Run last read it; 0 until it has (the
	// fleet's size is unknown: a fallback takes the smallest share).
	live     int
	fallback bool
	// failingSince is when the store calls began to fail; zero while they succeed.
	failingSince  time.Time
	fallbackSince time.Time
	fallbackTotal time.Duration
	blockedSince  time.Time
	blockedTotal  time.Duration
	heldBack      int64
	running       int
	// fleet is the operator's control as the task last read it, and what it runs by under it.
	fleet fleetState
}

// fleetState is what the task applies of the operator's control. Guarded by Limiter.mu.
type fleetState struct {
	control Control
	// flags are the task's own settings, which the control's settings override.
	flags Settings
	// applied are the settings in force.
	applied Settings
	// maxRunning caps the task's running jobs (0: none beyond its slots); batchSize is the
	// batch size in force (0: the task's own).
	maxRunning, batchSize int
}

// New returns a Limiter of cfg, which comes validated (Config.Validate, which listen's
// configuration calls when it is read) and is trusted. With a nil store the limits hold in
// process (cfg.Table is then ignored); otherwise store is the fleet's (NewDynamoStore). clock
// is the time the limiter judges by (time.Now outside tests).
func New(cfg Config, store Store, clock func() time.Time, log *slog.Logger) *Limiter {
	l := &Limiter{cfg: cfg, store: store, now: clock, log: log,
		wake: make(chan struct{}, 1), changed: make(chan struct{}, 1),
		tokens: map[string]*tokens{}, slots: map[string]*slots{}}
	if store == nil {
		l.store, l.local, l.live = newMemStore(), true, 1
		if l.cfg.Task == "" {
			l.cfg.Task = "local"
		}
	}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	l.tag = taskTag(l.cfg.Task)
	rate, fleetConcurrency := l.cfg.Rate, l.cfg.Concurrency
	l.fleet.flags = Settings{Concurrency: cfg.Member.Concurrency, RateLimit: &rate, FleetConcurrency: &fleetConcurrency, BatchSize: cfg.Member.BatchSize}
	l.fleet.applied = l.fleet.flags
	if l.now == nil {
		l.now = time.Now
	}
	return l
}

// Changed receives when a start that TryStart refused may now succeed: tokens or slots
// arrived, a permit was done, a pause ended, the fallback began or ended. Sends coalesce and
// never wait for the receiver.
func (l *Limiter) Changed() <-chan struct{} { return l.changed }

// Permit is a start TryStart allowed. Done must be called once the run ended.
type Permit struct{ p *permitState }

// permitState is what a Permit gives back when it is done: its slots, once.
type permitState struct {
	l     *Limiter
	slots [2]*slots
	n     int
	done  atomic.Bool
}

// Done says the run ended: its concurrency slots go back to the task, and from there to
// the table when the task does not need them again soon, so that other tasks can have them.
// A second call, and a call on the zero Permit, do nothing.
func (p Permit) Done() {
	if p.p == nil || !p.p.done.CompareAndSwap(false, true) {
		return
	}
	l := p.p.l
	l.mu.Lock()
	// Under a fleet --concurrency an end leaves room for a start.
	held, wake := l.fleet.maxRunning > 0, false
	l.running--
	for _, s := range p.p.slots {
		if s == nil {
			continue
		}
		held = true
		s.inUse -= units(p.p.n, s.capacity)
		// Run gives idle slots back unless a start wants them soon; it is told once.
		wake = wake || (s.held > s.inUse && !s.armed)
	}
	l.mu.Unlock()
	if held {
		signal(l.changed)
	}
	if wake {
		signal(l.wake)
	}
}

// TryStart takes n starts (a batch run counts its messages) for key ("": the message has
// none, and only the fleet's limits apply) from what the task holds. It never waits and makes
// no network call. When it refuses, Run fetches what was missing, and Changed tells when to
// try again. A batch larger than a limit counts as the whole limit.
func (l *Limiter) TryStart(key string, n int) (Permit, bool) {
	n = max(n, 1)
	now := l.now()
	l.mu.Lock()
	ok := now.Compare(l.pauseUntil) >= 0 && (l.fleet.maxRunning == 0 || l.running < l.fleet.maxRunning)
	var toks [2]*tokens
	var sls [2]*slots
	if ok {
		toks, sls = l.needs(key, now)
		ok = l.check(now, toks, sls, n)
	}
	if !ok {
		l.heldBack++
		if l.blockedSince.IsZero() {
			l.blockedSince = now
		}
		l.mu.Unlock()
		signal(l.wake)
		return Permit{}, false
	}
	p := &permitState{l: l, n: n}
	for _, t := range toks {
		if t != nil {
			t.take(now, n, l.fallback, l.live)
		}
	}
	for _, s := range sls {
		if s != nil {
			s.inUse += units(n, s.capacity)
			s.wantedAt = now
		}
	}
	p.slots = sls
	l.running++
	if !l.blockedSince.IsZero() {
		l.blockedTotal += now.Sub(l.blockedSince)
		l.blockedSince = time.Time{}
	}
	l.mu.Unlock()
	return Permit{p: p}, true
}

// check reports whether a start of n may draw on toks and sls at now. The limits are tried
// in order: the key's slots, the fleet's slots, the key's tokens, the fleet's tokens; a
// refusal asks Run for the first that is short, and keeps the idle slots of those before
// it for the start. So a start that waits for a busy key holds no fleet slot that another
// key could use, and tokens, which lapse soon, are fetched only for a start that has its
// slots. l.mu is held.
func (l *Limiter) check(now time.Time, toks [2]*tokens, sls [2]*slots, n int) bool {
	reserve := func() {
		for _, s := range sls {
			if s != nil && s.held > s.inUse && s.has(now, n, l.fallback, l.live) {
				s.wantedAt = now
			}
		}
	}
	for _, s := range sls {
		if s != nil && !s.has(now, n, l.fallback, l.live) {
			// The caller tries a refused start again on every pass: the demand is the
			// largest start refused lately, not the sum of the tries.
			s.demand, s.demandAt = max(s.demand, units(n, s.capacity)), now
			if s == sls[1] {
				reserve()
			}
			return false
		}
	}
	for _, t := range toks {
		if t != nil && !t.has(now, n, l.fallback, l.live) {
			t.demand = min(t.demand+units(n, t.capacity), t.capacity)
			reserve()
			return false
		}
	}
	return true
}

// needs returns the token and slot states a start of key draws on, the key's first,
// creating them on first use. l.mu is held.
func (l *Limiter) needs(key string, now time.Time) (toks [2]*tokens, sls [2]*slots) {
	if key != "" && l.cfg.RatePerKey > 0 {
		toks[0] = l.tokensOf(ledgerKeyPrefix+ledgerRate+":"+key, l.cfg.RatePerKey, now)
	}
	if l.cfg.Rate > 0 {
		toks[1] = l.tokensOf(ledgerRate, l.cfg.Rate, now)
	}
	if key != "" && l.cfg.ConcurrencyPerKey > 0 {
		sls[0] = l.slotsOf(ledgerKeyPrefix+ledgerConcurrency+":"+key, l.cfg.ConcurrencyPerKey, now)
	}
	if l.cfg.Concurrency > 0 {
		sls[1] = l.slotsOf(ledgerConcurrency, l.cfg.Concurrency, now)
	}
	return toks, sls
}

func (l *Limiter) tokensOf(name string, rate float64, now time.Time) *tokens {
	t := l.tokens[name]
	if t == nil {
		t = &tokens{name: name, rate: rate, capacity: RateCapacity(rate), window: RateWindow(rate)}
		l.tokens[name] = t
	}
	t.lastUsed = now
	return t
}

func (l *Limiter) slotsOf(name string, capacity int, now time.Time) *slots {
	s := l.slots[name]
	if s == nil {
		s = &slots{name: name, capacity: capacity}
		l.slots[name] = s
	}
	s.lastUsed = now
	return s
}

// Pause stops new starts for d (at most MaxPause) from now: for the fleet when there is a
// table (Run writes it there, and every task's Run reads it within PollInterval), else for
// this task. A pause never shortens one in force.
func (l *Limiter) Pause(d time.Duration) {
	d = min(d, l.cfg.MaxPause)
	if d <= 0 {
		return
	}
	until := l.now().Add(d)
	l.mu.Lock()
	if until.After(l.pauseUntil) {
		l.pauseUntil = until
		if !l.local {
			l.pauseAsked = until
		}
	}
	l.mu.Unlock()
	signal(l.wake)
}

// PausedUntil is when the pause in force ends; zero or past when none is.
func (l *Limiter) PausedUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pauseUntil
}

// taskTag is 12 hex digits of a hash of task, and a dot: tasks' tags differ but by a
// chance of about one in 10^8 for a thousand tasks.
func taskTag(task string) string {
	h := fnv.New64a()
	h.Write([]byte(task))
	return fmt.Sprintf("%012x.", h.Sum64()>>16)
}

// units is what n starts count against a limit of capacity: a batch larger than the limit
// counts as the whole limit, so that it can ever start.
func units(n, capacity int) int { return min(n, capacity) }

// signal sends on a channel of capacity 1 without waiting: a pending signal stands for any
// number.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
