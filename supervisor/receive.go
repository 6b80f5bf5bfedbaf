package supervisor

import (
	"context"
	"crypto/rand"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/backoff"
	"github.com/watchbot/watchbot/internal/sqsspec"
)

// receiveAsk asks the receive loop for up to n messages, long-polling at most wait; at is
// when the loop asked.
type receiveAsk struct {
	n    int
	wait time.Duration
	at   time.Time
}

// receiveAnswer is the receive loop's answer to an ask: what it received, and whether its
// poller's receives were retried or failed within quickLeaseFor (troubled).
type receiveAnswer struct {
	ask      receiveAsk
	msgs     []types.Message
	troubled bool
}

// fifoBusyPoll caps the long poll on a FIFO queue while watchbot holds messages: their
// deletes will unlock groups, and nothing says a long poll under way wakes for a group
// unlocked (rather than for a message sent), so a full 20 s poll could leave slots idle.
const fifoBusyPoll = 2 * time.Second

// receiveBackoff spaces receive retries: 500 ms doubling to 30 s, jittered.
var receiveBackoff = backoff.Exponential{Base: 500 * time.Millisecond, Max: 30 * time.Second, Jitter: backoff.Equal}

// While receives are failing, a lost receive answer is likely, and on a standard queue
// nothing brings its messages back before their lease ends. So for quickLeaseFor after a
// receive had to be retried (an attempt failed, whatever the SDK's retries made of it) or
// failed, receives on a standard queue take a lease of quickLease instead of
// --receive-visibility, and what they bring is extended to the receive lease before any of it
// is held; a message whose extension does not succeed within quickExtendTimeout is left to
// come back when its quick lease ends. A lost answer then keeps its messages out of reach for
// 3 s instead of --receive-visibility, for one ChangeMessageVisibilityBatch per receive that
// brings messages. Healthy receives pay nothing. (FIFO queues get lost answers back through
// ReceiveRequestAttemptId.)
const (
	quickLease         = 3 * time.Second
	quickExtendTimeout = time.Second
	quickLeaseFor      = time.Minute
)

// attemptIDLife is how long a ReceiveRequestAttemptId is reused for the retries of one
// receive: SQS honours one for 5 minutes after the first call ("ReceiveMessage" in the SQS
// API reference); the margin keeps a late retry from counting on it.
const attemptIDLife = 4 * time.Minute

// receiveLoop is poller number poll of the receive loop, one of maxPolls that take the
// loop's asks: it receives whenever asked, and hands over what it got: exactly one answer
// per ask, nil when the stop request or the end of the drain ended it. The pollers are the
// only code that calls ReceiveMessage. A stop leaves the receive under way to answer, within its wait: SQS
// may hand a message to a poll after its connection closed, and that message would be out of
// every consumer's reach for --receive-visibility, its receive count grown by one. What the
// last poll brings joins the drain, and no receive starts after the stop request. Receives
// run on receives, which only a second stop request ends at once; a poll that has not
// answered receiveSlack past its wait is given up.
//
// A failed receive is retried with backoff, logged at most every 30 s. On a FIFO queue every
// receive carries a fresh ReceiveRequestAttemptId, reused by its retries (the SDK's and these)
// while SQS honours it, so a receive whose answer was lost gets the same messages back instead
// of leaving them, and their groups, locked for the visibility timeout.
// The calls a receive makes while stopping run on polls, which ends when the drain gives up.
func (s *Supervisor) receiveLoop(poll int, stop, polls, receives context.Context, asks <-chan receiveAsk, answers chan<- receiveAnswer) {
	ends := &s.pollEnds[poll]
	for ask := range asks {
		msgs := s.receiveAsked(stop, polls, receives, ask, ends)
		answers <- receiveAnswer{ask: ask, msgs: msgs, troubled: time.Now().Before(s.tries.quick())}
	}
}

// receiveTries is what the pollers keep from one ask to the next, together: failing
// receives are the queue's, whichever poller meets them. mu guards it, held only to read or
// change it.
type receiveTries struct {
	mu                     sync.Mutex
	failures               int
	lastErrLog, quickUntil time.Time
}

// succeeded records a receive that succeeded, and returns how many failed in a row before it.
func (st *receiveTries) succeeded() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	n := st.failures
	st.failures = 0
	return n
}

// failed records a failed receive at now, and returns how many failed in a row and whether
// to log it: the first, then at most every 30 s.
func (st *receiveTries) failed(now time.Time) (failures int, logIt bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.failures++
	logIt = st.failures == 1 || now.Sub(st.lastErrLog) > 30*time.Second
	if logIt {
		st.lastErrLog = now
	}
	return st.failures, logIt
}

