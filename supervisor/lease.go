package supervisor

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/smithy-go"
)

// job is one message held by the supervisor, from its receive until it is settled: its
// lease, and how to stop the worker it is part of.
type job struct {
	msg message
	log *slog.Logger

	// stopMu guards cause and cancel. cause is the first reason the heartbeat gave to stop
	// (errCeiling, errLeaseLost); cancel stops the worker running this message, once one is.
	// In batch mode a lost lease does not stop the shared worker: the message alone is
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
	pgid    int // 0 until the worker runs
	// receipt and receivedAt are the current delivery's: a new delivery of the same message
	// replaces them (takeOver).
	receipt    string
	receivedAt time.Time
	// leaseUntil is when the message's visibility ends as far as watchbot knows: after the
	// receive, or after the last successful renewal.
	leaseUntil time.Time
}

// stop records why the job must stop and stops its worker, if it runs one of its own (or,
// in a batch, for any reason other than a lost lease).
func (j *job) stop(cause error) {
	j.stopMu.Lock()
	defer j.stopMu.Unlock()
	if j.cause == nil {
		j.cause = cause
	}
	if j.cancel != nil && !(j.shared && errors.Is(cause, errLeaseLost)) {
		j.cancel(cause)
	}
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

// jobs is the set of messages held, by message id, for the heartbeat and for shutdown.
type jobs struct {
	mu sync.Mutex
	m  map[string]*job
}

func (js *jobs) add(j *job) {
	js.mu.Lock()
	defer js.mu.Unlock()
	if js.m == nil {
		js.m = map[string]*job{}
	}
	js.m[j.msg.ID] = j
}

func (js *jobs) remove(j *job) {
	js.mu.Lock()
	defer js.mu.Unlock()
	if js.m[j.msg.ID] == j {
		delete(js.m, j.msg.ID)
	}
}

func (js *jobs) get(id string) *job {
	js.mu.Lock()
	defer js.mu.Unlock()
	return js.m[id]
}

func (js *jobs) list() []*job {
	js.mu.Lock()
	defer js.mu.Unlock()
	out := make([]*job, 0, len(js.m))
	for _, j := range js.m {
		out = append(out, j)
	}
	return out
}

// takeOver gives a held message's job the receipt handle of a new delivery of the same
// message. SQS delivers a message again when its lease lapsed (the heartbeat could not reach
// SQS for longer than the visibility timeout); the old handle no longer works, and running
// the message a second time beside the first would be a concurrent duplicate. The running
// job carries on with the new handle and lease. It reports false when the job has already
// settled the message (a retry made it visible again): that delivery is a new attempt.
func (j *job) takeOver(m message, receivedAt time.Time, visibility time.Duration) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.settled {
		return false
	}
	j.receipt = m.ReceiptHandle
	j.receivedAt = receivedAt
	j.leaseUntil = receivedAt.Add(visibility)
	j.log.Warn("message delivered again while its job runs (its lease had lapsed): the job continues under the new receipt",
		"receive_count", m.Attempt)
	return true
}

// ceilingMargin is how long before SQS's 12 h in-flight limit a job is stopped, leaving room
// to stop the worker and release the message.
func (s *Supervisor) ceilingMargin() time.Duration {
	return s.cfg.heartbeat() + s.cfg.KillGrace + time.Minute
}

// renewRetry is how soon a failed renewal is tried again, well before the lease lapses.
const renewRetry = 5 * time.Second

// lapseMargin is how long before its lease lapses a job whose renewals keep failing is
// stopped, on top of --kill-grace: the worker must be gone before SQS can hand the message to
// another consumer.
const lapseMargin = 2 * time.Second

// heartbeat renews the lease of every held message each interval until ctx is done; after
// a failed renewal it tries again within renewRetry.
func (s *Supervisor) heartbeat(ctx context.Context) {
	interval := s.cfg.heartbeat()
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if s.renew(s.jobs.list()) {
			t.Reset(min(interval, renewRetry))
		} else {
			t.Reset(interval)
		}
	}
}

// renew extends each job's visibility to the visibility timeout, or to what is left before
// the 12 h limit. It stops the jobs that are about to reach that limit, whose lease is gone,
// or whose lease will lapse before their worker could be stopped because SQS cannot be
// reached. It reports whether a renewal failed and should be tried again soon.
func (s *Supervisor) renew(js []*job) (retry bool) {
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
		j.mu.Lock()
		if j.settled {
			j.mu.Unlock()
			continue
		}
		inFlight := now.Sub(j.receivedAt)
		left := maxInFlight - inFlight
		if left <= s.ceilingMargin() {
			j.mu.Unlock()
			j.log.Warn("stopping job: SQS allows a message 12h in flight and this one is near the limit; it will be released for a new receive",
				"in_flight", inFlight.Round(time.Second).String())
			j.stop(errCeiling)
			continue
		}
		vis := min(s.cfg.VisibilityTimeout, left-time.Second)
		waits = append(waits, pending{j, j.receipt, now, vis, s.acks.submit(ackVisibility, j.receipt, seconds(vis))})
	}
	for _, p := range waits {
		err := <-p.done
		if err == nil {
			p.j.leaseUntil = p.asked.Add(p.vis)
		}
		lapsesIn := time.Until(p.j.leaseUntil)
		p.j.mu.Unlock()
		switch {
		case err == nil:
		case leaseGone(err) && p.handle == p.j.handle():
			p.j.log.Error("stopping job: its lease could not be renewed and the message may already be with another worker", "error", err)
			p.j.stop(errLeaseLost)
		case lapsesIn < s.cfg.KillGrace+lapseMargin:
			p.j.log.Error("stopping job: SQS cannot be reached to renew its lease, which lapses before the worker could otherwise be stopped; the message will be delivered again",
				"error", err, "lease_lapses_in", lapsesIn.Round(time.Millisecond).String())
			p.j.stop(errLeaseLost)
		default:
			p.j.log.Warn("lease renewal failed; retrying", "error", err, "lease_lapses_in", lapsesIn.Round(time.Second).String())
			retry = true
		}
	}
	return retry
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
