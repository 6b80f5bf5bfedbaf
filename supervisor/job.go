package supervisor

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/watchbot/watchbot/payload"
	"github.com/watchbot/watchbot/worker"
)

// job is one message held by the supervisor, from its receive until it is settled: where it
// stands in scheduling, its lease, and how to stop the worker it is part of.
type job struct {
	msg message
	log *slog.Logger // with the message id

	// The fields up to stopMu belong to whoever holds the job: the loop while the message is
	// held, a run's goroutine while it runs (from startRun until its runEvent), a hand-back's
	// goroutine while it goes back. Each handover is a goroutine's start or a channel send,
	// so no two goroutines use them at once, and no lock guards them.
	//
	// Written by the loop (scheduler.add and finish), read by the runs: grp is the message's
	// group; attempt is the receive count plus the runs watchbot gave the message in place
	// (FIFO), or, once a run claimed the message's dedupe key, the run its claim counted
	// (written by that run, which holds the job); pending is an outcome to apply without
	// running the worker again (a delete or dead-letter send that failed, retried in place).
	grp     *group
	attempt int
	pending *outcome
	// Written by the runs and hand-backs that settle the message: settleFailures counts the
	// failed deletes and dead-letter sends retried in place, for their backoff; dedupeWaits
	// the waits in place of a FIFO message whose dedupe key could not be claimed (dedupe.go),
	// which space its claims as attempts would; payload is the object the message's pointer
	// names, once a run has read it (docs/payloads.md), and fetched that object in a file,
	// for the run under way.
	settleFailures int
	dedupeWaits    int
	payload        *payload.Pointer
	fetched        *worker.Payload

	// stopMu guards cause, cancel, shared and span, which the heartbeat (cause), the run
	// (cancel, shared, span) and the loop (takeOver forgives a lost lease) write. cause is the
	// first reason the heartbeat gave to stop (errCeiling, errLeaseLost); cancel stops the
	// worker running this message while one does. In batch mode a lost lease does not stop
	// the shared worker: the message alone is abandoned when the batch settles.
	//
	// cancel is the one cancel function kept in a struct, because the job is where the
	// heartbeat finds the run to stop: the run's goroutine is blocked in the worker's call
	// and cannot poll, so a stop must reach the worker's context from the heartbeat's
	// goroutine. A channel in its place would need a goroutine per run to turn it into that
	// cancel, and a once to close it for a batch's several jobs: the same function, kept the
	// same way. The run that made it attaches it and detaches it before it ends (runner.run),
	// so it never outlives the context it cancels.
	stopMu sync.Mutex
	cause  error
	cancel context.CancelCauseFunc
	shared bool // the worker runs other messages too
	// span is the recording span of the run the job is part of, for the heartbeat's events.
	span trace.Span

	// mu guards the delivery below, up to renewAt, which the loop (takeOver, beginHandBack),
	// the heartbeat's renewals, the settles and the run's worker (kill) write. It is held
	// only while they are read or written, never across an SQS call, a channel send or a
	// wait: a renewal reads the receipt, calls SQS without the lock, and applies the answer
	// only if the receipt is still the job's.
	mu sync.Mutex
	// settled: the message's settle has begun (or the loop has decided to hand it back). No
	// renewal starts after it, and a new delivery of the message is a new job.
	settled bool
	// renewing, while a renewal's call is under way, is closed when the call returns: a
	// settle waits for it, so no renewal can land after the outcome's own visibility change.
	renewing chan struct{}
	kill     func() // kills the running worker at once, nil when none runs
	// receipt and receivedAt are the current delivery's: a new delivery of the same message
	// replaces them (takeOver).
	receipt    string
	receivedAt time.Time
	// leaseUntil is when the message's visibility ends as far as watchbot knows: after the
	// receive, or after the last successful renewal.
	leaseUntil time.Time
	// atLimit: the delivery has reached SQS's in-flight limit, which no renewal passes, or
	// its lease was lost while the job holds its dedupe claim; the job waits for a relay's
	// receipt (relay.go).
	atLimit bool
	// renewAt is when the heartbeat renews the lease next, in Unix nanoseconds: written by the
	// heartbeat, and by the loop when a new delivery replaces the receipt (takeOver); atomic,
	// so the heartbeat never waits for a settle to learn what is due.
	renewAt atomic.Int64
}

// renewal returns when the job's lease is renewed next.
func (j *job) renewal() time.Time { return time.Unix(0, j.renewAt.Load()) }

// renewBy sets when the job's lease is renewed next.
func (j *job) renewBy(t time.Time) { j.renewAt.Store(t.UnixNano()) }

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

