package supervisor

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/backoff"
	"github.com/watchbot/watchbot/dedupe"
)

// DedupeAPI keeps the records of duplicate suppression: *dedupe.Store.
type DedupeAPI interface {
	Check(ctx context.Context) (dedupe.TTLStatus, error)
	Claim(ctx context.Context, key, owner, messageID string, leaseUntil time.Time) (dedupe.Claim, error)
	Extend(ctx context.Context, key, owner string, leaseUntil time.Time) (dedupe.Relayed, error)
	Complete(ctx context.Context, key, owner string, expiresAt time.Time) (dedupe.Relayed, error)
	Relay(ctx context.Context, key, owner, messageID, receipt string, receivedAt time.Time) (int, error)
	Release(ctx context.Context, key, owner string, counted bool, expiresAt time.Time) error
	Forget(ctx context.Context, key, owner string) error
}

var _ DedupeAPI = (*dedupe.Store)(nil)

// dedupeCallTimeout bounds each call to the table; a call that takes longer fails, and its
// message is retried rather than run unchecked.
const dedupeCallTimeout = 10 * time.Second

// dedupeWait spaces the claims of a message whose key another run holds, by its attempt (on
// a FIFO queue, its attempt plus its waits in place): 1s, 2s, 4s … 30s, equal jitter
// (0.5–1s, 1–2s, 2–4s …), raised to minDedupeWait and cut to when the holder's lease lapses.
var dedupeWait = backoff.Exponential{Base: time.Second, Max: 30 * time.Second, Jitter: backoff.Equal}

// minDedupeWait is the shortest wait of a message whose key is held: SQS's visibility is in
// whole seconds, and no claim follows another at once.
const minDedupeWait = time.Second

// dedupeErrorLog is the least interval between two error lines of the table's failures.
const dedupeErrorLog = 30 * time.Second

// defaultRetention is SQS's MessageRetentionPeriod when a queue does not say (4 days).
const defaultRetention = 4 * 24 * time.Hour

// deduper is the supervisor's side of duplicate suppression. A run claims the key of each of
// its messages before the worker starts (claim), and only the messages claimed run, each at
// the attempt its claim counted (the key's runs, not the message's receives); what becomes of
// the others is claimDecision's table, then outcomeFor's, as for any message. On a FIFO queue
// a group's messages are claimed in order, and the messages behind one that is not claimed
// wait with it. The heartbeat extends the claims of running messages with their leases
// (extend). When the worker has ended, before any message is settled, each claim is settled
// by settlementFor's table (finish). A nil *deduper is off: its methods do nothing.
type deduper struct {
	api    DedupeAPI
	source dedupe.KeySource
	// ttl is how long a completed key is remembered; retention how long a released one keeps
	// its count of runs: as long as its message may come back.
	ttl, retention time.Duration
	// lease is how long a claim or an extension leases a key: --visibility-timeout, the
	// longest lease its message can have then, plus margin (a heartbeat interval,
	// --kill-grace and lapseMargin). So one failed extension does not let it lapse, and a job
	// stopped for a lost lease is gone before another run can claim its key. An extension
	// that fails with less than margin left stops the job, which is then gone in time.
	lease, margin time.Duration
	fifo          bool
	// receiveLease is the lease a receive takes, which a relayed receipt is known to have
	// before its owner renews it.
	receiveLease time.Duration
	// instance names this supervisor in every owner it writes; seq numbers its claims.
	instance string
	seq      atomic.Uint64

	metrics alarms.Recorder
	log     *slog.Logger
	random  func() float64
	// cut ends the table's calls at a stop's last moment: a claim cut short is a claim that
	// failed, a completion or release cut short one that did not go out.
	cut *cutoff

	// mu guards claims, those of the messages of the runs under way, and the error log's
	// state (lastError, quiet). It is held only to read or write them: never across a call to
	// the table, a log line or a metric.
	mu        sync.Mutex
	claims    map[*job]*keyClaim
	lastError time.Time
	quiet     int // failures not logged since lastError
}

// keyClaim is a key claimed for a message of a run under way.
type keyClaim struct {
	key, owner string
	until      time.Time // when the claim's lease lapses, as last written
	// unsure: the claim failed, but the call may have written the record before it did (a
	// timeout, a lost answer); the run removes it, as a failed run removes its claim, so the
	// message's retry does not find its own key held.
	unsure bool
}

