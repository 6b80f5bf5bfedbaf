package limits

import (
	"context"
	"errors"
	"math"
	"slices"
	"strconv"
	"time"
)

// How Run paces its work; docs/limits.md explains the choices.
const (
	// shortValidity is how long a chunk of tokens may be used when the limit is close to
	// binding (long enough for a loop that was told of it to come back); longValidity when
	// it is far from it. A chunk's tokens count in the table for RateWindow plus its
	// validity from the grant, so that no window of RateWindow holds more starts than the
	// limit whenever in its validity a token is used, until the task settles the chunk: then
	// its unused tokens go back and the used ones count RateWindow from the last use.
	shortValidity = 200 * time.Millisecond
	longValidity  = time.Second
	// prefetchFrom: after a chunk valid this long or longer, Run fetches the next before
	// the task runs out.
	prefetchFrom = 400 * time.Millisecond
	// linger is how long an idle slot stays with the task in case the next start needs it.
	linger = 250 * time.Millisecond
	// demandFor is how long a refused start counts as demand for slots: the supervisor
	// tries a refused start again within a second, so a demand not renewed for longer
	// is gone.
	demandFor = 2 * time.Second
	// slotPoll is the first wait before asking the table again for slots it had none of;
	// the wait doubles up to PollInterval.
	slotPoll = 100 * time.Millisecond
	// minGap keeps Run from asking about one ledger more often than this.
	minGap = 10 * time.Millisecond
	// retryMin is the first wait after a failed call; it doubles up to PollInterval.
	retryMin = 100 * time.Millisecond
	// idleFor is how long a key's state outlives its last start when it holds nothing.
	idleFor = time.Minute
	// stopTimeout bounds giving the slots back when Run ends.
	stopTimeout = 5 * time.Second
	// goneAfter is how long past its last beat a task is removed from the fleet row.
	goneAfter = 10 * LiveFor
	// jobTimeout bounds the calls of one piece of Run's work (a read and a write, or a few
	// after conflicts): a stalled endpoint fails them, and the fallback can begin.
	jobTimeout = FallbackAfter
)

// Run makes every call to the store until ctx ends: it fetches tokens and leases slots when
// a start was refused for want of them, renews the leases every Lease/3, gives back slots
// idle for a moment, records this task as live every HeartbeatInterval, reads the fleet's
// pause every PollInterval and writes the pauses asked here. When ctx ends it gives back
// every slot and forgets the task in the table, then returns nil. Cancel ctx only after the
// last run ended: slots of runs still going are given back all the same.
func (l *Limiter) Run(ctx context.Context) error {
	r := &runner{l: l, cache: map[string]Ledger{}, contended: map[string]bool{}}
	for ctx.Err() == nil {
		jobs, next := r.plan(l.now())
		for _, j := range jobs {
			if ctx.Err() != nil {
				break
			}
			r.began = l.now()
			jctx, cancel := context.WithTimeout(ctx, jobTimeout)
			j(jctx)
			cancel()
		}
		if len(jobs) > 0 {
			continue
		}
		wait(ctx, l.wake, next.Sub(l.now()), !next.IsZero())
	}
	r.stop(context.WithoutCancel(ctx))
	return nil
}

// wait returns when ctx ends, wake receives, or (when timed) d has passed.
func wait(ctx context.Context, wake <-chan struct{}, d time.Duration, timed bool) {
	var timeout <-chan time.Time
	if timed {
		t := time.NewTimer(max(d, 0))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-ctx.Done():
	case <-wake:
	case <-timeout:
	}
}

// runner is Run's own state: nothing here is shared.
type runner struct {
	l *Limiter
	// cache is the last copy of each ledger read or written.
	cache map[string]Ledger
	// contended marks the ledgers whose last write found that another task wrote first.
	contended  map[string]bool
	failures   int
	nextBeat   time.Time
	nextPoll   time.Time
	nextPause  time.Time
	fleet      Fleet
	lastLogged time.Time
	// began is when the work under way began: a failure counts from then.
	began     time.Time
	pauseEnds time.Time
}

type job func(ctx context.Context)

