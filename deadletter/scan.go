package deadletter

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/internal/sqsspec"
)

// A scanner walks a DLQ once. SQS offers no way to look at a message without receiving it, so
// every message is received with a visibility timeout (the hold) and either deleted or kept.
// Kept messages stay invisible while the walk goes on, so that later receives reach the rest of
// the queue instead of returning the same messages again, and are all made visible again
// (visibility 0) when the walk ends, including when it fails or is cancelled. Message ids are
// tracked, so a message whose hold ran out during a long walk is not handled twice.
type scanner struct {
	api  API
	url  string
	hold time.Duration
	// kept maps the ids of kept messages to their latest receipt handles.
	kept map[string]string
	seen map[string]bool
	// stale counts consecutive receives that brought nothing new.
	stale int
}

// receiveTimeout bounds one receive of a walk, its one-second poll and the SDK's retries.
const receiveTimeout = 30 * time.Second

// maxStaleReceives ends a walk whose receives only bring back messages it has already handled
// (their hold ran out): the queue holds nothing new for it.
const maxStaleReceives = 3

func newScanner(api API, url string, hold time.Duration) *scanner {
	return &scanner{api: api, url: url, hold: hold, kept: map[string]string{}, seen: map[string]bool{}}
}

// next receives up to limit (1..10) messages not handled before. It returns none when the walk is
// over: the DLQ returned nothing (it is drained, for this walk) or only old messages, repeatedly.
//
// A receive is never cancelled halfway: SQS may already have handed messages to a cancelled
// poll, and they would stay in flight, out of reach, for the hold. When ctx is done, the answer
// is kept (made visible again by release) and next returns ctx's error.
func (s *scanner) next(ctx context.Context, limit int) ([]Message, error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), receiveTimeout)
		out, err := s.api.ReceiveMessage(rctx, &sqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(s.url),
			MaxNumberOfMessages:         int32(min(max(limit, 1), sqsspec.MaxReceive)),
			WaitTimeSeconds:             1, // a long poll asks every SQS server, so "nothing" means empty
			VisibilityTimeout:           sqsspec.Seconds(s.hold),
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
			MessageAttributeNames:       []string{"All"},
		})
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("receive from %s: %w", s.url, err)
		}
		if ctx.Err() != nil {
			for _, raw := range out.Messages {
				s.keep(messageFrom(raw))
			}
			return nil, ctx.Err()
		}
		if len(out.Messages) == 0 {
			return nil, nil
		}
		var fresh []Message
		for _, raw := range out.Messages {
			m := messageFrom(raw)
			if s.seen[m.ID] {
				if _, kept := s.kept[m.ID]; kept {
					s.kept[m.ID] = m.receipt // only the newest receipt handle can release it
				}
				continue
			}
			s.seen[m.ID] = true
			fresh = append(fresh, m)
		}
		if len(fresh) > 0 {
			s.stale = 0
			return fresh, nil
		}
		s.stale++
		if s.stale >= maxStaleReceives {
			return nil, nil
		}
	}
}

// upTo is how many messages a walk receives next when limit (0: no limit) leaves limit-done
// to handle: no more than it can handle, so nothing is held for no reason.
func upTo(limit, done int) int {
	if limit == 0 {
		return sqsspec.MaxReceive
	}
	return min(sqsspec.MaxReceive, limit-done)
}

// keep leaves m in the DLQ; it becomes visible again when the walk ends.
func (s *scanner) keep(m Message) { s.kept[m.ID] = m.receipt }

// release makes every kept message visible again. It runs with a context detached from the
// walk's, so that a cancelled walk still gives its messages back at once.
func (s *scanner) release(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	receipts := slices.Collect(maps.Values(s.kept))
	clear(s.kept)
	errs := sqsspec.InBatches(len(receipts), func(from, to int) ([]types.BatchResultErrorEntry, error) {
		entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, to-from)
		for i, r := range receipts[from:to] {
			entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{Id: sqsspec.EntryID(i), ReceiptHandle: aws.String(r)}
		}
		out, err := s.api.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(s.url), Entries: entries})
		if err != nil {
			return nil, err
		}
		return out.Failed, nil
	})
	failed := 0
	var first error
	for _, err := range errs {
		if err != nil {
			failed++
			first = cmp.Or(first, err)
		}
	}
	if failed > 0 {
		return fmt.Errorf("make %d messages visible again (they stay in the DLQ and reappear within %v): %w", failed, s.hold, first)
	}
	return nil
}

// deleteMessages deletes msgs from the DLQ and returns those that could not be deleted, with
// the reason.
func deleteMessages(ctx context.Context, api API, url string, msgs []Message) map[string]error {
	errs := sqsspec.InBatches(len(msgs), func(from, to int) ([]types.BatchResultErrorEntry, error) {
		entries := make([]types.DeleteMessageBatchRequestEntry, to-from)
		for i, m := range msgs[from:to] {
			entries[i] = types.DeleteMessageBatchRequestEntry{Id: sqsspec.EntryID(i), ReceiptHandle: aws.String(m.receipt)}
		}
		out, err := api.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
		if err != nil {
			return nil, err
		}
		return out.Failed, nil
	})
	failed := map[string]error{}
	for i, err := range errs {
		if err != nil {
			failed[msgs[i].ID] = err
		}
	}
	return failed
}
