// Package limits holds job starts to a rate and running jobs to a concurrency, for the fleet
// (every task that names one DynamoDB table) or for one task, overall and per key (a
// tenant), and carries the pauses workers ask for (`watchbot listen --rate-limit`,
// `--fleet-concurrency`, `--limit-key`, `--limits-table`).
//
// The hot path makes no network call: TryStart takes what the task already holds, tokens
// (starts) and slots (running jobs), and Permit.Done gives slots back. Run, one goroutine,
// makes every DynamoDB call: it takes tokens in chunks sized to the task's demand, leases
// slots and renews the leases, gives back slots the task no longer needs, records the task
// as live, and reads the fleet's pause. Every write is a single conditional write (no
// transactions). When DynamoDB fails, a task starts only with what it holds, then falls back
// to its share of each limit. The table layout, the guarantees and their cost:
// docs/limits.md.
package limits

import (
	"fmt"
	"hash/fnv"
	"log/slog"
	"strconv"
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
}

// New returns a Limiter of cfg. With a nil store the limits hold in process (cfg.Table is
// then ignored); otherwise store is the fleet's (NewDynamoStore). clock is the time the
// limiter judges by (time.Now outside tests).
func New(cfg Config, store Store, clock func() time.Time, log *slog.Logger) (*Limiter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
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
	if l.now == nil {
		l.now = time.Now
	}
	return l, nil
}

// Changed receives when a start that TryStart refused may now succeed: tokens or slots
// arrived, a permit was done, a pause ended, the fallback began or ended. Sends coalesce and
// never wait for the receiver.
func (l *Limiter) Changed() <-chan struct{} { return l.changed }

// Permit is a start TryStart allowed. Done must be called once the run ended.
type Permit struct{ p *permit }

type permit struct {
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
	held, wake := false, false
	l.mu.Lock()
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
	ok := now.Compare(l.pauseUntil) >= 0
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
	p := &permit{l: l, n: n}
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
}