// newDeduper returns the deduper of cfg on api for the queue the startup checks described
// (info: FIFO or not, how long a completed key is remembered), its calls cut at a stop's
// last moment, or nil when duplicate suppression is off.
func newDeduper(cfg Config, api DedupeAPI, info queueInfo, metrics alarms.Recorder, log *slog.Logger, random func() float64, cut *cutoff) *deduper {
	if api == nil {
		return nil
	}
	source, _ := dedupe.ParseKeySource(cfg.Dedupe.Key) // checked by Validate
	host, _ := os.Hostname()
	return &deduper{api: api, source: source, fifo: info.fifo, ttl: info.dedupeTTL, retention: info.retention,
		lease:  cfg.VisibilityTimeout + cfg.heartbeat() + cfg.KillGrace + lapseMargin,
		margin: cfg.heartbeat() + cfg.KillGrace + lapseMargin, receiveLease: cfg.receiveVisibility(),
		instance: host + ":" + strconv.Itoa(os.Getpid()) + ":" + rand.Text()[:8],
		metrics:  metrics, log: log.With("component", "dedupe"), random: random, cut: cut, claims: map[*job]*keyClaim{}}
}

// claim claims the keys of a run's live messages (results[liveAt[k]] is live[k]'s) before
// its worker starts, and returns those claimed, which alone run. Each other message's result
// is endUnclaimed with claimDecision's outcome, or, when the run was stopped during its
// claim, the end of that stop. On a FIFO queue a group's messages are claimed in order, and
// once one is not claimed and does not leave its group, the group's later messages are held
// behind it unchecked.
func (d *deduper) claim(ctx context.Context, live []*job, liveAt []int, results []result) ([]*job, []int) {
	if d == nil || len(live) == 0 {
		return live, liveAt
	}
	var parts [][]int // indices into live, claimed in order within a part, parts side by side
	at := map[string]int{}
	for k, j := range live {
		g, ok := at[j.msg.GroupID]
		if !d.fifo || !ok {
			g = len(parts)
			at[j.msg.GroupID] = g
			parts = append(parts, nil)
		}
		parts[g] = append(parts[g], k)
	}
	claimed := make([]bool, len(live))
	inParallel(len(parts), func(p int) {
		part := parts[p]
		for n, k := range part {
			claimed[k] = d.check1(ctx, live[k], &results[liveAt[k]])
			if res := results[liveAt[k]]; claimed[k] || res.End == endUnclaimed && res.Unclaimed.Action.leavesGroup() {
				continue
			}
			for _, rest := range part[n+1:] {
				results[liveAt[rest]].End = endUnclaimed
				results[liveAt[rest]].Unclaimed = outcome{Action: actHold, Reason: "held behind an earlier message of its group whose dedupe key could not be claimed"}
			}
			return
		}
	})
	var runLive []*job
	var runAt []int
	for k, j := range live {
		if claimed[k] {
			runLive, runAt = append(runLive, j), append(runAt, liveAt[k])
		}
	}
	return runLive, runAt
}

// check1 claims one message's key and reports whether it was claimed: then the message's
// attempt is the run its claim counted. When it was not, it sets res's end and, with
// endUnclaimed, claimDecision's outcome.
func (d *deduper) check1(ctx context.Context, j *job, res *result) bool {
	key, ok := d.keyOf(j.msg)
	if !ok {
		_, res.Unclaimed = claimDecision(claimFound{keyless: true}, d.source, d.random)
		res.End = endUnclaimed
		j.log.Warn("message lacks its dedupe key: dead-lettering it without running it", "dedupe_key", d.source.String())
		return false
	}
	owner := d.instance + "/" + j.msg.ID + "/" + strconv.FormatUint(d.seq.Add(1), 10)
	until := time.Now().Add(d.lease)
	callCtx, cancel := d.cut.bound(ctx, dedupeCallTimeout)
	c, err := d.api.Claim(callCtx, key, owner, j.msg.ID, until)
	cancel()
	now := time.Now()
	relayed := err == nil && c.Result == dedupe.Held && c.MessageID == j.msg.ID && d.relay(ctx, j, key, c)
	if err != nil {
		d.keep(j, &keyClaim{key: key, owner: owner, until: until, unsure: true})
		if ctx.Err() != nil {
			res.End = endFor(context.Cause(ctx))
			return false
		}
	}
	claimed, o := claimDecision(claimFound{claim: c, err: err, relayed: relayed, tries: j.attempt + j.dedupeWaits, now: now}, d.source, d.random)
	switch {
	case relayed:
	case claimed:
		j.dedupeWaits = 0
		j.attempt, res.Attempt = c.Run, c.Run
		d.keep(j, &keyClaim{key: key, owner: owner, until: until})
		return true
	case err != nil:
		d.failed(j.log, "could not claim the message's dedupe key: the message is not run unchecked, but retried after its backoff (in place on a FIFO queue)", err)
	case c.Result == dedupe.Held:
		j.log.Debug("another run holds the message's dedupe key: the message is retried after a short delay (in place on a FIFO queue)",
			"dedupe_key", key, "held_by", c.Owner, "lease_lapses_in", c.LeaseUntil.Sub(now).Round(time.Second).String(), "retry_in", o.Delay.String())
	}
	res.End, res.Unclaimed = endUnclaimed, o
	return false
}

