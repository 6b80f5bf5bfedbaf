package alarms

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

const (
	srcURL = "https://sqs.us-east-1.amazonaws.com/123456789012/jobs"
	dlqURL = "https://sqs.us-east-1.amazonaws.com/123456789012/jobs-dlq"
)

// redriveQueues answers for a work queue whose redrive policy names jobs-dlq. A call to the
// DLQ's attributes waits for hold, when set, and fails with fail.
type redriveQueues struct {
	mu       sync.Mutex
	visible  string
	fail     error
	lookups  int
	describe int
	hold     chan struct{}
}

func (q *redriveQueues) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, _ ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	if aws.ToString(in.QueueUrl) == srcURL {
		return &sqs.GetQueueAttributesOutput{Attributes: map[string]string{
			"RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:123456789012:jobs-dlq","maxReceiveCount":5}`,
		}}, nil
	}
	q.mu.Lock()
	q.describe++
	hold, visible, fail := q.hold, q.visible, q.fail
	q.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if fail != nil {
		return nil, fail
	}
	return &sqs.GetQueueAttributesOutput{Attributes: map[string]string{"ApproximateNumberOfMessages": visible}}, nil
}

func (q *redriveQueues) GetQueueUrl(_ context.Context, in *sqs.GetQueueUrlInput, _ ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.lookups++
	if aws.ToString(in.QueueName) != "jobs-dlq" {
		return nil, errors.New("no such queue")
	}
	return &sqs.GetQueueUrlOutput{QueueUrl: aws.String(dlqURL)}, nil
}

func TestDLQDepth(t *testing.T) {
	t.Parallel()
	q := &redriveQueues{visible: "7"}
	depth := DLQDepth(q, srcURL)
	for range 3 {
		if n, err := depth(t.Context()); n != 7 || err != nil {
			t.Fatalf("depth = %d, %v; want 7", n, err)
		}
	}
	if q.lookups != 1 {
		t.Errorf("the DLQ was looked up %d times, want once", q.lookups)
	}
	q.fail = errors.New("throttled")
	if _, err := depth(t.Context()); err == nil {
		t.Error("a failed read gave no error")
	}
}

// A sample stuck on a slow call to SQS holds up no other sample.
func TestDLQDepthHoldsNoLockAcrossCalls(t *testing.T) {
	t.Parallel()
	q := &redriveQueues{visible: "2"}
	depth := DLQDepth(q, srcURL)
	if _, err := depth(t.Context()); err != nil {
		t.Fatal(err)
	}
	q.mu.Lock()
	q.hold = make(chan struct{})
	q.mu.Unlock()
	// Two samples at once: each must reach SQS while the other's call is stuck.
	done := make(chan error, 2)
	for range 2 {
		go func() { _, err := depth(t.Context()); done <- err }()
	}
	calls := func() int {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.describe
	}
	for deadline := time.Now().Add(5 * time.Second); calls() < 3 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	reached := calls() - 1
	close(q.hold)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if reached != 2 {
		t.Errorf("%d of 2 samples reached SQS while the other's call was stuck", reached)
	}
}