// quick returns when the quick leases end (see quickLease).
func (st *receiveTries) quick() time.Time {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.quickUntil
}

// troubled records a receive that was retried or failed at now: quick leases for
// quickLeaseFor.
func (st *receiveTries) troubled(now time.Time) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.quickUntil = now.Add(quickLeaseFor)
}

// receiveAsked answers one ask: it receives, retrying with backoff until a receive succeeds
// or the stop request comes. An ask that comes after the stop request receives nothing.
// ends is the poller's pollEnds.
func (s *Supervisor) receiveAsked(stop, polls, receives context.Context, ask receiveAsk, ends *atomic.Int64) []types.Message {
	attemptID, firstTry := s.newAttemptID(), time.Now()
	for first := true; ; first = false {
		// Recorded before the stop request is looked at: a stop that finds no poll under
		// way knows that none starts after it.
		ends.Store(time.Now().Add(ask.wait + receiveSlack).UnixNano())
		if first && stop.Err() != nil {
			ends.Store(0)
			return nil
		}
		msgs, err := s.receiveTry(stop, polls, receives, ask, attemptID)
		ends.Store(0)
		if err == nil {
			if n := s.tries.succeeded(); n > 0 {
				s.log.Info("receive recovered", "after_failures", n)
			}
			return msgs
		}
		if receives.Err() != nil {
			return nil
		}
		failures, logIt := s.tries.failed(time.Now())
		delay := receiveBackoff.Delay(failures, s.random)
		if logIt {
			s.log.Error("receive failed; backing off", "error", err, "consecutive_failures", failures, "retry_in", delay.Round(time.Millisecond).String())
		}
		if !sleep(stop, delay) {
			if attemptID == "" {
				return nil
			}
			// Stopping: one more try brings back what a lost answer took, to release it.
			// SQS answers a retried attempt id from what it kept, so it need not wait: a
			// long poll would hold the stop up when there was nothing.
			last := ask
			last.wait = 0
			msgs, _, _ = s.receive(polls, last, attemptID, 0)
			return msgs
		}
		if time.Since(firstTry) > attemptIDLife {
			attemptID, firstTry = s.newAttemptID(), time.Now()
		}
	}
}

// receiveTry makes one receive (the SDK's retries included) and measures it; while receives
// are failing it takes quick leases (see quickLease). Once the stop request comes, the call
// has until receiveSlack past its wait to answer.
func (s *Supervisor) receiveTry(stop, polls, receives context.Context, ask receiveAsk, attemptID string) ([]types.Message, error) {
	quick := s.quickLease(s.tries.quick(), time.Now())
	sent := time.Now()
	call, cancel := context.WithCancel(receives)
	defer cancel()
	unhook := context.AfterFunc(stop, func() {
		bound := time.AfterFunc(time.Until(sent.Add(ask.wait+receiveSlack)), cancel)
		context.AfterFunc(call, func() { bound.Stop() })
	})
	defer unhook()
	token := s.health.receiveStarted(sent)
	msgs, retried, err := s.receive(call, ask, attemptID, quick)
	took := time.Since(sent)
	s.health.receiveEnded(token, time.Now(), err)
	s.metrics.Add(alarms.ReceiveDuration, took.Seconds())
	if retried || err != nil {
		s.metrics.Add(alarms.RetriedReceiveDuration, took.Seconds())
	}
	// Checked first, so that at other levels no receive builds the line's attributes.
	if s.log.Enabled(stop, slog.LevelDebug) {
		s.log.Debug("receive", "asked", ask.n, "got", len(msgs), "took_ms", took.Milliseconds(),
			"retried", retried, "failed", err != nil, "short_lease", quick > 0)
	}
	if (retried || err != nil) && receives.Err() == nil {
		s.tries.troubled(time.Now())
	}
	if err == nil && quick > 0 && len(msgs) > 0 {
		msgs = s.extendQuick(polls, msgs)
	}
	return msgs, err
}

// receiveSlack is how long past its wait a long poll under way at a stop may take to answer
// (the network, SQS's own delay) before it is given up.
const receiveSlack = 2 * time.Second

// pollUnderWay returns by when the receives under way must have answered; zero when none is.
func (s *Supervisor) pollUnderWay() time.Time {
	var last int64
	for i := range s.pollEnds {
		last = max(last, s.pollEnds[i].Load())
	}
	if last != 0 {
		return time.Unix(0, last)
	}
	return time.Time{}
}