// plan decides what to do now, as a list of calls, and when to look again if there is
// nothing to do. It runs under the lock and makes no call.
func (r *runner) plan(now time.Time) ([]job, time.Time) {
	l := r.l
	l.mu.Lock()
	var jobs []job
	var next time.Time
	at := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	if !l.local {
		if !now.Before(r.nextBeat) {
			r.nextBeat = now.Add(HeartbeatInterval)
			jobs = append(jobs, r.beat)
		} else if !now.Before(r.nextPoll) {
			r.nextPoll = now.Add(PollInterval)
			jobs = append(jobs, r.poll)
		}
		at(r.nextBeat)
		at(r.nextPoll)
		if !l.pauseAsked.IsZero() {
			if !now.Before(r.nextPause) {
				r.nextPause = now.Add(minGap)
				jobs = append(jobs, r.writePause(l.pauseAsked))
			}
			at(r.nextPause)
		}
	}
	// A pause that ended lets refused starts try again.
	pauseEnded := false
	if !r.pauseEnds.IsZero() && !now.Before(r.pauseEnds) {
		pauseEnded, r.pauseEnds = true, time.Time{}
	}
	if now.Before(l.pauseUntil) {
		r.pauseEnds = l.pauseUntil
		at(l.pauseUntil)
	}
	for name, t := range l.tokens {
		t.prune(now)
		held := t.held(now)
		rate := t.meter.rate(now)
		// With long chunks, the next is fetched when half of the last is left.
		wanted := t.demand > 0 || (t.validity >= prefetchFrom && rate > 0 && float64(held) < rate*t.validity.Seconds()/2)
		switch {
		case wanted && now.Before(t.nextTry):
			at(t.nextTry)
		case wanted:
			t.nextTry = now.Add(minGap)
			jobs = append(jobs, r.fetch(t, t.demand, held, rate, now.Before(t.bindingUntil), slices.Clone(t.settle)))
		case held == 0 && t.fallback.Used(now) == 0 && now.Sub(t.lastUsed) > idleFor && name != ledgerRate:
			delete(l.tokens, name)
			delete(r.cache, name)
			delete(r.contended, name)
		}
		for _, c := range t.chunks {
			if c.left > 0 {
				at(c.until)
			}
		}
	}
	for name, s := range l.slots {
		renewAt := s.leaseUntil.Add(-2 * l.cfg.Lease / 3)
		if s.demand > 0 && (s.free(now) >= s.demand || now.Sub(s.demandAt) >= demandFor) {
			// Slots came back since the refusal (the retry will find them), or the start
			// that asked went away: either way the task needs no more.
			s.demand = 0
		}
		switch {
		case now.Before(s.nextTry) && (s.demand > 0 || s.held > 0 || s.unsure):
			at(s.nextTry)
		case s.demand > 0:
			s.nextTry = now.Add(minGap)
			jobs = append(jobs, r.lease(s, s.demand-s.free(now)))
		case s.held > s.inUse && !now.Before(s.wantedAt.Add(linger)):
			// Idle slots leave the pool now, so no start takes one while they go back.
			s.held, s.armed = s.inUse, false
			s.nextTry = now.Add(minGap)
			jobs = append(jobs, r.lease(s, 0))
		case s.inUse > s.held && !l.fallback && !now.Before(s.nextTry), s.unsure:
			// Runs started in a fallback: the table is told of them. Or the last write
			// failed: it is made again, so that a give-back is not lost until the lease
			// lapses.
			s.nextTry = now.Add(minGap)
			jobs = append(jobs, r.lease(s, 0))
		case s.held > 0 && !now.Before(renewAt):
			s.nextTry = now.Add(minGap)
			jobs = append(jobs, r.lease(s, 0))
		case s.held > 0:
			at(renewAt)
			if s.armed = s.held > s.inUse; s.armed {
				at(s.wantedAt.Add(linger))
			}
		case s.inUse == 0 && !s.unsure && now.Sub(s.lastUsed) > idleFor && name != ledgerConcurrency:
			delete(l.slots, name)
			delete(r.cache, name)
			delete(r.contended, name)
		}
	}
	l.mu.Unlock()
	if pauseEnded {
		signal(l.changed)
	}
	return jobs, next
}