// delivery is a snapshot of the job's current delivery.
type delivery struct {
	receipt    string
	receivedAt time.Time
	leaseUntil time.Time
	settled    bool
}

func (j *job) delivery() delivery {
	j.mu.Lock()
	defer j.mu.Unlock()
	return delivery{receipt: j.receipt, receivedAt: j.receivedAt, leaseUntil: j.leaseUntil, settled: j.settled}
}

// beginHandBack marks the job settled before its hand-back runs: called by the loop, it makes
// a new delivery that the loop takes later a new job, not one that the hand-back then drops.
func (j *job) beginHandBack() {
	j.mu.Lock()
	j.settled = true
	j.mu.Unlock()
}

// beginRenewal records a renewal of receipt under way and returns the channel to close when
// its call returns; nil when the job has settled or has a newer receipt since the snapshot.
func (j *job) beginRenewal(receipt string) chan struct{} {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.settled || j.receipt != receipt || j.renewing != nil {
		return nil
	}
	j.renewing = make(chan struct{})
	return j.renewing
}

// endRenewal records that the renewal's call returned, waking a settle that waits for it.
func (j *job) endRenewal(done chan struct{}) {
	j.mu.Lock()
	if j.renewing == done {
		j.renewing = nil
	}
	j.mu.Unlock()
	close(done)
}

// renewed applies a renewal's answer for receipt: on success the lease runs until until. It
// reports the lease as it now stands, and false when the answer is of no use: the job has a
// new receipt (a new delivery replaced the one renewed), or has begun to settle.
func (j *job) renewed(receipt string, ok bool, until time.Time) (time.Time, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.settled || j.receipt != receipt {
		return j.leaseUntil, false
	}
	if ok {
		j.leaseUntil = until
	}
	return j.leaseUntil, true
}

// beginSettle marks the job settled, waits for a renewal under way to return, and returns the
// delivery to settle. From then on no renewal starts and no new delivery replaces the receipt,
// so the settle's own call is the last that changes the message's visibility.
func (j *job) beginSettle() delivery {
	j.mu.Lock()
	j.settled = true
	wait := j.renewing
	j.mu.Unlock()
	if wait != nil {
		<-wait
	}
	return j.delivery()
}

// resumed undoes beginSettle for a job kept held (its settle's call failed and it is tried
// again in place): renewals go on.
func (j *job) resumed() {
	j.mu.Lock()
	j.settled = false
	j.mu.Unlock()
}

// setKill records how to kill the job's running worker at once, nil when none runs.
func (j *job) setKill(kill func()) {
	j.mu.Lock()
	j.kill = kill
	j.mu.Unlock()
}

// killer returns how to kill the job's running worker at once, nil when none runs.
func (j *job) killer() func() {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.kill
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
	j.setKill(nil)
}

// takeOver gives a held message's job the receipt handle of a new delivery of the same
// message. SQS delivers a message again when its lease lapsed (the heartbeat could not reach
// SQS for longer than the visibility timeout); the old handle no longer works, and running
// the message a second time beside the first would be a concurrent duplicate. The job carries
// on with the new handle and lease. It reports false when the job's settle has begun (its
// worker, if it had one, has ended; a retry may have made it visible again), or the loop has
// decided to hand it back: that delivery is a new attempt, for a new job. The loop alone calls
// it, so a hand-back the loop decided always comes first. A job stopped for a lost lease
// whose worker was not stopped for it (a batch's, or none yet) is watchbot's again.
func (j *job) takeOver(m message, receivedAt time.Time, lease, renew time.Duration) bool {
	j.mu.Lock()
	if j.settled {
		j.mu.Unlock()
		return false
	}
	relay := j.atLimit
	j.receipt = m.ReceiptHandle
	j.receivedAt = receivedAt
	j.leaseUntil = receivedAt.Add(lease)
	j.atLimit = false
	j.renewBy(receivedAt.Add(renew))
	j.mu.Unlock()
	if relay {
		j.log.Info("message relayed: delivered again to this watchbot, which holds its job past SQS's in-flight limit; the job continues under the new receipt",
			"owner", "this watchbot", "receive_count", m.Attempt)
	} else {
		j.log.Warn("message delivered again while watchbot holds it (its lease had lapsed): the job continues under the new receipt",
			"receive_count", m.Attempt)
	}
	// The message is watchbot's again: a lease taken for lost no longer stands, unless
	// it stopped the job's worker already.
	j.stopMu.Lock()
	if errors.Is(j.cause, errLeaseLost) && (j.cancel == nil || j.shared) {
		j.cause = nil
	}
	j.stopMu.Unlock()
	return true
}
