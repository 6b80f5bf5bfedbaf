package fakesqs

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// handlePrefix starts every receipt handle, as "AQEB" starts SQS's.
const handlePrefix = "AQEB"

// newHandle makes the receipt handle of one receive: opaque to callers, it names the queue,
// the message and the receive.
func newHandle(queueName string, msg, rcv uint64) string {
	return handlePrefix + base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "%s/%d/%d", queueName, msg, rcv))
}

// handleState is what a receipt handle refers to when it is used.
type handleState int

const (
	handleInvalid  handleState = iota // not a handle of this queue
	handleGone                        // its message was deleted, purged, expired or redriven
	handleStale                       // its message was received again since
	handleExpired                     // the latest receive, but its visibility timeout is over
	handleInFlight                    // the latest receive, in flight
)

// resolve finds the message a receipt handle names in q.
func (q *queue) resolve(handle string, now time.Time) (*message, handleState) {
	raw, ok := strings.CutPrefix(handle, handlePrefix)
	if !ok {
		return nil, handleInvalid
	}
	b, err := base64.StdEncoding.DecodeString(raw)
	if err != nil {
		return nil, handleInvalid
	}
	parts := strings.Split(string(b), "/")
	if len(parts) != 3 || parts[0] != q.name {
		return nil, handleInvalid
	}
	msg, err1 := strconv.ParseUint(parts[1], 10, 64)
	rcv, err2 := strconv.ParseUint(parts[2], 10, 64)
	if err1 != nil || err2 != nil {
		return nil, handleInvalid
	}
	m := q.bySerial[msg]
	switch {
	case m == nil:
		return nil, handleGone
	case m.rcv == nil || m.rcv.serial != rcv:
		return m, handleStale
	case !m.inFlight(now):
		return m, handleExpired
	}
	return m, handleInFlight
}

func invalidHandle(handle string) error {
	return errReceiptHandleIsInvalid.errorf("The input receipt handle \"%s\" is not a valid receipt handle.", handle)
}

// DeleteMessage deletes the message a receipt handle names. As the API reference says, a
// handle from an earlier receive of a message received again since succeeds without
// deleting it, and so does a handle of a message already deleted. The handle of the latest
// receive deletes the message even after its visibility timeout on a standard queue; on a
// FIFO queue that handle has expired and the call fails with InvalidParameterValue. A
// handle this queue never issued is ReceiptHandleIsInvalid.
func (s *Server) DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, _ ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	return onQueue(s, ctx, "DeleteMessage", in, func(in *sqs.DeleteMessageInput) *string { return in.QueueUrl }, func(q *queue, in *sqs.DeleteMessageInput) (*sqs.DeleteMessageOutput, error) {
		if in.ReceiptHandle == nil {
			return nil, missing("ReceiptHandle")
		}
		if err := q.delete(*in.ReceiptHandle, time.Now()); err != nil {
			return nil, err
		}
		return &sqs.DeleteMessageOutput{}, nil
	})
}

func (q *queue) delete(handle string, now time.Time) error {
	q.expire(now)
	m, state := q.resolve(handle, now)
	switch state {
	case handleInvalid:
		return invalidHandle(handle)
	case handleGone, handleStale:
		return nil
	case handleExpired:
		if q.fifo {
			return errInvalidParameterValue.errorf("Value %s for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired.", handle)
		}
	}
	q.remove(m)
	return nil
}

// DeleteMessageBatch deletes up to ten messages; each entry succeeds or fails as
// DeleteMessage would.
func (s *Server) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	return onQueue(s, ctx, "DeleteMessageBatch", in, func(in *sqs.DeleteMessageBatchInput) *string { return in.QueueUrl }, func(q *queue, in *sqs.DeleteMessageBatchInput) (*sqs.DeleteMessageBatchOutput, error) {
		now := time.Now()
		ok, failed, err := eachEntry(in.Entries, func(e types.DeleteMessageBatchRequestEntry) *string { return e.Id },
			func(e types.DeleteMessageBatchRequestEntry) (types.DeleteMessageBatchResultEntry, error) {
				if e.ReceiptHandle == nil {
					return types.DeleteMessageBatchResultEntry{}, missing("ReceiptHandle")
				}
				return types.DeleteMessageBatchResultEntry{Id: e.Id}, q.delete(*e.ReceiptHandle, now)
			})
		if err != nil {
			return nil, err
		}
		return &sqs.DeleteMessageBatchOutput{Successful: ok, Failed: failed}, nil
	})
}

