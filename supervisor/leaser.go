package supervisor

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/smithy-go"

	"github.com/watchbot/watchbot/internal/sqsspec"
)

// job is one message held by the supervisor, from its receive until it is settled: where it
// stands in scheduling, its lease, and how to stop the worker it is part of.
type job struct {
	msg message
	log *slog.Logger // with the message id

	// Scheduling state, written by the supervisor's loop goroutine between runs and read by
	// the run it starts. attempt is the receive count plus the runs watchbot gave the message
	// in place (FIFO); pending is an outcome to apply without running the worker again (a
	// delete or dead-letter send that failed, retried in place); settleFailures counts those
	// failures, for their backoff.
	grp            *group
	attempt        int
	pending        *outcome
	settleFailures int
	// dedupeWaits counts the waits in place of a FIFO message whose dedupe key could not be
	// claimed (dedupe.go), which space its claims as attempts would; written by its runs.
	dedupeWaits int

	// stopMu guards cause and cancel. cause is the first reason the heartbeat gave to stop
	// (errCeiling, errLeaseLost); cancel stops the worker running this message while one
	// does. In batch mode a lost lease does not stop the shared worker: the message alone is
	// abandoned when the batch settles.
	stopMu sync.Mutex
	cause  error
	cancel context.CancelCauseFunc
	shared bool // the worker runs other messages too

	// mu is held by the heartbeat while a renewal for this job is under way, and by the job
	// when it settles the message, so a renewal can never land after the outcome's own
	// visibility change.
	mu      sync.Mutex
	settled bool
	pgid    int // the running worker's process group, 0 when none runs
	// receipt and receivedAt are the current delivery's: a new delivery of the same message
	// replaces them (takeOver).
	receipt    string
	receivedAt time.Time
	// leaseUntil is when the message's visibility ends as far as watchbot knows: after the
	// receive, or after the last successful renewal.
	leaseUntil time.Time
	// renewAt is when the heartbeat renews the lease next, in Unix nanoseconds: read without
	// mu, so the heartbeat never waits for a settle to learn what is due.
	renewAt atomic.Int64
}

// renewal returns when the job's lease is renewed next.
func (j *job) renewal() time.Time { return time.Unix(0, j.renewAt.Load()) }

// renewBy sets when the job's lease is renewed next.
func (j *job) renewBy(t time.Time) { j.renewAt.Store(t.UnixNano()) }

// newJob registers nothing; it builds the job for a message received at receivedAt, leased
// as l.received says.
func (l *leaser) newJob(m message, receivedAt time.Time, log *slog.Logger) *job {
	lease, renew := l.received()
	j := &job{msg: m, attempt: m.Attempt, receipt: m.ReceiptHandle, receivedAt: receivedAt,
		leaseUntil: receivedAt.Add(lease), log: log.With("message_id", m.ID)}
	j.renewBy(receivedAt.Add(renew))
	return j
}

// stop records why the job must stop and stops its worker, if one runs it alone (or, in a
// batch, for any reason other than a lost lease). It reports whether a worker was told to
// stop; otherwise the message is held in no run, or shares a batch that goes on.
func (j *job) stop(cause error) bool {
	j.stopMu.Lock()
	defer j.stopMu.Unlock()
	if j.cause == nil {
		j.cause = cause
	}
	if j.cancel != nil && !(j.shared && errors.Is(cause, errLeaseLost)) {
		j.cancel(cause)
		return true
	}
	return false
}

// handle returns the job's current receipt handle.
func (j *job) handle() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.receipt
}

// stopped returns the reason the heartbeat gave to stop, or nil.
func (j *job) stopped() error {
	j.stopMu.Lock()
	defer j.stopMu.Unlock()
	return j.cause
}

// attach makes cancel the way to stop the job's worker. It reports false, and cancels at
// once, when the job was stopped before its worker started.
func (j *job) attach(cancel context.CancelCauseFunc, shared bool) bool {
	j.stopMu.Lock()
	defer j.stopMu.Unlock()
	j.cancel, j.shared = cancel, shared
	if j.cause != nil && !(shared && errors.Is(j.cause, errLeaseLost)) {
		cancel(j.cause)
		return false
	}
	return true
}

// detach forgets the worker of a run that has ended: a job kept for another run is stopped
// through the loop, not through a worker that is gone.
func (j *job) detach() {
	j.stopMu.Lock()
	j.cancel, j.shared = nil, false
	j.stopMu.Unlock()
	j.mu.Lock()
	j.pgid = 0
	j.mu.Unlock()
}

