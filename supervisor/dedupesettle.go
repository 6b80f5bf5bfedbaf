package supervisor

// The end of a run's claims: what becomes of each (settlementFor's table), and the writes
// that make it so.

import (
	"context"
	"errors"
	"time"

	"github.com/watchbot/watchbot/dedupe"
)

// finish settles the claims of a run whose outcomes are decided (results[i] and outs[i] are
// jobs[i]'s), before any message is settled, as settlementFor decides, once each job waiting
// for a relay has the newest receipt (takeNewest): a success completes
// its key, remembered for the TTL, so a message whose delete fails is not run again; a retry
// releases it, so the retry can claim it, and counts the run only when it was an attempt. A
// claim whose message is to leave the queue unfinished stays until that message's SQS
// action is over (finishLeft): a dead-letter copy that could not be written must not cost
// the key its count of runs.
func (d *deduper) finish(ctx context.Context, jobs []*job, results []result, outs []outcome) {
	if d == nil {
		return
	}
	d.takeNewest(ctx, jobs)
	d.settleTaken(ctx, jobs, func(i int, c *keyClaim) (settlement, bool) {
		how := settlementFor(results[i], outs[i])
		if c.unsure {
			return settleUncount, true
		}
		return how, how != settleForget
	})
}

// takeNewest gives each job that holds a claim and whose delivery waits for a relay the
// newest relay's receipt, read with an extension of its claim, before its message is
// settled: a delete with an older receipt succeeds without deleting the message, and a
// visibility change with one fails. A job whose lease holds has had no relay: its message
// was hidden.
func (d *deduper) takeNewest(ctx context.Context, jobs []*job) {
	var js []*job
	var cs []*keyClaim
	d.mu.Lock()
	for _, j := range jobs {
		if c := d.claims[j]; c != nil {
			js, cs = append(js, j), append(cs, c)
		}
	}
	d.mu.Unlock()
	ctx = context.WithoutCancel(ctx)
	inParallel(len(js), func(i int) {
		if !js[i].waitsRelay() {
			return
		}
		callCtx, cancel := d.cut.bound(ctx, dedupeCallTimeout)
		defer cancel()
		// A failure leaves the job the receipt it holds, as when no relay came.
		if r, err := d.api.Extend(callCtx, cs[i].key, cs[i].owner, time.Now().Add(d.lease)); err == nil {
			d.takeRelay(js[i], r)
		}
	})
}

// finishLeft settles the claims finish left to the end of their messages' SQS actions
// (disps[i] is how jobs[i] left its run): a message that left the queue forgets its key's
// runs, so a replay from the dead-letter queue gets every attempt again; one that did not (a
// dead-letter copy or a delete that failed) releases it with its runs counted, so its next
// delivery goes on counting rather than starting again from run 1. A message kept in place
// with its action pending keeps its claim until that action is applied.
func (d *deduper) finishLeft(ctx context.Context, jobs []*job, results []result, disps []disposition) {
	if d == nil {
		return
	}
	d.settleTaken(ctx, jobs, func(i int, _ *keyClaim) (settlement, bool) {
		switch {
		case disps[i].keep:
			return 0, false
		case disps[i].left:
			return settleForget, true
		case ran(results[i]):
			return settleRelease, true
		}
		return settleUncount, true
	})
}

// settleTaken takes from the runs under way the claims of jobs that how settles now (how(i,
// c) says how jobs[i]'s claim c is settled, false to leave it), and settles them side by
// side, with a context no stop cancels (the cutoff bounds each call).
func (d *deduper) settleTaken(ctx context.Context, jobs []*job, how func(i int, c *keyClaim) (settlement, bool)) {
	var held []int
	cs, hows := make([]*keyClaim, len(jobs)), make([]settlement, len(jobs))
	d.mu.Lock()
	for i, j := range jobs {
		c := d.claims[j]
		if c == nil {
			continue
		}
		if h, now := how(i, c); now {
			cs[i], hows[i] = c, h
			held = append(held, i)
			delete(d.claims, j)
		}
	}
	d.mu.Unlock()
	ctx = context.WithoutCancel(ctx)
	inParallel(len(held), func(n int) {
		i := held[n]
		d.settle(ctx, jobs[i], cs[i], hows[i])
	})
}

// settlement is what becomes of a message's claim when its run is over.
type settlement int

const (
	settleComplete settlement = iota // completed: later messages with the key are duplicates
	settleRelease                    // released, its run counted: the next claim is the next attempt
	settleUncount                    // released, its run taken back: the next claim is this attempt again
	settleForget                     // removed: a replay of the message starts again from run 1
)

// settlementFor is the table of what becomes of a claim, given its run's result and
// outcome. A run counts as an attempt when the worker ran and its outcome counts one (not a
// probe, a pause, or a message held behind another that the worker acked); a run that
// started no worker, or that watchbot stopped (a stop, a lost lease, the in-flight limit),
// gives its run back, as does a claim that failed (finish).
//
//	outcome                                         claim
//	success (exit 0, ack)                           completed
//	leaves the queue otherwise (dead letter,        forgotten, once it has left (finishLeft);
//	  delete)                                         released, its runs kept, if it did not
//	a retry after a run that counts                 released, the run counted
//	anything else                                   released, the run taken back
func settlementFor(res result, o outcome) settlement {
	switch {
	case o.Success:
		return settleComplete
	case o.Action.leavesGroup():
		return settleForget
	case o.Probe, o.Paused, o.Unrun, o.Action == actHold && !o.Attempted:
		return settleUncount
	}
	if ran(res) {
		return settleRelease
	}
	return settleUncount
}

// ran reports a run whose end counts as an attempt: the worker ran, or could not start,
// and was not stopped by watchbot.
func ran(res result) bool {
	switch res.End {
	case endExited, endSignaled, endTimedOut, endSpawnError, endHTTPStatus, endFunctionFailed:
		return true
	}
	return false
}

// settle completes, releases or forgets one claim.
func (d *deduper) settle(ctx context.Context, j *job, c *keyClaim, how settlement) {
	ctx, cancel := d.cut.bound(ctx, dedupeCallTimeout)
	defer cancel()
	var err error
	switch how {
	case settleComplete:
		var r dedupe.Relayed
		r, err = d.api.Complete(ctx, c.key, c.owner, time.Now().Add(d.ttl))
		d.takeRelay(j, r) // the message is deleted with the newest receipt
		switch {
		case errors.Is(err, dedupe.ErrLost):
			j.log.Error("the worker succeeded, but its claim of the dedupe key had passed to another run (its lease lapsed): that run may do the work again",
				"dedupe_key", c.key, "error", err)
		case err != nil:
			d.failed(j.log, "the worker succeeded, but its dedupe key could not be marked completed: a duplicate received before its lease lapses is retried, one received after runs", err,
				"dedupe_key", c.key)
		}
		return
	case settleForget:
		err = d.api.Forget(ctx, c.key, c.owner)
	default:
		err = d.api.Release(ctx, c.key, c.owner, how == settleRelease, time.Now().Add(d.retention))
	}
	switch {
	case err == nil:
	case c.unsure:
		// The claim's own failure was counted and logged.
		j.log.Debug("could not release the record the failed claim may have written", "dedupe_key", c.key, "error", err)
	case errors.Is(err, dedupe.ErrLost):
		j.log.Debug("dedupe key not released: it is no longer this run's", "dedupe_key", c.key)
	default:
		d.failed(j.log, "could not release the dedupe key: the message's retry finds it held until the claim's lease lapses", err,
			"dedupe_key", c.key, "lease_lapses_in", time.Until(c.until).Round(time.Second).String())
	}
}
