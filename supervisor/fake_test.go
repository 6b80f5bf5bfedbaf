package supervisor

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/watchbot/watchbot/internal/sqsspec"
)

// fakeQueue is a small in-memory SQS queue that behaves like one for what the supervisor
// does: receipt handles, visibility deadlines, receive counts, deletes. Time is time.Now, so
// it follows testing/synctest's fake clock.
type fakeQueue struct {
	mu       sync.Mutex
	msgs     map[string]*fakeMsg // by id
	handles  map[string]string   // receipt handle -> id (only the latest handle is valid)
	seq      int
	calls    map[string]int
	failNext map[string]error // operation -> error returned once
	stall    map[string]bool  // operation -> its next call hangs until its context ends
	down     bool             // every call fails as if SQS could not be reached
}

type fakeMsg struct {
	id, body     string
	visibleAt    time.Time
	receives     int
	handle       string
	deleted      bool
	lastVisCalls []int32
}

func newFakeQueue() *fakeQueue {
	return &fakeQueue{msgs: map[string]*fakeMsg{}, handles: map[string]string{}, calls: map[string]int{}, failNext: map[string]error{}, stall: map[string]bool{}}
}

var _ sqsAPI = (*fakeQueue)(nil)

func (q *fakeQueue) add(id, body string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.msgs[id] = &fakeMsg{id: id, body: body}
}

// receive takes one visible message as the supervisor would, returning it and its handle.
func (q *fakeQueue) receive(visibility time.Duration) (types.Message, bool) {
	out, _ := q.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{MaxNumberOfMessages: 1, VisibilityTimeout: sqsspec.Seconds(visibility)})
	if len(out.Messages) == 0 {
		return types.Message{}, false
	}
	return out.Messages[0], true
}

func (q *fakeQueue) visible(id string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	m := q.msgs[id]
	return m != nil && !m.deleted && !time.Now().Before(m.visibleAt)
}

func (q *fakeQueue) count(op string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.calls[op]
}

func (q *fakeQueue) setDown(down bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.down = down
}

// stallNext makes op's next call hang, as on an endpoint that stopped answering, until the
// call's context ends.
func (q *fakeQueue) stallNext(op string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.stall[op] = true
}

// stalled reports whether op's call must hang, and clears it.
func (q *fakeQueue) stalled(op string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.stall[op]
	delete(q.stall, op)
	return s
}

func (q *fakeQueue) fail(op string) error {
	q.calls[op]++
	if q.down {
		return fmt.Errorf("fakeQueue: %s: connection refused", op)
	}
	if err, ok := q.failNext[op]; ok {
		delete(q.failNext, op)
		return err
	}
	return nil
}

func (q *fakeQueue) ReceiveMessage(_ context.Context, in *sqs.ReceiveMessageInput, _ ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.fail("ReceiveMessage"); err != nil {
		return nil, err
	}
	out := &sqs.ReceiveMessageOutput{}
	now := time.Now()
	for _, m := range q.msgs {
		if len(out.Messages) >= int(in.MaxNumberOfMessages) {
			break
		}
		if m.deleted || now.Before(m.visibleAt) {
			continue
		}
		q.seq++
		m.receives++
		m.handle = "rh-" + strconv.Itoa(q.seq)
		m.visibleAt = now.Add(time.Duration(in.VisibilityTimeout) * time.Second)
		q.handles[m.handle] = m.id
		out.Messages = append(out.Messages, types.Message{MessageId: aws.String(m.id), ReceiptHandle: aws.String(m.handle),
			Body: aws.String(m.body), Attributes: map[string]string{"ApproximateReceiveCount": strconv.Itoa(m.receives)}})
	}
	return out, nil
}

// lookup returns the message a handle holds, or the error SQS gives for a stale handle.
func (q *fakeQueue) lookup(handle string) (*fakeMsg, error) {
	id, ok := q.handles[handle]
	m := q.msgs[id]
	if !ok || m == nil || m.handle != handle || m.deleted {
		return nil, &types.ReceiptHandleIsInvalid{Message: aws.String("stale receipt handle " + handle)}
	}
	return m, nil
}

func (q *fakeQueue) DeleteMessage(_ context.Context, in *sqs.DeleteMessageInput, _ ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.fail("DeleteMessage"); err != nil {
		return nil, err
	}
	m, err := q.lookup(aws.ToString(in.ReceiptHandle))
	if err != nil {
		return nil, err
	}
	m.deleted = true
	return &sqs.DeleteMessageOutput{}, nil
}

func (q *fakeQueue) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	q.mu.Lock()
	q.calls["DeleteMessageBatch"]++
	q.mu.Unlock()
	out := &sqs.DeleteMessageBatchOutput{}
	for _, e := range in.Entries {
		if _, err := q.DeleteMessage(ctx, &sqs.DeleteMessageInput{ReceiptHandle: e.ReceiptHandle}); err != nil {
			out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String(errorCode(err)), Message: aws.String(err.Error()), SenderFault: true})
		} else {
			out.Successful = append(out.Successful, types.DeleteMessageBatchResultEntry{Id: e.Id})
		}
	}
	return out, nil
}

func (q *fakeQueue) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	if q.stalled("ChangeMessageVisibility") {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.fail("ChangeMessageVisibility"); err != nil {
		return nil, err
	}
	m, err := q.lookup(aws.ToString(in.ReceiptHandle))
	if err != nil {
		return nil, err
	}
	m.visibleAt = time.Now().Add(time.Duration(in.VisibilityTimeout) * time.Second)
	m.lastVisCalls = append(m.lastVisCalls, in.VisibilityTimeout)
	return &sqs.ChangeMessageVisibilityOutput{}, nil
}

func (q *fakeQueue) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	q.mu.Lock()
	q.calls["ChangeMessageVisibilityBatch"]++
	q.mu.Unlock()
	out := &sqs.ChangeMessageVisibilityBatchOutput{}
	for _, e := range in.Entries {
		if _, err := q.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{ReceiptHandle: e.ReceiptHandle, VisibilityTimeout: e.VisibilityTimeout}); err != nil {
			out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String(errorCode(err)), Message: aws.String(err.Error()), SenderFault: true})
		} else {
			out.Successful = append(out.Successful, types.ChangeMessageVisibilityBatchResultEntry{Id: e.Id})
		}
	}
	return out, nil
}

func (q *fakeQueue) SendMessage(context.Context, *sqs.SendMessageInput, ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	return nil, fmt.Errorf("fakeQueue: SendMessage not modelled")
}

func (q *fakeQueue) GetQueueAttributes(context.Context, *sqs.GetQueueAttributesInput, ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	return &sqs.GetQueueAttributesOutput{Attributes: map[string]string{"VisibilityTimeout": "30"}}, nil
}

func (q *fakeQueue) GetQueueUrl(context.Context, *sqs.GetQueueUrlInput, ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error) {
	return nil, fmt.Errorf("fakeQueue: GetQueueUrl not modelled")
}

func errorCode(err error) string {
	if api, ok := err.(smithy.APIError); ok {
		return api.ErrorCode()
	}
	return "InternalError"
}