// fetch asks the table for tokens: the demand, and with it what the recent rate will use
// while the chunk is valid. In the same write it settles the holds of the chunks in settle.
func (r *runner) fetch(t *tokens, demand, held int, rate float64, binding bool, settle []chunk) job {
	return func(ctx context.Context) {
		l := r.l
		var chunkAt time.Time
		var got, want int
		var name string
		validity := shortValidity
		wrote, err := r.update(ctx, t.name, func(now time.Time, led Ledger) (Ledger, bool) {
			next := led.successor(now)
			settled := settleHolds(next, settle, t.window)
			free := t.capacity - next.Used(now)
			if binding {
				// Only what waits now, used at once.
				validity = shortValidity
				want = tokenWant(demand, held, 0, shortValidity)
			} else {
				validity = chunkValidity(free, rate)
				want = tokenWant(demand, held, rate, validity)
			}
			got = min(want, free)
			if got <= 0 {
				if chunkAt = next.Next(now); chunkAt.IsZero() {
					chunkAt = now.Add(PollInterval)
				}
				return next, settled
			}
			chunkAt = now
			l.mu.Lock()
			t.seq++
			name = l.tag + strconv.FormatInt(t.seq, 36)
			l.mu.Unlock()
			next.Holds[name] = Hold{N: got, Until: now.Add(t.window + validity)}
			return next, true
		})
		now := l.now()
		l.mu.Lock()
		if wrote {
			t.settle = slices.DeleteFunc(t.settle, func(c chunk) bool {
				return slices.ContainsFunc(settle, func(s chunk) bool { return s.name == c.name })
			})
		}
		switch {
		case err != nil:
			t.nextTry = now.Add(r.retryDelay())
		case got <= 0:
			// The table has none to spare until its earliest hold lapses.
			t.nextTry = chunkAt
			t.bindingUntil = now.Add(2 * t.window)
		case !wrote:
			// Other tasks wrote first, every time: ask again in a moment.
			t.nextTry = now.Add(minGap)
		default:
			t.chunks = append(t.chunks, chunk{name: name, n: got, left: got, until: chunkAt.Add(validity),
				holdUntil: chunkAt.Add(t.window + validity)})
			t.demand = 0
			t.validity = validity
			if got < want {
				t.bindingUntil = now.Add(2 * t.window)
			}
		}
		l.mu.Unlock()
		r.done(err)
		if wrote && got > 0 {
			signal(l.changed)
		}
	}
}

