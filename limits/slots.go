package limits

import (
	"context"
	"time"
)

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

// lease writes this task's hold of slots in the table: the slots it holds, plus more (up to
// the refused demand) when there are free ones, leased for another Lease. It renews, takes
// and gives back in one write; slots that idled were taken out of held already.
func (r *caller) lease(s *slots, more int) call {
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
