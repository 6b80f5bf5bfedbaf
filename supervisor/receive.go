package supervisor

import (
	"context"
	"crypto/rand"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/backoff"
	"github.com/watchbot/watchbot/internal/sqsspec"
)

// receiveAsk asks the receive loop for up to n messages, long-polling at most wait.
type receiveAsk struct {
	n    int
	wait time.Duration
}

// fifoBusyPoll caps the long poll on a FIFO queue while watchbot holds messages: their
// deletes will unlock groups, and nothing says a long poll under way wakes for a group
// unlocked (rather than for a message sent), so a full 20 s poll could leave slots idle.
const fifoBusyPoll = 2 * time.Second

// receiveBackoff spaces receive retries: 500 ms doubling to 30 s, jittered.
var receiveBackoff = backoff.Exponential{Base: 500 * time.Millisecond, Max: 30 * time.Second, Jitter: backoff.Equal}

// attemptIDLife is how long a ReceiveRequestAttemptId is reused for the retries of one
// receive: SQS honours one for 5 minutes after the first call ("ReceiveMessage" in the SQS
// API reference); the margin keeps a late retry from counting on it.
const attemptIDLife = 4 * time.Minute

// receiveLoop receives whenever the loop asks, and hands over what it got: exactly one answer
// per ask, nil when the stop request or the end of the drain ended it. It is the only code that
// calls ReceiveMessage. Receives run on s.recvCtx, which a stop cancels when nothing is held,
// so an idle watchbot exits at once instead of waiting out its long poll. SQS may still hand a
// message to the poll it was waiting on after the connection closed: that message is out of
// reach for --receive-visibility (not the whole lease), and its receive count has grown by
// one. While messages are held the poll is left to finish, since they are handed back when
// the stop begins and the abandoned poll could take them.
//
// A failed receive is retried with backoff, logged at most every 30 s. On a FIFO queue every
// receive carries a fresh ReceiveRequestAttemptId, reused by its retries (the SDK's and these)
// while SQS honours it, so a receive whose answer was lost gets the same messages back instead
// of leaving them, and their groups, locked for the visibility timeout.
func (s *Supervisor) receiveLoop(stop context.Context, asks <-chan receiveAsk, answers chan<- []types.Message) {
	failures := 0
	var lastErrLog time.Time
	for ask := range asks {
		attemptID, firstTry := s.newAttemptID(), time.Now()
		var msgs []types.Message
		for {
			var err error
			s.health.receiveStarted(time.Now())
			msgs, err = s.receive(s.recvCtx, ask, attemptID)
			s.health.receiveEnded(time.Now(), err)
			if err == nil {
				if failures > 0 {
					s.log.Info("receive recovered", "after_failures", failures)
					failures = 0
				}
				break
			}
			if s.recvCtx.Err() != nil {
				break
			}
			failures++
			delay := receiveBackoff.Delay(failures, s.random)
			if failures == 1 || time.Since(lastErrLog) > 30*time.Second {
				s.log.Error("receive failed; backing off", "error", err, "consecutive_failures", failures, "retry_in", delay.Round(time.Millisecond).String())
				lastErrLog = time.Now()
			}
			if !sleep(stop, delay) {
				if attemptID != "" {
					// Stopping: one more try brings back what a lost answer took, to release it.
					// SQS answers a retried attempt id from what it kept, so it need not wait:
					// a long poll would hold the stop up when there was nothing.
					last := ask
					last.wait = 0
					msgs, _ = s.receive(s.pollCtx, last, attemptID)
				}
				break
			}
			if time.Since(firstTry) > attemptIDLife {
				attemptID, firstTry = s.newAttemptID(), time.Now()
			}
		}
		answers <- msgs
	}
}

// receive takes up to ask.n messages with a long poll of ask.wait.
func (s *Supervisor) receive(ctx context.Context, ask receiveAsk, attemptID string) ([]types.Message, error) {
	in := &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(s.cfg.QueueURL),
		MaxNumberOfMessages:         int32(ask.n),
		WaitTimeSeconds:             int32(ask.wait / time.Second),
		VisibilityTimeout:           sqsspec.Seconds(s.cfg.receiveVisibility()),
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		MessageAttributeNames:       []string{"All"},
	}
	if attemptID != "" {
		in.ReceiveRequestAttemptId = aws.String(attemptID)
	}
	out, err := s.api.ReceiveMessage(ctx, in)
	if err != nil {
		return nil, err
	}
	return out.Messages, nil
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