// takeOver gives a held message's job the receipt handle of a new delivery of the same
// message. SQS delivers a message again when its lease lapsed (the heartbeat could not reach
// SQS for longer than the visibility timeout); the old handle no longer works, and running
// the message a second time beside the first would be a concurrent duplicate. The job carries
// on with the new handle and lease. It reports false when the job has already settled the
// message (a retry made it visible again): that delivery is a new attempt.
func (j *job) takeOver(m message, receivedAt time.Time, lease, renew time.Duration) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.settled {
		return false
	}
	j.receipt = m.ReceiptHandle
	j.receivedAt = receivedAt
	j.leaseUntil = receivedAt.Add(lease)
	j.renewBy(receivedAt.Add(renew))
	j.log.Warn("message delivered again while watchbot holds it (its lease had lapsed): the job continues under the new receipt",
		"receive_count", m.Attempt)
	return true
}

// leaser keeps every message watchbot holds leased, from its receive until it is settled:
// running, waiting for a slot or a batch, or waiting out an in-place retry. A receive leases
// a message for --receive-visibility only; the heartbeat extends it to --visibility-timeout
// once it has been held a third of that (most short jobs are over by then and cost no
// renewal), then renews it every --heartbeat-interval. Renewals go out in batches: a
// heartbeat renews every message due within half the first wait. The leaser stops a job whose
// lease cannot be kept (SQS's 12 h in-flight ceiling is near, the lease is lost, or renewals
// keep failing until the lease is about to lapse), and reports a held job in no run to
// release, for the loop to hand it back.
//
// Lock order: l.mu guards the registry only and is never held while a job's lock is taken. A
// job's mu (held by a renewal under way, or by the settle of its message) may be held while
// its stopMu is taken, never the reverse.
type leaser struct {
	visibility, receiveLease, interval, killGrace time.Duration
	acks                                          *acker
	log                                           *slog.Logger
	// release is called from the heartbeat for a job that must stop but runs in no worker
	// of its own; the loop hands it back if it is still held.
	release func(*job)
	// health, when set, is told of each heartbeat.
	health *Health
	// dedupe, when set, extends the dedupe claims of the messages whose leases it renews.
	dedupe *deduper

	// added wakes the heartbeat when a job is added, so it can renew it in time.
	added chan struct{}

	mu   sync.Mutex
	jobs map[string]*job
}

func newLeaser(cfg Config, acks *acker, log *slog.Logger, release func(*job)) *leaser {
	return &leaser{visibility: cfg.VisibilityTimeout, receiveLease: cfg.receiveVisibility(), interval: cfg.heartbeat(),
		killGrace: cfg.KillGrace, acks: acks, log: log, release: release, jobs: map[string]*job{}, added: make(chan struct{}, 1)}
}

// received returns the lease a receive takes, and how long after it the first renewal is
// due: a third of it (or the heartbeat interval, when that is sooner).
func (l *leaser) received() (lease, renew time.Duration) {
	return l.receiveLease, min(l.interval, l.receiveLease/3)
}

// add starts keeping j leased.
func (l *leaser) add(j *job) {
	l.mu.Lock()
	l.jobs[j.msg.ID] = j
	l.mu.Unlock()
	select {
	case l.added <- struct{}{}:
	default:
	}
}

// remove stops keeping j leased; a newer job for the same message stays.
func (l *leaser) remove(j *job) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.jobs[j.msg.ID] == j {
		delete(l.jobs, j.msg.ID)
	}
}

// get returns the job holding message id, or nil.
func (l *leaser) get(id string) *job {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.jobs[id]
}

// list returns the jobs held now.
func (l *leaser) list() []*job {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]*job, 0, len(l.jobs))
	for _, j := range l.jobs {
		out = append(out, j)
	}
	return out
}

// ceilingMargin is how long before SQS's 12 h in-flight limit a job is stopped, leaving room
// to stop the worker and release the message.
func (l *leaser) ceilingMargin() time.Duration {
	return l.interval + l.killGrace + time.Minute
}

// renewRetry is how soon a failed renewal is tried again, well before the lease lapses.
const renewRetry = 5 * time.Second

// lapseMargin is how long before its lease lapses a job whose renewals keep failing is
// stopped, on top of --kill-grace: the worker must be gone before SQS can hand the message to
// another consumer.
const lapseMargin = 2 * time.Second

// run renews held messages' leases as they fall due, until ctx is done. It wakes at the
// earliest renewal due, or each interval when none is (to report its beat to health).
func (l *leaser) run(ctx context.Context) {
	t := time.NewTimer(l.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.added:
		case <-t.C:
			now := time.Now()
			l.renew(l.due(now))
			if l.health != nil {
				l.health.beat(now)
			}
		}
		next := l.interval
		if at, ok := l.nextDue(); ok {
			next = min(next, max(time.Until(at), 0))
		}
		t.Reset(next)
	}
}

