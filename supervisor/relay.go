package supervisor

// Relays: a job that runs past SQS's in-flight limit keeps its message with --dedupe-table.
// SQS hides a received message for at most its in-flight limit (12 h) from that receive, so
// the owner's last renewal takes the message to the limit, and the message then comes back.
// Whoever receives it (the owner's own loop included) finds the key held by a live run of
// the same message: it hands the new receipt to the owner through the claim
// (dedupe.Store.Relay) and hides the message until the owner's lease would lapse, running
// nothing; a live owner renews it long before, a dead one lets it come back. The
// owner takes the newest receipt with its next extension of the claim, renews it, and
// finally deletes the message, or hands it back at a drain, with it. When nobody receives the
// message in time, the owner completes the key and a later receive deletes the message
// unrun; when the owner dies, its claim lapses and the next receive runs the job again. A
// running job whose lease is lost before the limit waits for a relay the same way
// (leaser.waitForRelay): its claim, not its lease, keeps other runs off the key.

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/aws/smithy-go"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/dedupe"
)

// relay hands the delivery of j, whose key c says a live run of the same message holds, to
// that run through the table, and reports whether it did. When it did not (the holder's
// lease lapsed or its claim ended since the claim's read, or the table failed), the delivery
// is decided as any message whose key is held.
func (d *deduper) relay(ctx context.Context, j *job, key string, c dedupe.Claim) bool {
	dl := j.delivery()
	callCtx, cancel := d.cut.bound(ctx, dedupeCallTimeout)
	n, err := d.api.Relay(callCtx, key, c.Owner, j.msg.ID, dl.receipt, dl.receivedAt)
	cancel()
	switch {
	case errors.Is(err, dedupe.ErrLost):
		return false
	case err != nil:
		d.failed(j.log, "could not relay the message to the run that holds its job: it is retried as a held key's", err, "dedupe_key", key, "owner", c.Owner)
		return false
	}
	d.metrics.Add(alarms.Relays, 1)
	j.log.Info("message relayed: delivered again while another run holds its job past SQS's in-flight limit; hidden again and its receipt handed to that run, unrun",
		"owner", c.Owner, "receive_count", j.msg.Attempt, "relays", n, "dedupe_key", key)
	return true
}

// holds reports whether j holds its key's claim, which a relay needs; false when duplicate
// suppression is off.
func (d *deduper) holds(j *job) bool {
	if d == nil {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.claims[j]
	return c != nil && !c.unsure
}

// takeRelay gives j the receipt of the newest relay r, read from its claim, when it is newer
// than the delivery j holds, and reports whether it did.
func (d *deduper) takeRelay(j *job, r dedupe.Relayed) bool {
	if r.Count == 0 || !j.relayed(r.Receipt, r.ReceivedAt, d.receiveLease) {
		return false
	}
	j.log.Info("took a relayed receipt: the message was delivered again and hidden by another run, and this job renews and settles it with the new receipt",
		"relays", r.Count, "relay_received_at", r.ReceivedAt.UTC().Format(time.RFC3339Nano))
	return true
}

// relayed gives the job the receipt of a relay received at receivedAt, leased at least for
// lease from then, when that receive is newer than the delivery the job holds and the job has
// not begun to settle; its lease is renewed at once. It reports whether it did.
func (j *job) relayed(receipt string, receivedAt time.Time, lease time.Duration) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.settled || receipt == "" || receipt == j.receipt || !receivedAt.After(j.receivedAt) {
		return false
	}
	j.receipt, j.receivedAt, j.leaseUntil, j.atLimit = receipt, receivedAt, receivedAt.Add(lease), false
	j.renewBy(time.Now())
	return true
}

// waitRelay marks the job's delivery at SQS's in-flight limit: no renewal can extend it, and
// the job goes on until a relay (or a new delivery to this loop) gives it a new receipt.
func (j *job) waitRelay() {
	j.mu.Lock()
	j.atLimit = true
	j.mu.Unlock()
}

// reachedLimit reports whether the job's delivery is at SQS's in-flight limit (limit) at now,
// and marks it so: a new delivery of its message to this loop then is a relay. The loop may
// receive the message the moment it comes back, before the heartbeat has found it there.
func (j *job) reachedLimit(now time.Time, limit time.Duration) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.settled && now.Sub(j.receivedAt) >= limit-relayMargin {
		j.atLimit = true
	}
	return j.atLimit
}

// waitsRelay reports whether the job's delivery is at SQS's in-flight limit.
func (j *job) waitsRelay() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.atLimit
}

// beyondLimit reports SQS's refusal of a visibility change past the in-flight limit: an
// InvalidParameterValue, which SQS also answers for a stale receipt, told apart by its message
// ("Total VisibilityTimeout for the message is beyond the limit"), as SQS has no code of its
// own for it.
func beyondLimit(err error) bool {
	var api smithy.APIError
	return errors.As(err, &api) && api.ErrorCode() == "InvalidParameterValue" && strings.Contains(api.ErrorMessage(), "beyond the limit")
}

// relayMargin is how far short of SQS's in-flight limit the last renewal stops: SQS counts
// from its receive, a little before watchbot's clock does.
const relayMargin = time.Second

// extendWaiting extends the claims of jobs waiting at the in-flight limit for a relay, which no
// renewal round does, in a goroutine the heartbeat waits for at its end.
func (l *leaser) extendWaiting(waiting []*job) {
	if len(waiting) == 0 {
		return
	}
	l.extending.Go(func() { l.extended(l.dedupe.extend(waiting)) })
}

// extended applies what an extension of claims found: the jobs whose claim is lost stop, and
// those that took a relay's receipt are renewed at once.
func (l *leaser) extended(lost, relayed []*job) {
	for _, j := range lost {
		l.stop(j, errLeaseLost)
	}
	if len(relayed) > 0 {
		select {
		case l.added <- struct{}{}:
		default:
		}
	}
}
