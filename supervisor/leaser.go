package supervisor

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"go.opentelemetry.io/otel/attribute"

	"github.com/watchbot/watchbot/internal/sqsspec"
)

// leaser keeps every message watchbot holds leased, from its receive until it is settled:
// running, waiting for a slot or a batch, or waiting out an in-place retry. A receive leases
// a message for --receive-visibility only; the heartbeat extends it to --visibility-timeout
// once it has been held a third of that (most short jobs are over by then and cost no
// renewal), then renews it every --heartbeat-interval. Renewals go out in batches: a
// heartbeat renews every message due within half the first wait. The leaser stops a job whose
// lease cannot be kept (SQS's 12 h in-flight ceiling is near and there is no dedupe table to
// relay the message, the lease is lost, or renewals keep failing until the lease is about to
// lapse), and reports a held job in no run to release, for the loop to hand it back. With a
// dedupe table, the last renewal takes the message to the ceiling and the job waits for a
// relay's receipt (relay.go); a running job whose lease is lost before then waits for one
// too, for its claim of the key keeps it safe from a second run.
//
// The heartbeat never waits for SQS: renewals go out through the acknowledger, and their
// answers come back through a mailbox; held jobs it stops go to the loop through another
// (release must not block). l.mu guards the registry only; no two of l.mu, a job's mu and
// its stopMu are ever held at once.
type leaser struct {
	visibility, receiveLease, interval, killGrace time.Duration
	// inFlight is SQS's in-flight limit (Config.InFlightLimit).
	inFlight time.Duration
	acks     *acker
	log      *slog.Logger
	// heldStopped is called from the heartbeat (and the dedupe extensions) for a job that must
	// stop but runs in no worker of its own; the loop hands it back if it is still held. It
	// must not block.
	heldStopped func(*job)
	// health, when set, is told of each heartbeat.
	health *Health
	// dedupe, when set, extends the dedupe claims of the messages whose leases it renews, in
	// goroutines that extending waits for.
	dedupe    *deduper
	extending sync.WaitGroup

	// added wakes the heartbeat when a job is added, so it can renew it in time.
	added chan struct{}
	// answers carries the acknowledger's answers to renewals, posted from its calls'
	// goroutines, which must never wait for the heartbeat.
	answers *mailbox[renewAnswer]

	mu   sync.Mutex
	jobs map[string]*job
}

// newLeaser returns the leaser of cfg's leases, renewed through acks; heldStopped takes the
// held jobs it stops, health (nil: none) is told of each heartbeat, and dedupe (nil: none)
// extends the renewed messages' claims.
func newLeaser(cfg Config, acks *acker, log *slog.Logger, heldStopped func(*job), health *Health, dedupe *deduper) *leaser {
	return &leaser{visibility: cfg.VisibilityTimeout, receiveLease: cfg.receiveVisibility(), interval: cfg.heartbeat(),
		killGrace: cfg.KillGrace, inFlight: cfg.inFlight(), acks: acks, log: log, heldStopped: heldStopped, health: health, dedupe: dedupe,
		jobs: map[string]*job{}, added: make(chan struct{}, 1), answers: newMailbox[renewAnswer]()}
}

// newJob registers nothing; it builds the job for a message received at receivedAt, leased
// as l.received says.
func (l *leaser) newJob(m message, receivedAt time.Time, log *slog.Logger) *job {
	lease, renew := l.received()
	j := &job{msg: m, attempt: m.Attempt, receipt: m.ReceiptHandle, receivedAt: receivedAt,
		leaseUntil: receivedAt.Add(lease), log: log.With(append([]any{"message_id", m.ID}, m.Trace.LogAttrs()...)...)}
	j.renewBy(receivedAt.Add(renew))
	return j
}

// received returns the lease a receive takes, and how long after it the first renewal is
// due: a third of it, or sooner as renewedFor says.
func (l *leaser) received() (lease, renew time.Duration) {
	return l.receiveLease, l.renewedFor(l.receiveLease, l.receiveLease/3)
}