// settleHolds replaces in next the holds of the chunks in settle by what they need now
// (chunk.settled), and reports whether it changed any.
func settleHolds(next Ledger, settle []chunk, window time.Duration) bool {
	changed := false
	for _, c := range settle {
		h, ok := next.Holds[c.name]
		if !ok {
			continue
		}
		s, keep := c.settled(window)
		switch {
		case !keep:
			delete(next.Holds, c.name)
		case s.Until.Before(h.Until) || s.N < h.N:
			next.Holds[c.name] = Hold{N: min(s.N, h.N), Until: earlier(s.Until, h.Until)}
		default:
			continue
		}
		changed = true
	}
	return changed
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// chunkValidity is how long a chunk may be used, given the tokens free in the table and the
// task's recent rate: long enough that the chunk is about half of what is free, between
// shortValidity and longValidity. Every token counts in the table for its validity beyond
// RateWindow, so long chunks are worth it only far from the limit; close to it, chunks are
// short and hold only the starts that wait now.
func chunkValidity(free int, rate float64) time.Duration {
	if rate <= 0 || free <= 0 {
		return shortValidity
	}
	v := time.Duration(float64(free) / 2 / rate * float64(time.Second))
	return min(max(v, shortValidity), longValidity)
}

// tokenWant is how many tokens to ask for: the refused demand, plus what the recent rate
// uses in validity, less what is held; at least one when a start waits.
func tokenWant(demand, held int, rate float64, validity time.Duration) int {
	w := demand + int(math.Floor(rate*validity.Seconds())) - held
	if demand > 0 {
		w = max(w, 1)
	}
	return max(w, 0)
}

// lease writes this task's hold of slots in the table: the slots it holds, plus more (up to
// the refused demand) when there are free ones, leased for another Lease. It renews, takes
// and gives back in one write; slots that idled were taken out of held already.
func (r *runner) lease(s *slots, more int) job {
	return func(ctx context.Context) {
		l := r.l
		var leased time.Time
		var hold, got int
		// same: the table already holds what this write would, for long enough.
		same := false
		wrote, err := r.update(ctx, s.name, func(now time.Time, led Ledger) (Ledger, bool) {
			// The runs under way count, those started in a fallback too.
			l.mu.Lock()
			held := max(s.held, s.inUse)
			l.mu.Unlock()
			mine := led.Holds[l.cfg.Task]
			others := led.Used(now)
			if mine.Until.After(now) {
				others -= mine.N
			}
			free := max(s.capacity-others, 0)
			// A lease that lapsed may have gone to others meanwhile: keep what still fits.
			hold = min(held, free)
			got = min(more, free-hold)
			hold += got
			leased = now
			if same = more > 0 && got == 0 && hold == mine.N && mine.Until.After(now.Add(l.cfg.Lease/3)); same {
				return Ledger{}, false
			}
			return led.With(now, l.cfg.Task, Hold{N: hold, Until: now.Add(l.cfg.Lease)}), true
		})
		now := l.now()
		lost := 0
		l.mu.Lock()
		// Unless it wrote, or found nothing to write, the table may not hold what the task
		// does: the hold is written again.
		s.unsure = !wrote && !same
		switch {
		case err != nil:
			s.nextTry = now.Add(r.retryDelay())
		case wrote:
			lost = s.held - (hold - got)
			s.held = hold
			if hold > 0 {
				s.leaseUntil = leased.Add(l.cfg.Lease)
			}
			if got > 0 {
				// For the start that asked: they go back if it does not take them soon.
				s.demand, s.poll, s.wantedAt = 0, 0, now
			}
			if hold < s.inUse {
				// Runs started in a fallback that the table has no room for yet: tell it
				// again in a while.
				s.nextTry = now.Add(PollInterval)
			}
		}
		if err == nil && got == 0 && more > 0 {
			// None free: ask again later, less often the longer it lasts.
			s.poll = min(max(2*s.poll, slotPoll), PollInterval)
			s.nextTry = now.Add(s.poll)
		}
		l.mu.Unlock()
		if lost > 0 {
			l.log.Warn("limits: slots of a lapsed lease were taken by other tasks", "limit", s.name, "slots", lost)
		}
		r.done(err)
		if wrote && got > 0 {
			signal(l.changed)
		}
	}
}

// update reads ledger name (or takes the cached copy), lets change decide the next version,
// and writes it on condition that no one wrote in between, reading again after a conflict.
// A cached copy that change leaves alone is read again once: it may be stale.
// It reports whether it wrote: not when change wrote nothing, nor after writers came first
// maxTries times in a row.
func (r *runner) update(ctx context.Context, name string, change func(now time.Time, led Ledger) (Ledger, bool)) (bool, error) {
	led, cached := r.cache[name]
	if r.contended[name] {
		// Others wrote since the last write: the cached copy is likely stale, and a
		// write over it would cost a failed write and a read.
		cached = false
	}
	r.contended[name] = false
	for range maxTries {
		if !cached {
			var err error
			if led, err = r.l.store.Ledger(ctx, name); err != nil {
				return false, err
			}
			r.cache[name] = led
		}
		next, write := change(r.l.now(), led)
		if !write {
			if cached {
				cached = false
				continue
			}
			return false, nil
		}
		err := r.l.store.PutLedger(ctx, name, led.Version, next)
		if err == nil {
			r.cache[name] = next
			return true, nil
		}
		if !errors.Is(err, ErrConflict) {
			delete(r.cache, name)
			return false, err
		}
		cached = false
		r.contended[name] = true
	}
	return false, nil
}

// maxTries bounds the writes of one update that other writers beat.
const maxTries = 4

// beat records the task as live and reads the fleet row in the same call.
func (r *runner) beat(ctx context.Context) {
	now := r.l.now()
	var gone []string
	for task, until := range r.fleet.Tasks {
		if task != r.l.cfg.Task && now.Sub(until) > goneAfter {
			gone = append(gone, task)
		}
	}
	f, err := r.l.store.Beat(ctx, r.l.cfg.Task, now.Add(LiveFor), gone)
	if err != nil {
		r.nextBeat = now.Add(r.retryDelay())
	} else {
		r.seen(f)
	}
	r.done(err)
}

// poll reads the fleet row for a pause.
func (r *runner) poll(ctx context.Context) {
	f, err := r.l.store.Fleet(ctx)
	if err != nil {
		r.nextPoll = r.l.now().Add(r.retryDelay())
	} else {
		r.seen(f)
	}
	r.done(err)
}

// seen takes in the fleet row: its pause and how many tasks are live.
func (r *runner) seen(f Fleet) {
	r.fleet = f
	now := r.l.now()
	r.l.mu.Lock()
	if f.PauseUntil.After(r.l.pauseUntil) {
		r.l.pauseUntil = f.PauseUntil
	}
	r.l.live = f.Live(now)
	r.l.mu.Unlock()
}

// writePause writes a pause asked here to the fleet row.
func (r *runner) writePause(until time.Time) job {
	return func(ctx context.Context) {
		err := r.l.store.Pause(ctx, until)
		r.l.mu.Lock()
		if err == nil && r.l.pauseAsked.Equal(until) {
			r.l.pauseAsked = time.Time{}
		}
		r.l.mu.Unlock()
		if err != nil {
			r.nextPause = r.l.now().Add(r.retryDelay())
		}
		r.done(err)
	}
}

// done takes in how a call went: a task whose calls have all failed for FallbackAfter falls
// back to its share of each limit, and comes back with the first call that succeeds.
func (r *runner) done(err error) {
	l := r.l
	now := l.now()
	l.mu.Lock()
	wasFallback, live := l.fallback, l.live
	if err == nil {
		r.failures = 0
		if l.fallback {
			l.fallback = false
			l.fallbackTotal += now.Sub(l.fallbackSince)
		}
		since := l.fallbackSince
		l.failingSince = time.Time{}
		l.mu.Unlock()
		if wasFallback {
			l.log.Info("limits: DynamoDB answers again; the fleet's limits hold again", "table", l.cfg.Table,
				"fallback_for", now.Sub(since).Round(time.Millisecond))
			signal(l.changed)
		}
		return
	}
	r.failures++
	if l.failingSince.IsZero() {
		l.failingSince = r.began
		if l.failingSince.IsZero() || l.failingSince.After(now) {
			l.failingSince = now
		}
	}
	if !l.fallback && now.Sub(l.failingSince) >= FallbackAfter {
		l.fallback, l.fallbackSince = true, now
	}
	fallback, since := l.fallback, l.fallbackSince
	l.mu.Unlock()
	if fallback && now.Sub(r.lastLogged) >= FallbackLogInterval {
		r.lastLogged = now
		l.log.Warn("limits: DynamoDB fails; this task holds to its share of each limit", "table", l.cfg.Table,
			"live_tasks", live, "since", since, "error", err)
	}
	if fallback && !wasFallback {
		signal(l.changed)
	}
}

// retryDelay is the wait before calling again after a failure: 100 ms, doubling up to
// PollInterval.
func (r *runner) retryDelay() time.Duration {
	return min(retryMin<<min(r.failures, 10), PollInterval)
}

// stop gives back every slot and forgets the task in the table.
func (r *runner) stop(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, stopTimeout)
	defer cancel()
	l := r.l
	l.mu.Lock()
	var held []*slots
	for _, s := range l.slots {
		if s.held > 0 {
			s.held = 0
			held = append(held, s)
		}
	}
	l.mu.Unlock()
	for _, s := range held {
		r.lease(s, 0)(ctx)
	}
	if !l.local {
		if err := l.store.Leave(ctx, l.cfg.Task); err != nil {
			l.log.Warn("limits: could not remove this task from the table; it stops counting as live on its own", "table", l.cfg.Table, "error", err)
		}
	}
}
