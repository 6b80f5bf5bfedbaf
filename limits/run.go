package limits

import (
	"context"
	"errors"
	"slices"
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
	// callTimeout bounds the requests of one call of Run's (a read and a write, or a few
	// after conflicts): a stalled endpoint fails them, and the fallback can begin.
	callTimeout = FallbackAfter
)

// Run makes every call to the store until ctx ends: it fetches tokens and leases slots when
// a start was refused for want of them, renews the leases every Lease/3, gives back slots
// idle for a moment, records this task as live every HeartbeatInterval, reads the fleet's
// pause every PollInterval and writes the pauses asked here. When ctx ends it gives back
// every slot and forgets the task in the table, then returns nil. Cancel ctx only after the
// last run ended: slots of runs still going are given back all the same.
func (l *Limiter) Run(ctx context.Context) error {
	r := &caller{l: l, cache: map[string]Ledger{}, contended: map[string]bool{}}
	for ctx.Err() == nil {
		calls, next := r.plan(l.now())
		for _, c := range calls {
			if ctx.Err() != nil {
				break
			}
			r.began = l.now()
			cctx, cancel := context.WithTimeout(ctx, callTimeout)
			c(cctx)
			cancel()
		}
		if len(calls) > 0 {
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

// caller is Run's own state, the goroutine that makes every call to the store: its copy of
// the ledgers and when it calls next. Nothing here is shared.
type caller struct {
	l *Limiter
	// cache is the last copy of each ledger read or written.
	cache map[string]Ledger
	// contended marks the ledgers whose last write found that another task wrote first.
	contended  map[string]bool
	failures   int
	nextBeat   time.Time
	nextPoll   time.Time
	nextRecord time.Time
	nextPause  time.Time
	fleet      Fleet
	lastLogged time.Time
	// began is when the work under way began: a failure counts from then.
	began     time.Time
	pauseEnds time.Time
}

// call is one piece of Run's work: a read and a write of the store, or a few after conflicts.
type call func(ctx context.Context)

// agenda is what one plan decided: the calls to make now, and the earliest time something
// is due when there are none.
type agenda struct {
	calls []call
	next  time.Time
}

func (a *agenda) add(c call) { a.calls = append(a.calls, c) }

// at notes that something is due at t; a zero t is nothing.
func (a *agenda) at(t time.Time) {
	if !t.IsZero() && (a.next.IsZero() || t.Before(a.next)) {
		a.next = t
	}
}

// plan decides what to do now, as a list of calls, and when to look again if there is
// nothing to do. It runs under the lock and makes no call.
func (r *caller) plan(now time.Time) ([]call, time.Time) {
	l := r.l
	var a agenda
	l.mu.Lock()
	if !l.local {
		r.planFleet(now, &a)
	}
	pauseEnded := r.planPause(now, &a)
	for name, t := range l.tokens {
		r.planTokens(now, name, t, &a)
	}
	for name, s := range l.slots {
		r.planSlots(now, name, s, &a)
	}
	l.mu.Unlock()
	if pauseEnded {
		signal(l.changed)
	}
	return a.calls, a.next
}

// planFleet beats every HeartbeatInterval, reads the fleet row every PollInterval between
// beats (a beat reads it too), writes the task's record every PollInterval, and writes a
// pause asked here.
func (r *caller) planFleet(now time.Time, a *agenda) {
	l := r.l
	if !now.Before(r.nextBeat) {
		r.nextBeat = now.Add(HeartbeatInterval)
		a.add(r.beat)
	} else if !now.Before(r.nextPoll) {
		r.nextPoll = now.Add(PollInterval)
		a.add(r.poll)
	}
	// The record follows the read, so that it says which control the task applies.
	if !now.Before(r.nextRecord) {
		r.nextRecord = now.Add(PollInterval)
		a.add(r.record)
	}
	a.at(r.nextBeat)
	a.at(r.nextPoll)
	a.at(r.nextRecord)
	if !l.pauseAsked.IsZero() {
		if !now.Before(r.nextPause) {
			r.nextPause = now.Add(minGap)
			a.add(r.writePause(l.pauseAsked))
		}
		a.at(r.nextPause)
	}
}

// planPause looks again when the pause in force ends, and reports whether one just ended:
// then refused starts may try again.
func (r *caller) planPause(now time.Time, a *agenda) (ended bool) {
	l := r.l
	if !r.pauseEnds.IsZero() && !now.Before(r.pauseEnds) {
		ended, r.pauseEnds = true, time.Time{}
	}
	if now.Before(l.pauseUntil) {
		r.pauseEnds = l.pauseUntil
		a.at(l.pauseUntil)
	}
	return ended
}

// planTokens fetches tokens of rate limit name for refused starts, or ahead of need, and
// forgets a key's state once it idled for idleFor.
func (r *caller) planTokens(now time.Time, name string, t *tokens, a *agenda) {
	l := r.l
	t.prune(now)
	held := t.held(now)
	rate := t.meter.rate(now)
	// With long chunks, the next is fetched when half of the last is left.
	wanted := t.demand > 0 || (t.validity >= prefetchFrom && rate > 0 && float64(held) < rate*t.validity.Seconds()/2)
	switch {
	case wanted && now.Before(t.nextTry):
		a.at(t.nextTry)
	case wanted:
		t.nextTry = now.Add(minGap)
		a.add(r.fetch(t, t.demand, held, rate, now.Before(t.bindingUntil), slices.Clone(t.settle)))
	case held == 0 && t.fallback.Used(now) == 0 && now.Sub(t.lastUsed) > idleFor && name != ledgerRate:
		r.forget(name)
		delete(l.tokens, name)
	}
	for _, c := range t.chunks {
		if c.left > 0 {
			a.at(c.until)
		}
	}
}

// planSlots writes the task's hold of concurrency limit name when it must change: more for a
// refused start, fewer when slots idled, the runs of a fallback told, a failed write made
// again, the lease renewed. It forgets a key's state once it idled for idleFor.
func (r *caller) planSlots(now time.Time, name string, s *slots, a *agenda) {
	l := r.l
	renewAt := s.leaseUntil.Add(-2 * l.cfg.Lease / 3)
	if s.demand > 0 && (s.free(now) >= s.demand || now.Sub(s.demandAt) >= demandFor) {
		// Slots came back since the refusal (the retry will find them), or the start
		// that asked went away: either way the task needs no more.
		s.demand = 0
	}
	switch {
	case now.Before(s.nextTry) && (s.demand > 0 || s.held > 0 || s.unsure):
		a.at(s.nextTry)
	case s.demand > 0:
		s.nextTry = now.Add(minGap)
		a.add(r.lease(s, s.demand-s.free(now)))
	case s.held > s.inUse && !now.Before(s.wantedAt.Add(linger)):
		// Idle slots leave the pool now, so no start takes one while they go back.
		s.held, s.armed = s.inUse, false
		s.nextTry = now.Add(minGap)
		a.add(r.lease(s, 0))
	case s.inUse > s.held && !l.fallback && !now.Before(s.nextTry), s.unsure:
		// Runs started in a fallback: the table is told of them. Or the last write
		// failed: it is made again, so that a give-back is not lost until the lease
		// lapses.
		s.nextTry = now.Add(minGap)
		a.add(r.lease(s, 0))
	case s.held > 0 && !now.Before(renewAt):
		s.nextTry = now.Add(minGap)
		a.add(r.lease(s, 0))
	case s.held > 0:
		a.at(renewAt)
		if s.armed = s.held > s.inUse; s.armed {
			a.at(s.wantedAt.Add(linger))
		}
	case s.inUse == 0 && !s.unsure && now.Sub(s.lastUsed) > idleFor && name != ledgerConcurrency:
		r.forget(name)
		delete(l.slots, name)
	}
}

// forget drops Run's copy of ledger name, whose state the task no longer keeps.
func (r *caller) forget(name string) {
	delete(r.cache, name)
	delete(r.contended, name)
}

// update reads ledger name (or takes the cached copy), lets change decide the next version,
// and writes it on condition that no one wrote in between, reading again after a conflict.
// A cached copy that change leaves alone is read again once: it may be stale.
// It reports whether it wrote: not when change wrote nothing, nor after writers came first
// maxTries times in a row.
func (r *caller) update(ctx context.Context, name string, change func(now time.Time, led Ledger) (Ledger, bool)) (bool, error) {
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

// done takes in how a call went: a task whose calls have all failed for FallbackAfter falls
// back to its share of each limit, and comes back with the first call that succeeds.
func (r *caller) done(err error) {
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
	control := l.fleet.control
	l.mu.Unlock()
	if fallback && now.Sub(r.lastLogged) >= FallbackLogInterval {
		r.lastLogged = now
		l.log.Warn("limits: DynamoDB fails; this task holds to its share of each limit, and keeps the fleet's control it last read",
			"table", l.cfg.Table, "live_tasks", live, "since", since, "control_version", control.Version,
			"paused_queues", l.cfg.Member.pausedQueues(control, now), "error", err)
	}
	if fallback && !wasFallback {
		signal(l.changed)
	}
}

// retryDelay is the wait before calling again after a failure: 100 ms, doubling up to
// PollInterval.
func (r *caller) retryDelay() time.Duration {
	return min(retryMin<<min(r.failures, 10), PollInterval)
}

// stop gives back every slot and forgets the task in the table.
func (r *caller) stop(ctx context.Context) {
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