// claimFound is what the duplicate check found for one message.
type claimFound struct {
	keyless bool         // the message lacks its key attribute
	claim   dedupe.Claim // the claim's answer, when err is nil
	err     error        // the claim failed
	// relayed: the key is held by a live run of this very message, which the delivery was
	// handed to (Relay).
	relayed bool
	// tries spaces the claims of a held key: the message's attempt, plus its waits in place
	// on a FIFO queue.
	tries int
	now   time.Time
}

// claimDecision is the duplicate check's table, which the table of docs/dedupe.md, "What
// becomes of a message", mirrors: what becomes of a message given what its claim found. A
// retry is then decided by outcomeFor as any retry, but is never an attempt: the redrive
// policy's maxReceiveCount alone bounds how often it comes back, and on a FIFO queue the
// retry is its FIFO form, a wait in place.
//
//	found                       outcome                                 on a FIFO queue
//	no key (attr:NAME missing)  dead-lettered without running           the same
//	completed by a run          deleted without running (a Duplicate)   the same
//	held by a run of the same   relayed: hidden until the holder's      the same: the group stays
//	message, handed the new     lease lapses, unrun; a live owner       held while it is hidden;
//	receipt (relayed)           takes the receipt, renews and deletes   its later messages go back
//	                            with it; not an attempt
//	held by another run         retry: released, visible again after    waits in place, leased,
//	                            dedupeWait(tries), at least 1 s, at     as long; not an attempt
//	                            most until the holder's lease lapses
//	the table failed            retry: released after its --backoff     waits in place as long;
//	                            delay (DelayFromBackoff)                not an attempt
//	claimed                     it runs (claimed is true)
func claimDecision(f claimFound, source dedupe.KeySource, random func() float64) (claimed bool, o outcome) {
	switch {
	case f.keyless:
		return false, outcome{Action: actDeadLetter, DeadLetter: true,
			Reason: fmt.Sprintf("no dedupe key: message attribute %s is missing (--dedupe-key %s)", source.Attribute, source)}
	case f.err != nil:
		return false, outcome{Action: actRetry, DelayFromBackoff: true, Reason: "duplicate check failed: " + f.err.Error()}
	case f.relayed:
		// Hidden no longer than the holder's lease: a live owner takes the receipt at its next
		// extension, well before then, and renews it; a dead one (a crashed watchbot, whose
		// message came back at its visibility timeout) lets the message come back and run.
		wait := max(f.claim.LeaseUntil.Sub(f.now), minDedupeWait)
		return false, outcome{Action: actRelay, Delay: wait, Reason: "relayed to " + f.claim.Owner + ", which runs its job"}
	case f.claim.Result == dedupe.Completed:
		return false, outcome{Action: actDelete, Duplicate: true, Reason: "duplicate: its dedupe key was completed by " + f.claim.Owner}
	case f.claim.Result == dedupe.Held:
		wait := max(min(dedupeWait.Delay(f.tries, random), f.claim.LeaseUntil.Sub(f.now)), minDedupeWait)
		return false, outcome{Action: actRetry, Delay: wait, Reason: "its dedupe key is held by " + f.claim.Owner}
	}
	return true, outcome{}
}

// keyOf returns the message's key: its id, or the value of the key attribute.
func (d *deduper) keyOf(m message) (string, bool) {
	if d.source.Attribute == "" {
		return m.ID, true
	}
	v, ok := m.Attributes[d.source.Attribute]
	return v, ok && v != ""
}

// keep records the claim of a message of a run under way.
func (d *deduper) keep(j *job, c *keyClaim) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.claims[j] = c
}

