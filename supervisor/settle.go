package supervisor

// Settling a message on SQS: the outcome of a run applied to each of its messages (delete,
// visibility change, dead-letter send), after any renewal under way has returned.

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/backoff"
	"github.com/watchbot/watchbot/internal/dlqattr"
	"github.com/watchbot/watchbot/internal/sqsspec"
)

// settleRun settles each message of a run by its outcome (counting the outcomes decided in
// this run), and returns how each left the run. FIFO groups settle in order, each group
// apart; a message whose delete or dead-letter send failed stops its group too.
func (r *runner) settleRun(ctx context.Context, jobs []*job, outs []outcome, decided []bool, attrs []any) []disposition {
	disps := make([]disposition, len(jobs))
	settlePart := func(part []int) {
		stopped, inPlace := false, false
		for _, i := range part {
			o := outs[i]
			if stopped {
				o = behind(inPlace, o)
			}
			if !decided[i] {
				r.count(o)
			}
			d := r.settle(ctx, jobs[i], o, attrs...)
			disps[i] = d
			if !stopped && o.Action.leavesGroup() && (d.keep || d.returned) {
				stopped, inPlace = true, d.keep
			}
		}
	}
	parts := settleOrder(jobs, r.fifo)
	if len(parts) == 1 {
		settlePart(parts[0]) // a run of one message, most often: no goroutine to start and grow
		return disps
	}
	var settling sync.WaitGroup
	for _, part := range parts {
		settling.Go(func() { settlePart(part) })
	}
	settling.Wait()
	return disps
}

// settle applies an outcome to one message and returns how the message left its run. Before
// it acts on SQS it marks the job settled and waits for a renewal under way (beginSettle), so
// no renewal can land after the outcome's own visibility change; it holds no lock meanwhile.
// A job the outcome keeps held (its call failed and is tried again in place) is renewed again.
func (r *runner) settle(ctx context.Context, j *job, o outcome, attrs ...any) disposition {
	return r.settleAs(ctx, j, o, false, attrs...)
}

// settleHandBack settles a message that leaves watchbot whatever the outcome: a hand-back.
// A dedupe claim kept for a pending action (a FIFO dead-letter send that failed) ends with
// it: forgotten when the message left, else released with its runs.
func (r *runner) settleHandBack(ctx context.Context, j *job, o outcome) disposition {
	d := r.settleAs(ctx, j, o, true)
	gone := d
	gone.keep = false
	r.dedupe.finishLeft(ctx, []*job{j}, []result{{}}, []disposition{gone})
	return d
}

func (r *runner) settleAs(ctx context.Context, j *job, o outcome, leaving bool, attrs ...any) disposition {
	log := r.runLog(ctx, j).With(append([]any{"attempt", j.attempt, "outcome", o.Action.String()}, attrs...)...)
	switch o.Action {
	case actRetryInPlace:
		if o.Paused {
			until := r.pausedUntil()
			log.Info("worker asked for a pause: no job starts until it ends; watchbot keeps the message, leased, and runs it again then; not an attempt",
				"reason", o.Reason, "paused_until", until.UTC().Format(time.RFC3339))
			return disposition{keep: true, at: until}
		}
		attempt := j.attempt
		if o.Unrun {
			// Its waits space its claims as attempts would: on a FIFO queue a wait is none.
			attempt += j.dedupeWaits
		}
		delay := r.delay(o, attempt)
		if o.Probe {
			log.Info("probe failed: watchbot keeps the message, leased, and probes with it again; the run is not counted as an attempt",
				"reason", o.Reason, "probe_in_seconds", sqsspec.Seconds(delay))
			return disposition{keep: true, at: time.Now().Add(delay)}
		}
		if o.Unrun {
			level := slog.LevelInfo
			if j.dedupeWaits > 0 {
				level = slog.LevelDebug
			}
			j.dedupeWaits++
			log.Log(ctx, level, "message waits in place, leased and unrun, until its dedupe key can be claimed: watchbot keeps it, and its group's later messages; not an attempt",
				"reason", o.Reason, "retry_in_seconds", sqsspec.Seconds(delay), "waits", j.dedupeWaits)
			return disposition{keep: true, at: time.Now().Add(delay)}
		}
		recordRetryDelay(ctx, j, delay)
		log.Info("message will be retried in place: watchbot keeps it, and its group's later messages, leased",
			"reason", o.Reason, "retry_in_seconds", sqsspec.Seconds(delay))
		return disposition{keep: true, at: time.Now().Add(delay), attempt: true}
	case actHold:
		log.Info("message held: an earlier message of its group is retried in place first", "reason", o.Reason)
		return disposition{keep: true, attempt: o.Attempted}
	}
	d := r.act(ctx, j, j.beginSettle(), o, log)
	if d.keep && !leaving {
		j.resumed()
	}
	return d
}