// batchSlack is how early a renewal may go out, to share a batch with one due now.
func (l *leaser) batchSlack() time.Duration {
	_, renew := l.received()
	return renew / 2
}

// due returns the held jobs whose renewal is due by now, or within batchSlack of it.
func (l *leaser) due(now time.Time) []*job {
	var out []*job
	for _, j := range l.list() {
		if !j.renewal().After(now.Add(l.batchSlack())) {
			out = append(out, j)
		}
	}
	return out
}

// nextDue returns the earliest renewal due among the held jobs.
func (l *leaser) nextDue() (time.Time, bool) {
	var at time.Time
	for _, j := range l.list() {
		if r := j.renewal(); at.IsZero() || r.Before(at) {
			at = r
		}
	}
	return at, !at.IsZero()
}

// settlingRetry is how soon the heartbeat looks again at a job it found settling: its
// message is being deleted or handed back, and needs no renewal unless that fails.
const settlingRetry = time.Second

// stop stops j for cause, or has the loop hand it back when no worker of its own runs it.
func (l *leaser) stop(j *job, cause error) {
	if !j.stop(cause) {
		l.release(j)
	}
}

// renew extends each job's visibility to the visibility timeout, or to what is left before
// the 12 h limit. It stops the jobs that are about to reach that limit, whose lease is gone,
// or whose lease will lapse before their worker could be stopped because SQS cannot be
// reached. A renewal that failed otherwise is tried again within renewRetry.
func (l *leaser) renew(js []*job) {
	type pending struct {
		j      *job
		handle string
		asked  time.Time
		vis    time.Duration
		done   <-chan error
	}
	var waits []pending
	now := time.Now()
	for _, j := range js {
		// A job whose lock is taken is settling (its delete or hand-back under way): the
		// heartbeat does not wait on it, and looks again shortly in case that fails.
		if !j.mu.TryLock() {
			j.renewBy(now.Add(settlingRetry))
			continue
		}
		if j.settled {
			j.renewBy(now.Add(l.interval)) // to be removed; not due again meanwhile
			j.mu.Unlock()
			continue
		}
		inFlight := now.Sub(j.receivedAt)
		left := sqsspec.MaxInFlight - inFlight
		if left <= l.ceilingMargin() {
			j.renewBy(now.Add(l.interval))
			j.mu.Unlock()
			j.log.Warn("stopping job: SQS allows a message 12h in flight and this one is near the limit; it will be released for a new receive",
				"in_flight", inFlight.Round(time.Second).String())
			l.stop(j, errCeiling)
			continue
		}
		vis := min(l.visibility, left-time.Second)
		waits = append(waits, pending{j, j.receipt, now, vis, l.acks.submit(ackVisibility, j.receipt, sqsspec.Seconds(vis))})
	}
	var renewed []*job
	for _, p := range waits {
		err := <-p.done
		if err == nil {
			p.j.leaseUntil = p.asked.Add(p.vis)
			p.j.renewBy(p.asked.Add(l.interval))
			renewed = append(renewed, p.j)
		} else {
			p.j.renewBy(time.Now().Add(min(l.interval, renewRetry)))
		}
		lapsesIn := time.Until(p.j.leaseUntil)
		p.j.mu.Unlock()
		switch {
		case err == nil:
		case leaseGone(err) && p.handle == p.j.handle():
			p.j.log.Error("stopping job: its lease could not be renewed and the message may already be with another worker", "error", err)
			l.stop(p.j, errLeaseLost)
		case lapsesIn < l.killGrace+lapseMargin:
			p.j.log.Error("stopping job: SQS cannot be reached to renew its lease, which lapses before the worker could otherwise be stopped; the message will be delivered again",
				"error", err, "lease_lapses_in", lapsesIn.Round(time.Millisecond).String())
			l.stop(p.j, errLeaseLost)
		default:
			p.j.log.Warn("lease renewal failed; retrying", "error", err, "lease_lapses_in", lapsesIn.Round(time.Second).String())
		}
	}
	for _, j := range l.dedupe.extend(renewed) {
		l.stop(j, errLeaseLost)
	}
}

// leaseGone reports errors meaning the receipt handle no longer holds the message.
func leaseGone(err error) bool {
	var api smithy.APIError
	if !errors.As(err, &api) {
		return false
	}
	switch api.ErrorCode() {
	case "ReceiptHandleIsInvalid", "MessageNotInflight", "InvalidParameterValue", "AWS.SimpleQueueService.MessageNotInflight":
		return true
	}
	return false
}