// receive takes up to ask.n messages with a long poll of ask.wait, leased for lease, or
// --receive-visibility when lease is 0. It reports whether the SDK had to retry the call.
func (s *Supervisor) receive(ctx context.Context, ask receiveAsk, attemptID string, lease time.Duration) ([]types.Message, bool, error) {
	if lease == 0 {
		lease = s.cfg.receiveVisibility()
	}
	in := &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(s.cfg.QueueURL),
		MaxNumberOfMessages:         int32(ask.n),
		WaitTimeSeconds:             int32(ask.wait / time.Second),
		VisibilityTimeout:           sqsspec.Seconds(lease),
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		MessageAttributeNames:       []string{"All"},
	}
	if attemptID != "" {
		in.ReceiveRequestAttemptId = aws.String(attemptID)
	}
	out, err := s.api.ReceiveMessage(ctx, in)
	if err != nil {
		return nil, false, err
	}
	attempts, _ := retry.GetAttemptResults(out.ResultMetadata)
	return out.Messages, len(attempts.Results) > 1, nil
}

// quickLease returns the lease a receive takes now, given when the quick leases end: 0 for
// --receive-visibility, or quickLease (see there). Not when the extension would ask for more
// than SQS's longest visibility timeout, which it refuses: every message would go back.
func (s *Supervisor) quickLease(until, now time.Time) time.Duration {
	rv := s.cfg.receiveVisibility()
	if s.fifo || !now.Before(until) || rv <= quickLease || rv+quickExtendTimeout > sqsspec.MaxInFlight {
		return 0
	}
	return quickLease
}

// quickExtendRetries spaces the extension's retries by at most quickExtendBackoff, throttling
// included (the retryer's own waits after a throttle, 250 ms and up, leave room for one retry
// in quickExtendTimeout at most).
func quickExtendRetries(o *sqs.Options) {
	o.Retryer = retry.AddWithMaxBackoffDelay(o.Retryer, quickExtendBackoff)
}

const quickExtendBackoff = 100 * time.Millisecond

// extendQuick extends the quick lease of received messages before any of them is held, and
// returns those it extended. It asks for --receive-visibility plus quickExtendTimeout: SQS
// starts the new lease when it applies the change, somewhere between the call going out and
// its answer, at most quickExtendTimeout apart, and the leaser counts --receive-visibility
// from when the messages reach it, just after the answer. So the leaser's count does not run
// past SQS's for the time the extension took (what is left is the loop's hand-over, as for any
// receive, well inside the heartbeat's 2 s margin). The rest come back when their quick lease
// ends.
func (s *Supervisor) extendQuick(polls context.Context, msgs []types.Message) (kept []types.Message) {
	defer func(start time.Time) {
		took := time.Since(start)
		s.metrics.Add(alarms.LeaseExtensionDuration, took.Seconds())
		s.log.Debug("short lease extension", "messages", len(msgs), "extended", len(kept), "took_ms", took.Milliseconds())
	}(time.Now())
	ctx, cancel := context.WithTimeout(polls, quickExtendTimeout)
	defer cancel()
	entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(msgs))
	for i, m := range msgs {
		entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{Id: sqsspec.EntryID(i), ReceiptHandle: m.ReceiptHandle,
			VisibilityTimeout: sqsspec.Seconds(s.cfg.receiveVisibility() + quickExtendTimeout)}
	}
	out, err := s.api.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(s.cfg.QueueURL), Entries: entries},
		quickExtendRetries)
	if err != nil {
		s.log.Warn("could not extend the short lease of received messages; they are received again when it ends",
			"messages", len(msgs), "lease", quickLease.String(), "error", err)
		return nil
	}
	kept = make([]types.Message, 0, len(msgs))
	for _, e := range out.Successful {
		if i, ok := sqsspec.EntryIndex(e.Id, len(msgs)); ok {
			kept = append(kept, msgs[i])
		}
	}
	if len(kept) < len(msgs) {
		s.log.Warn("could not extend the short lease of some received messages; they are received again when it ends",
			"messages", len(msgs)-len(kept), "lease", quickLease.String())
	}
	return kept
}

// newAttemptID returns a fresh ReceiveRequestAttemptId on a FIFO queue, "" elsewhere (the
// parameter applies only to FIFO queues).
func (s *Supervisor) newAttemptID() string {
	if !s.fifo {
		return ""
	}
	return rand.Text()
}

// sleep waits for d, or less when ctx ends first; it reports whether it slept the whole d.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