// extend is the heartbeat's: it extends the claims of the messages whose leases it has just
// renewed, or that wait at SQS's in-flight limit for a relay. It returns the jobs to stop,
// whose claim passed to another run or will lapse before the next heartbeat could extend it,
// and the jobs that took a relay's receipt, to renew at once. It takes no job's lock, which
// a renewal or a settle may hold while it waits for SQS.
func (d *deduper) extend(js []*job) (lost, relayed []*job) {
	if d == nil || len(js) == 0 {
		return nil, nil
	}
	type ext struct {
		j *job
		c *keyClaim
	}
	var exts []ext
	d.mu.Lock()
	for _, j := range js {
		if c := d.claims[j]; c != nil && !c.unsure {
			exts = append(exts, ext{j: j, c: c})
		}
	}
	d.mu.Unlock()
	until := time.Now().Add(d.lease)
	errs, took := make([]error, len(exts)), make([]bool, len(exts))
	inParallel(len(exts), func(i int) {
		ctx, cancel := d.cut.bound(context.Background(), dedupeCallTimeout)
		defer cancel()
		var r dedupe.Relayed
		r, errs[i] = d.api.Extend(ctx, exts[i].c.key, exts[i].c.owner, until)
		took[i] = errs[i] == nil && d.takeRelay(exts[i].j, r)
	})
	for i, e := range exts {
		if took[i] {
			relayed = append(relayed, e.j)
		}
	}
	// Answers apply under the lock, to the claims still the runs'; failures are told after it.
	type failure struct {
		ext
		err      error
		lapsesIn time.Duration
	}
	var failures []failure
	now := time.Now()
	d.mu.Lock()
	for i, e := range exts {
		switch {
		case d.claims[e.j] != e.c:
			// its run finished meanwhile
		case errs[i] == nil:
			if until.After(e.c.until) { // extensions of two heartbeats may end out of order
				e.c.until = until
			}
		default:
			failures = append(failures, failure{ext: e, err: errs[i], lapsesIn: e.c.until.Sub(now)})
		}
	}
	d.mu.Unlock()
	for _, f := range failures {
		switch {
		case errors.Is(f.err, dedupe.ErrLost):
			f.j.log.Error("stopping job: its claim of the dedupe key passed to another run", "dedupe_key", f.c.key, "error", f.err)
			lost = append(lost, f.j)
		case f.lapsesIn < d.margin:
			f.j.log.Error("stopping job: its claim of the dedupe key could not be extended and lapses before the next heartbeat; the message will be delivered again",
				"dedupe_key", f.c.key, "error", f.err, "claim_lapses_in", f.lapsesIn.Round(time.Millisecond).String())
			d.metrics.Add(alarms.DedupeErrors, 1)
			lost = append(lost, f.j)
		default:
			d.failed(f.j.log, "could not extend the claim of the dedupe key; trying again at the next heartbeat", f.err,
				"dedupe_key", f.c.key, "claim_lapses_in", f.lapsesIn.Round(time.Second).String())
		}
	}
	return lost, relayed
}

// dedupeParallel is how many calls to the table one run, or one heartbeat, makes at once.
const dedupeParallel = 16

// inParallel calls f(0) … f(n-1), at most dedupeParallel at once, and returns once every
// call has returned. One call, the usual case of a run of one message, runs in place.
func inParallel(n int, f func(i int)) {
	if n == 1 {
		f(0)
		return
	}
	var wg sync.WaitGroup
	limit := make(chan struct{}, dedupeParallel)
	for i := range n {
		wg.Go(func() {
			limit <- struct{}{}
			defer func() { <-limit }()
			f(i)
		})
	}
	wg.Wait()
}

// failed counts a failed call to the table and logs it, at error level at most once per
// dedupeErrorLog (with how many were not logged since), else at debug level.
func (d *deduper) failed(log *slog.Logger, msg string, err error, attrs ...any) {
	d.metrics.Add(alarms.DedupeErrors, 1)
	attrs = append(attrs, "error", err)
	if quiet, due := d.errorLogDue(time.Now()); due {
		log.Error(msg, append(attrs, "failures_not_logged", quiet)...)
		return
	}
	log.Debug(msg, attrs...)
}

// errorLogDue reports whether a failure at now is logged at error level, and how many were
// not since the last that was; it holds the lock for that alone.
func (d *deduper) errorLogDue(now time.Time) (quiet int, due bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if now.Sub(d.lastError) >= dedupeErrorLog {
		quiet, d.lastError, d.quiet = d.quiet, now, 0
		return quiet, true
	}
	d.quiet++
	return 0, false
}