// act performs an outcome's SQS action on the delivery dl of j, and says how the message left.
func (r *runner) act(ctx context.Context, j *job, dl delivery, o outcome, log *slog.Logger) disposition {
	returned := disposition{returned: true}
	switch o.Action {
	case actDelete:
		if err := r.acks.delete(dl.receipt, r.fifo); err != nil {
			return r.failed(j, log, o, err, "delete failed")
		}
		if o.Success {
			r.metrics.Add(alarms.MessagesProcessed, 1)
			log.Info("message done")
			r.deletePayload(ctx, j, log)
		} else {
			log.Warn("message deleted", "reason", o.Reason)
		}
		return disposition{left: true}
	case actRetry:
		delay := r.delay(o, j.attempt)
		recordRetryDelay(ctx, j, delay)
		r.setVisibility(dl, log, delay, "message will be retried", o.Reason)
		return returned
	case actRelease:
		r.setVisibility(dl, log, 0, "message released", o.Reason)
		return returned
	case actRelay:
		// Hidden until the holder's lease lapses, at most as long as this receive allows: the
		// run that holds the job renews it with the receipt, so its own renewals keep it from
		// then on.
		r.setVisibility(dl, log, o.Delay, "message hidden for the run that holds its job", o.Reason)
		return returned
	case actRedrive:
		spanEvent(ctx, "dead-letter", semconv.MessagingMessageID(j.msg.ID), attrReason.String(o.Reason), attribute.String("watchbot.dead_letter.by", "redrive policy"))
		r.setVisibility(dl, log, 0, "message left to the redrive policy: it moves to the dead-letter queue on its next receive", o.Reason)
		return returned
	case actDeadLetter:
		spanEvent(ctx, "dead-letter", semconv.MessagingMessageID(j.msg.ID), attrReason.String(o.Reason), attribute.String("watchbot.dead_letter.by", "watchbot"))
		if r.dlqURL == "" {
			if err := r.acks.delete(dl.receipt, r.fifo); err != nil {
				return r.failed(j, log, o, err, "delete failed")
			}
			log.Error("message deleted: it would be dead-lettered, but there is no dead-letter queue (--allow-no-dlq), so this line is its only record",
				"reason", o.Reason, "body", j.msg.Raw, "attributes", j.msg.Attributes)
			return disposition{left: true}
		}
		if err := r.sendToDLQ(ctx, j, o.Reason); err != nil {
			if r.fifo {
				return r.failed(j, log, o, err, "could not dead-letter the message")
			}
			log.Error("could not dead-letter the message; it stays in the queue and will be retried", "error", err, "reason", o.Reason)
			r.setVisibility(dl, log, r.retryDelay(j.attempt), "message will be retried", "dead-letter send failed")
			return returned
		}
		if err := r.acks.delete(dl.receipt, r.fifo); err != nil {
			sent := outcome{Action: actDelete, Reason: "already in the dead-letter queue (" + o.Reason + ")"}
			return r.failed(j, log, sent, err, "dead-lettered but the delete failed")
		}
		log.Error("message dead-lettered", "reason", o.Reason, "dead_letter_queue", r.dlqURL)
		return disposition{left: true}
	case actAbandon:
		// Taken for lost, the lease may be watchbot's still: a renewal that SQS took
		// late, or a new delivery taken over. Released, the message comes back at once
		// rather than when that lease ends. Only a lease watchbot knows it holds is
		// released: the SQS API reference does not say that a receipt another consumer's
		// receive replaced is refused, and releasing with it could make a message visible
		// while that consumer runs it.
		if !dl.leaseUntil.After(time.Now()) {
			log.Warn("message left alone: its lease may have ended", "reason", o.Reason)
			return returned
		}
		if err := r.acks.changeVisibility(dl.receipt, 0); err == nil {
			log.Warn("message released: its lease was taken for lost, but watchbot still held it", "reason", o.Reason)
			return returned
		}
		log.Warn("message left alone", "reason", o.Reason)
		return returned
	}
	return disposition{}
}

// settleBackoff spaces the retries of a FIFO message's delete or dead-letter send.
var settleBackoff = backoff.Exponential{Base: 500 * time.Millisecond, Max: 30 * time.Second, Jitter: backoff.Equal}