// renewedFor returns how long after a lease of the given length starts it is renewed: after
// wait, or the heartbeat interval when that is sooner, and at most halfway through the time
// the lease leaves before its job would have to be stopped, so that a renewal that fails has
// time for retries (--heartbeat-interval may be set close to the visibility timeout).
func (l *leaser) renewedFor(lease, wait time.Duration) time.Duration {
	renew := min(l.interval, wait)
	if half := (lease - l.killGrace - lapseMargin) / 2; half > 0 {
		renew = min(renew, half)
	}
	return renew
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

// renewRetry is the longest wait before a failed renewal is tried again; as the job's stop
// deadline nears, retries come at half the time left.
const renewRetry = 5 * time.Second

// minRetryGap is the shortest wait before a failed renewal is tried again: with less than
// twice this left before the job's stop deadline, the job is stopped instead.
const minRetryGap = 100 * time.Millisecond

// lapseMargin is how long before its lease lapses a job whose lease could not be renewed is
// stopped, on top of --kill-grace: the worker must be gone before SQS can hand the message to
// another consumer.
const lapseMargin = 2 * time.Second

// stopBy returns when a job whose lease ends at leaseUntil must be stopped unless a renewal
// has extended the lease by then.
func (l *leaser) stopBy(leaseUntil time.Time) time.Time {
	return leaseUntil.Add(-l.killGrace - lapseMargin)
}

// renewal is a lease renewal sent and not yet answered. Its job's renewing channel is open
// until the call returns, so no settle can land before it.
type renewal struct {
	j      *job
	handle string
	done   chan struct{}
	asked  time.Time
	vis    time.Duration
	// stopBy is when the job is stopped if the answer has not come by then; stopped, that it
	// was.
	stopBy  time.Time
	stopped bool
	round   *renewRound
	// last: the renewal takes a relayable job's message to SQS's in-flight limit, where its
	// lease ends whatever happens; it has no stop deadline, and its failure only brings the
	// relay sooner.
	last bool
}

// renewRound is the renewals one heartbeat sent; the jobs they renewed have their dedupe
// claims extended together once the last has answered.
type renewRound struct {
	pending int
	renewed []*job
}

type renewAnswer struct {
	r   *renewal
	err error
}

// run renews held messages' leases as they fall due, until ctx is done. It wakes at the
// earliest renewal due, at the stop deadline of a renewal SQS has not answered, as answers
// come, and at least once an interval (to report its beat to health). Renewals are
// sent without waiting for their answers, so a call SQS does not answer (a stalled endpoint)
// delays neither the other jobs' renewals nor the stop of its own job, which must come before
// the lease lapses whatever the call does.
func (l *leaser) run(ctx context.Context) {
	t := time.NewTimer(l.interval)
	defer t.Stop()
	flight := map[*job]*renewal{}
	// beatBy is when the heartbeat ticks at the latest, however often jobs and answers wake
	// it: each wake resets the timer, which must not push the tick further out.
	beatBy := time.Now().Add(l.interval)
	for {
		select {
		case <-ctx.Done():
			// Wait for the answers of the renewals under way, which the acknowledger bounds
			// by its call timeout, so none is applied, or extends a claim, after Run.
			for len(flight) > 0 {
				<-l.answers.ready
				l.onAnswers(flight)
			}
			l.extending.Wait()
			return
		case <-l.added:
		case <-l.answers.ready:
			l.onAnswers(flight)
		case <-t.C:
			now := time.Now()
			l.stopOverdue(flight, now)
			l.renew(flight, l.due(flight, now))
			if l.health != nil {
				l.health.beat(now)
			}
			beatBy = now.Add(l.interval)
		}
		at := beatBy
		if due, ok := l.nextDue(flight); ok && due.Before(at) {
			at = due
		}
		t.Reset(max(time.Until(at), 0))
	}
}

// batchSlack is how early a renewal may go out, to share a batch with one due now.
func (l *leaser) batchSlack() time.Duration {
	_, renew := l.received()
	return renew / 2
}

// due returns the held jobs whose renewal is due by now, or within batchSlack of it, and
// not under way.
func (l *leaser) due(flight map[*job]*renewal, now time.Time) []*job {
	var out []*job
	for _, j := range l.list() {
		if flight[j] == nil && !j.renewal().After(now.Add(l.batchSlack())) {
			out = append(out, j)
		}
	}
	return out
}

// nextDue returns the earliest moment the heartbeat has something to do: a renewal due, or
// the stop deadline of a renewal under way.
func (l *leaser) nextDue(flight map[*job]*renewal) (time.Time, bool) {
	var at time.Time
	earliest := func(t time.Time) {
		if at.IsZero() || t.Before(at) {
			at = t
		}
	}
	for _, j := range l.list() {
		if flight[j] == nil {
			earliest(j.renewal())
		}
	}
	for _, r := range flight {
		if !r.stopped && !r.last {
			earliest(r.stopBy)
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
		l.heldStopped(j)
	}
}

// renew sends renewals extending each job's visibility to the visibility timeout, or to what
// is left before SQS's in-flight limit, and records them in flight. Without a dedupe table it
// stops the jobs that are about to reach that limit; with one, a job that holds its key's
// claim (it runs) waits at the limit for a relay, its claim extended meanwhile.
func (l *leaser) renew(flight map[*job]*renewal, js []*job) {
	now := time.Now()
	round := &renewRound{}
	var waiting []*job
	for _, j := range js {
		d := j.delivery()
		if d.settled {
			j.renewBy(now.Add(l.interval)) // to be removed; not due again meanwhile
			continue
		}
		inFlight := now.Sub(d.receivedAt)
		left := l.inFlight - inFlight
		vis := min(l.visibility, left-relayMargin)
		relayable := l.dedupe.holds(j)
		last := relayable && vis < l.visibility
		switch {
		case left <= l.ceilingMargin() && !relayable:
			j.renewBy(now.Add(l.interval))
			j.log.Warn("stopping job: SQS allows a message 12h in flight and this one is near the limit; it will be released for a new receive (--dedupe-table would relay it)",
				"in_flight", inFlight.Round(time.Second).String())
			l.stop(j, errCeiling)
			continue
		case relayable && j.waitsRelay(), last && vis < time.Second:
			j.waitRelay()
			j.renewBy(now.Add(min(l.interval, renewRetry)))
			waiting = append(waiting, j)
			continue
		case last:
			// One renewal to the limit, then no more until a relay's receipt comes.
			j.waitRelay()
			j.log.Info("renewing the message to SQS's in-flight limit: the job goes on past it and takes the receipt of whoever receives the message next",
				"in_flight", inFlight.Round(time.Second).String(), "visible_in", vis.String())
		}
		if now.After(d.leaseUntil) {
			// Late for want of CPU or of an answer: SQS may have delivered the message again.
			j.log.Warn("renewing a lease that has lapsed: the message may be delivered again meanwhile",
				"lapsed_for", now.Sub(d.leaseUntil).Round(time.Millisecond).String())
		}
		done := j.beginRenewal(d.receipt)
		if done == nil {
			// It began to settle, or was delivered again, since the snapshot: looked at
			// again shortly.
			j.renewBy(now.Add(settlingRetry))
			continue
		}
		r := &renewal{j: j, handle: d.receipt, done: done, asked: now, vis: vis,
			stopBy: l.stopBy(d.leaseUntil), round: round, last: last}
		if !r.stopBy.After(now) {
			// A lease shorter than --kill-grace and the margin: no stop can come before it
			// lapses, so an unanswered renewal stops the job when it does.
			r.stopBy = d.leaseUntil
		}
		round.pending++
		flight[j] = r
		l.acks.submitReply(ackVisibility, r.handle, sqsspec.Seconds(r.vis), func(err error) {
			j.endRenewal(done)
			l.answers.post(renewAnswer{r, err})
		})
	}
	l.extendWaiting(waiting)
}

// stopOverdue stops the jobs whose renewal SQS has not answered by their stop deadline:
// their lease may lapse before their worker could otherwise be stopped. The answer is still
// awaited.
func (l *leaser) stopOverdue(flight map[*job]*renewal, now time.Time) {
	for _, r := range flight {
		if r.stopped || r.last || now.Before(r.stopBy) {
			continue
		}
		r.stopped = true
		if r.j.handle() != r.handle {
			continue // a new delivery has given the job a new receipt and lease (takeOver)
		}
		if l.dedupe.holds(r.j) {
			l.waitForRelay(r.j, errors.New("SQS has not answered the renewal of its lease"))
			continue
		}
		r.j.log.Error("stopping job: SQS has not answered the renewal of its lease, which lapses before the worker could otherwise be stopped; the message will be delivered again",
			"waited", now.Sub(r.asked).Round(time.Millisecond).String())
		l.stop(r.j, errLeaseLost)
	}
}

// onAnswers applies the renewals' answers that have come.
func (l *leaser) onAnswers(flight map[*job]*renewal) {
	for _, a := range l.answers.take() {
		l.applyAnswer(flight, a)
	}
}

// applyAnswer applies a renewal's answer: the lease extended, or a retry before the job's stop
// deadline, or the job stopped when its lease is gone or no retry fits before that deadline.
// An answer for a receipt the job no longer has, or for a job that has begun to settle, is
// dropped.
func (l *leaser) applyAnswer(flight map[*job]*renewal, a renewAnswer) {
	r, j, err := a.r, a.r.j, a.err
	delete(flight, j)
	now := time.Now()
	leaseUntil, current := j.renewed(r.handle, err == nil, r.asked.Add(r.vis))
	retry := time.Duration(0)
	switch {
	case !current:
		// Settling (nothing more to renew), or delivered again: takeOver has set its next
		// renewal.
	case err == nil:
		j.renewBy(r.asked.Add(l.renewedFor(r.vis, l.interval)))
	default:
		retry = min(l.interval, renewRetry, l.stopBy(leaseUntil).Sub(now)/2)
		if r.stopped || retry < minRetryGap {
			// The job is stopped (below): its lease is tried again only while it ends.
			j.renewBy(now.Add(min(l.interval, renewRetry)))
		} else {
			j.renewBy(now.Add(retry))
		}
	}
	lapsesIn := leaseUntil.Sub(now)
	switch {
	case !current:
	case err == nil:
		r.round.renewed = append(r.round.renewed, j)
	case r.stopped: // stopped when the answer was overdue
	case r.last, beyondLimit(err) && l.dedupe.holds(j):
		// At the limit the lease ends anyway, and SQS counts the time in flight from its
		// receive by its own clock (a relay's receive by the relaying host's): the limit may
		// come sooner than this clock said. The job waits for a relay's receipt.
		j.waitRelay()
		j.log.Info("the renewal to SQS's in-flight limit failed: the message comes back sooner, and the job takes the receipt of whoever receives it", "error", err)
	case (leaseGone(err) || retry < minRetryGap) && l.dedupe.holds(j):
		l.waitForRelay(j, err)
	case leaseGone(err):
		j.log.Error("stopping job: its lease could not be renewed and the message may already be with another worker", "error", err)
		j.spanEvent("lease renewal failed", attribute.String("error", err.Error()))
		l.stop(j, errLeaseLost)
	case retry < minRetryGap:
		j.log.Error("stopping job: SQS cannot be reached to renew its lease, which lapses before the worker could otherwise be stopped; the message will be delivered again",
			"error", err, "lease_lapses_in", lapsesIn.Round(time.Millisecond).String())
		j.spanEvent("lease renewal failed", attribute.String("error", err.Error()))
		l.stop(j, errLeaseLost)
	default:
		j.log.Warn("lease renewal failed; retrying", "error", err, "retry_in", retry.Round(time.Millisecond).String(),
			"lease_lapses_in", lapsesIn.Round(time.Second).String())
		j.spanEvent("lease renewal failed", attribute.String("error", err.Error()))
	}
	if r.round.pending--; r.round.pending == 0 && l.dedupe != nil && len(r.round.renewed) > 0 {
		// The table's calls take up to their own timeout: in a goroutine of their own, so
		// they hold up no renewal or stop deadline of the heartbeat's.
		renewed := r.round.renewed
		l.extending.Go(func() { l.extended(l.dedupe.extend(renewed)) })
	}
}

// waitForRelay lets a job whose SQS lease is lost, or will lapse before SQS answers, go on
// when it holds its dedupe key's claim: the claim is its lease. The message comes back when
// its visibility ends, and whoever receives it relays it to the job, as at the in-flight
// limit; the job is stopped only when its claim cannot be kept (deduper.extend).
func (l *leaser) waitForRelay(j *job, err error) {
	j.waitRelay()
	j.log.Warn("the message's lease could not be kept, but the job holds its dedupe key's claim: it goes on, and takes the receipt of whoever receives the message next",
		"error", err)
	j.spanEvent("lease renewal failed", attribute.String("error", err.Error()))
}

// leaseGone reports errors meaning the receipt handle no longer holds the message: the SDK's
// ReceiptHandleIsInvalid and MessageNotInflight, by their types, which hold whichever name SQS
// gave them (MessageNotInflight or AWS.SimpleQueueService.MessageNotInflight), a batch entry's
// included (sqsspec.EntryError unwraps to them); and InvalidParameterValue, SQS's answer to a
// handle superseded by a later receive or expired, a common error of the API that the SDK has
// no type for, so matched by its code.
func leaseGone(err error) bool {
	var invalid *types.ReceiptHandleIsInvalid
	var notInFlight *types.MessageNotInflight
	var api smithy.APIError
	return errors.As(err, &invalid) || errors.As(err, &notInFlight) ||
		errors.As(err, &api) && api.ErrorCode() == "InvalidParameterValue"
}