// Snapshot returns the Limiter's state now.
func (l *Limiter) Snapshot() Snapshot {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	s := Snapshot{Rate: l.cfg.Rate, Concurrency: l.cfg.Concurrency, RatePerKey: l.cfg.RatePerKey,
		ConcurrencyPerKey: l.cfg.ConcurrencyPerKey, Running: l.running, Waited: l.blockedTotal,
		HeldBack: l.heldBack, PausedUntil: l.pauseUntil, Fallback: l.fallback,
		FallbackTotal: l.fallbackTotal, LiveTasks: l.live}
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

// tokens is what a task holds of one rate limit. Guarded by Limiter.mu.
type tokens struct {
	name     string
	rate     float64
	capacity int
	window   time.Duration
	// chunks are the grants of the table: each usable until its until.
	chunks []chunk
	// settle are the chunks that can no longer be used, whose holds Run has yet to settle.
	settle []chunk
	// demand is the starts refused since Run last fetched.
	demand int
	meter  meter
	// nextTry is when Run may fetch again: after a refusal of the table, when the earliest
	// hold in it lapses.
	nextTry time.Time
	// fallback is the task's own window while it holds to its share of the limit.
	fallback Ledger
	seq      int64
	// validity is how long the last chunk was valid (chunkValidity).
	validity time.Duration
	// bindingUntil: the table had fewer tokens than asked lately, so chunks stay short
	// until then.
	bindingUntil time.Time
	lastUsed     time.Time
}

// chunk is a grant of tokens: n, of which left are unused, usable until until. Its hold in
// the table is named name and counts until holdUntil.
type chunk struct {
	name      string
	n, left   int
	until     time.Time
	holdUntil time.Time
	// lastUse is when the last of its tokens was taken.
	lastUse time.Time
}

// settled is the hold a chunk that can no longer be used needs in the table, and whether
// it needs one: its used tokens only, counting a window (and spawnSlack) from the last use. Every use was
// before the last, so no window holds more starts than the limit; the unused tokens go back.
func (c chunk) settled(window time.Duration) (Hold, bool) {
	used := c.n - c.left
	if used == 0 {
		return Hold{}, false
	}
	return Hold{N: used, Until: c.lastUse.Add(window + spawnSlack)}, true
}

// spawnSlack lengthens a settled hold beyond its window: a job starts when its worker's
// process does, a few milliseconds after the grant, and a later grant's worker may start
// sooner after its grant. The slack keeps the bound for the starts as the workers see them,
// at the cost of 2% of a binding rate.
const spawnSlack = 20 * time.Millisecond

// maxSettled bounds the chunks waiting to be settled in the table; older ones keep the hold
// they were granted, which only costs capacity until it lapses.
const maxSettled = 64

// held is the tokens that may still be used at now.
func (t *tokens) held(now time.Time) int {
	n := 0
	for _, c := range t.chunks {
		if now.Before(c.until) {
			n += c.left
		}
	}
	return n
}

// share is this task's share of the rate in fallback: the rate divided by the live tasks;
// while their number is unknown (0), one start a second, or the rate's own window when it is
// slower.
func (t *tokens) share(live int) (int, time.Duration) {
	r := t.rate / float64(max(live, 1))
	if live == 0 {
		r = min(t.rate, 1)
	}
	return RateCapacity(r), RateWindow(r)
}

// prune moves the chunks that can no longer be used at now (lapsed, or used up) to those
// to settle, and forgets those whose holds lapsed in the table anyway.
func (t *tokens) prune(now time.Time) {
	kept, settle := t.chunks[:0], t.settle[:0]
	for _, c := range t.settle {
		if now.Before(c.holdUntil) {
			settle = append(settle, c)
		}
	}
	for _, c := range t.chunks {
		switch {
		case now.Before(c.until) && c.left > 0:
			kept = append(kept, c)
		case now.Before(c.holdUntil):
			settle = append(settle, c)
		}
	}
	t.chunks = kept
	t.settle = settle[max(len(settle)-maxSettled, 0):]
}

// has reports whether n starts may be taken at now.
func (t *tokens) has(now time.Time, n int, fallback bool, live int) bool {
	n = units(n, t.capacity)
	if t.held(now) >= n {
		return true
	}
	if !fallback {
		return false
	}
	c, _ := t.share(live)
	return t.fallback.Used(now)+units(n, c) <= c
}

// take takes n starts at now; has said yes.
func (t *tokens) take(now time.Time, n int, fallback bool, live int) {
	n = units(n, t.capacity)
	t.meter.add(now, n)
	if t.held(now) < n && fallback {
		c, w := t.share(live)
		t.seq++
		t.fallback = t.fallback.With(now, "fallback/"+strconv.FormatInt(t.seq, 10), Hold{N: units(n, c), Until: now.Add(w)})
		return
	}
	// The chunks are in the order they were granted, so the earliest to lapse go first.
	for i := range t.chunks {
		c := &t.chunks[i]
		if n == 0 || !now.Before(c.until) || c.left == 0 {
			continue
		}
		took := min(n, c.left)
		c.left -= took
		c.lastUse = now
		n -= took
	}
}

// slots is what a task holds of one concurrency limit. Guarded by Limiter.mu.
type slots struct {
	name     string
	capacity int
	// held is the slots the table leases to this task until leaseUntil; inUse of them run.
	held       int
	inUse      int
	leaseUntil time.Time
	// demand is the slots the largest start refused lately needs, last at demandAt; it
	// lapses demandFor after the last refusal, so that a start that went away (its message
	// ran elsewhere, or the task ran out of work) keeps no slot from the fleet.
	demand   int
	demandAt time.Time
	// unsure: the last write of this task's hold failed, or other writers beat it, so the
	// table may hold more than held (a give-back lost) or less: Run writes the hold again.
	unsure bool
	// wantedAt is when a start last took a slot, or waited for other limits holding one:
	// idle slots go back linger after it. armed: Run will look at them then.
	wantedAt time.Time
	armed    bool
	nextTry  time.Time
	// poll is the current wait between asks while the table has no slot free.
	poll     time.Duration
	lastUsed time.Time
}

// has reports whether n more jobs may run at now. Slots count only while their lease
// holds. In fallback the task runs up to its share of the limit, whatever it holds: when
// every task falls back, the shares add up to no more than the limit.
func (s *slots) has(now time.Time, n int, fallback bool, live int) bool {
	n = units(n, s.capacity)
	if fallback {
		return s.inUse+n <= s.share(live)
	}
	return n <= s.free(now)
}

// free is the held slots not in use at now; none once the lease lapsed.
func (s *slots) free(now time.Time) int {
	if !now.Before(s.leaseUntil) {
		return 0
	}
	return max(s.held-s.inUse, 0)
}

// share is this task's share of the limit in fallback: the limit divided by the live tasks,
// rounded down, and at least 1; 1 while their number is unknown (0).
func (s *slots) share(live int) int {
	if live == 0 {
		return 1
	}
	return max(1, s.capacity/live)
}

// meter estimates a rate of starts from the last two whole seconds.
type meter struct {
	start     time.Time
	cur, prev int
}

func (m *meter) roll(now time.Time) {
	switch d := now.Sub(m.start); {
	case m.start.IsZero():
		m.start = now
	case d >= 2*time.Second:
		m.prev, m.cur, m.start = 0, 0, now
	case d >= time.Second:
		m.prev, m.cur, m.start = m.cur, 0, m.start.Add(time.Second)
	}
}

func (m *meter) add(now time.Time, n int) { m.roll(now); m.cur += n }

// rate is the starts per second of the last second, or of this one if it already has more.
func (m *meter) rate(now time.Time) float64 {
	m.roll(now)
	return float64(max(m.prev, m.cur))
}