// ChangeMessageVisibility sets the remaining visibility timeout of a message in flight to
// VisibilityTimeout seconds (0 to 43200) from now. A message whose total time in flight
// since the receive would pass 12 hours (or the Server's InFlightLimit) is refused ("ChangeMessageVisibility" API
// reference), as is a message no longer in flight (MessageNotInflight) and a handle from an
// earlier receive or of a deleted message (InvalidParameterValue, SQS's answer for a receipt
// handle that no longer names an available message).
func (s *Server) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	return onQueue(s, ctx, "ChangeMessageVisibility", in, func(in *sqs.ChangeMessageVisibilityInput) *string { return in.QueueUrl }, func(q *queue, in *sqs.ChangeMessageVisibilityInput) (*sqs.ChangeMessageVisibilityOutput, error) {
		if in.ReceiptHandle == nil {
			return nil, missing("ReceiptHandle")
		}
		if err := q.changeVisibility(*in.ReceiptHandle, in.VisibilityTimeout, time.Now()); err != nil {
			return nil, err
		}
		return &sqs.ChangeMessageVisibilityOutput{}, nil
	})
}

func (q *queue) changeVisibility(handle string, seconds int32, now time.Time) error {
	if seconds < 0 || seconds > maxVisibility {
		return errInvalidParameterValue.errorf("Value %d for parameter VisibilityTimeout is invalid. Reason: Must be between 0 and %d.", seconds, maxVisibility)
	}
	q.expire(now)
	m, state := q.resolve(handle, now)
	switch state {
	case handleInvalid:
		return invalidHandle(handle)
	case handleGone, handleStale:
		return errInvalidParameterValue.errorf("Value %s for parameter ReceiptHandle is invalid. Reason: Message does not exist or is not available for visibility timeout change.", handle)
	case handleExpired:
		return errMessageNotInflight.errorf("The message referred to isn't in flight.")
	}
	until := now.Add(time.Duration(seconds) * time.Second)
	if until.Sub(m.rcv.at) > q.inFlight {
		return errInvalidParameterValue.errorf("Value %d for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout for the message is beyond the limit [%d seconds]", seconds, int(q.inFlight/time.Second))
	}
	m.visibleAt = until
	m.rcv.modified = true
	q.notify() // released early, the message (and its FIFO group) may be ready now
	return nil
}

// ChangeMessageVisibilityBatch changes the visibility of up to ten messages; each entry
// succeeds or fails as ChangeMessageVisibility would.
func (s *Server) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	return onQueue(s, ctx, "ChangeMessageVisibilityBatch", in, func(in *sqs.ChangeMessageVisibilityBatchInput) *string { return in.QueueUrl }, func(q *queue, in *sqs.ChangeMessageVisibilityBatchInput) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
		now := time.Now()
		ok, failed, err := eachEntry(in.Entries, func(e types.ChangeMessageVisibilityBatchRequestEntry) *string { return e.Id },
			func(e types.ChangeMessageVisibilityBatchRequestEntry) (types.ChangeMessageVisibilityBatchResultEntry, error) {
				if e.ReceiptHandle == nil {
					return types.ChangeMessageVisibilityBatchResultEntry{}, missing("ReceiptHandle")
				}
				return types.ChangeMessageVisibilityBatchResultEntry{Id: e.Id}, q.changeVisibility(*e.ReceiptHandle, e.VisibilityTimeout, now)
			})
		if err != nil {
			return nil, err
		}
		return &sqs.ChangeMessageVisibilityBatchOutput{Successful: ok, Failed: failed}, nil
	})
}