// failed handles an SQS call that failed while settling a message. On a
// FIFO queue a message whose lease still holds keeps its group's place and the call is tried
// again in place, so its successors never overtake it; elsewhere the message is left to come
// back when its lease ends.
func (r *runner) failed(j *job, log *slog.Logger, o outcome, err error, what string) disposition {
	if r.fifo && !leaseGone(err) {
		j.settleFailures++
		delay := settleBackoff.Delay(j.settleFailures, r.random)
		log.Error(what+"; watchbot keeps the message and its group's place, and tries again", "error", err,
			"reason", o.Reason, "retry_in", delay.Round(time.Millisecond).String())
		return disposition{keep: true, at: time.Now().Add(delay), pending: &o}
	}
	log.Error(what+": the message will be delivered again after its visibility timeout", "error", err, "reason", o.Reason)
	return disposition{returned: r.fifo}
}

// delay is how long a retry waits: the outcome's own delay, or the backoff of the attempt.
func (r *runner) delay(o outcome, attempt int) time.Duration {
	if o.DelayFromBackoff {
		return r.retryDelay(attempt)
	}
	return o.Delay
}

// retryDelay is how long a failed attempt waits: --retry-delay when set, else the backoff.
func (r *runner) retryDelay(attempt int) time.Duration {
	if r.cfg.RetryDelay > 0 {
		return r.cfg.RetryDelay
	}
	return r.cfg.Backoff.Delay(attempt, r.random)
}

// setVisibility makes the delivered message visible again after delay, never past SQS's
// in-flight limit.
func (r *runner) setVisibility(dl delivery, log *slog.Logger, delay time.Duration, what, reason string) {
	left := r.cfg.inFlight() - time.Since(dl.receivedAt) - relayMargin
	delay = max(0, min(delay, left))
	secs := sqsspec.Seconds(delay)
	if err := r.acks.changeVisibility(dl.receipt, secs); err != nil {
		log.Error("visibility change failed: the message will be visible again when its lease ends", "error", err, "reason", reason)
		return
	}
	log.Info(what, "reason", reason, "visible_in_seconds", secs)
}

// sendToDLQ sends the message, as received (an SNS envelope stays an envelope), with its
// attributes and watchbot's to the dead-letter queue. The caller deletes it from the source
// only when this returns nil. On a FIFO dead-letter queue the message keeps its group id, and
// its message id is the deduplication id, so a send retried after a lost answer is stored once.
// A send still under way at a stop's last moment fails, and the message stays in the queue.
func (r *runner) sendToDLQ(ctx context.Context, j *job, reason string) error {
	m := j.msg
	cause := dlqattr.Cause{Reason: reason, SourceQueue: r.cfg.QueueURL, Attempts: j.attempt, Lineage: dlqattr.Lineage{
		OriginalMessageID: dlqattr.OriginalID(m.ID, m.SQSAttributes),
		ReplayedFrom:      dlqattr.ReadLineage(m.SQSAttributes).ReplayedFrom,
	}}
	attrs, ok := dlqattr.With(m.SQSAttributes, cause)
	if !ok {
		j.log.Warn("message has all its attribute slots taken, no room for watchbot's: the dead-letter reason is only in this log",
			"reason", reason, "attributes", len(m.SQSAttributes))
	}
	in := &sqs.SendMessageInput{
		QueueUrl:          aws.String(r.dlqURL),
		MessageBody:       aws.String(m.Raw),
		MessageAttributes: attrs,
	}
	if m.TraceHeader != "" {
		// The copy keeps X-Ray's context as it keeps the W3C attributes, so the trace goes on
		// when it is replayed.
		in.MessageSystemAttributes = map[string]types.MessageSystemAttributeValue{
			string(types.MessageSystemAttributeNameForSendsAWSTraceHeader): {DataType: aws.String("String"), StringValue: aws.String(m.TraceHeader)}}
	}
	if m.GroupID != "" {
		// On a standard dead-letter queue the group id is a fair queue's tenant ("Amazon SQS
		// fair queues", SQS Developer Guide): kept, so a replay keeps it too.
		in.MessageGroupId = aws.String(m.GroupID)
	}
	if strings.HasSuffix(r.dlqURL, ".fifo") {
		if m.GroupID == "" {
			in.MessageGroupId = aws.String("watchbot")
		}
		in.MessageDeduplicationId = aws.String(m.ID)
	}
	ctx, cancel := r.cut.bound(context.WithoutCancel(ctx), r.cfg.AckTimeout)
	defer cancel()
	if _, err := r.api.SendMessage(ctx, in); err != nil {
		return fmt.Errorf("send to dead-letter queue: %w", err)
	}
	return nil
}
