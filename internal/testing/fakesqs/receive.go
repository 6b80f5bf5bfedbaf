package fakesqs

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// ReceiveMessage returns up to MaxNumberOfMessages messages, waiting up to WaitTimeSeconds
// (or the queue's ReceiveMessageWaitTimeSeconds) for the first to become available. It
// returns ctx's error if ctx ends while it waits, having taken nothing.
//
// The SDK's input cannot carry an explicit 0 in MaxNumberOfMessages, VisibilityTimeout or
// WaitTimeSeconds (it omits zero values), so 0 means "not given": 1 message, the queue's
// visibility timeout, the queue's wait time.
func (s *Server) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, _ ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	return call(s, ctx, "ReceiveMessage", in, s.receiveMessage)
}

func (s *Server) receiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput) (*sqs.ReceiveMessageOutput, error) {
	limit := int(in.MaxNumberOfMessages)
	if limit == 0 {
		limit = 1
	}
	if limit < 1 || limit > maxReceive {
		return nil, errInvalidParameterValue.errorf("Value %d for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and %d, if provided.", limit, maxReceive)
	}
	if in.VisibilityTimeout < 0 || in.VisibilityTimeout > maxVisibility {
		return nil, errInvalidParameterValue.errorf("Value %d for parameter VisibilityTimeout is invalid. Reason: Must be between 0 and %d, if provided.", in.VisibilityTimeout, maxVisibility)
	}
	if in.WaitTimeSeconds < 0 || in.WaitTimeSeconds > maxWait {
		return nil, errInvalidParameterValue.errorf("Value %d for parameter WaitTimeSeconds is invalid. Reason: Must be >= 0 and <= %d, if provided.", in.WaitTimeSeconds, maxWait)
	}
	if in.ReceiveRequestAttemptId != nil {
		if err := checkID("ReceiveRequestAttemptId", *in.ReceiveRequestAttemptId); err != nil {
			return nil, err
		}
	}
	f := newFilter(in)

	s.mu.Lock()
	q, err := s.queueByURL(in.QueueUrl)
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	wait := q.settings.wait
	if in.WaitTimeSeconds != 0 {
		wait = time.Duration(in.WaitTimeSeconds) * time.Second
	}
	// The API reference: ReceiveRequestAttemptId applies only to FIFO queues.
	attemptID := ""
	if q.fifo && in.ReceiveRequestAttemptId != nil {
		attemptID = *in.ReceiveRequestAttemptId
	}
	deadline := time.Now().Add(wait)
	for {
		now := time.Now()
		q.expire(now)
		visibility := q.settings.visibility
		if in.VisibilityTimeout != 0 {
			visibility = time.Duration(in.VisibilityTimeout) * time.Second
		}
		if attemptID != "" {
			if got, ok := q.replay(attemptID, now, visibility); ok {
				out := answer(q, got, f)
				s.mu.Unlock()
				return out, nil
			}
		}
		got := s.take(q, now, limit, visibility)
		if len(got) > 0 || !now.Before(deadline) {
			if attemptID != "" && len(got) > 0 {
				a := &attempt{until: now.Add(attemptRetention)}
				for _, m := range got {
					a.items = append(a.items, attemptItem{msg: m.serial, rcv: m.rcv.serial})
				}
				q.attempts[attemptID] = a
			}
			out := answer(q, got, f)
			s.mu.Unlock()
			return out, nil
		}
		wake := deadline
		if next := q.nextChange(now); !next.IsZero() && next.Before(wake) {
			wake = next
		}
		if q.changed == nil {
			q.changed = make(chan struct{})
		}
		changed := q.changed
		q.waiters++
		s.mu.Unlock()

		err := sleep(ctx, changed, wake.Sub(now))

		s.mu.Lock()
		q.waiters--
		if q.waiters == 0 {
			q.changed = nil
		}
		if err != nil {
			s.mu.Unlock()
			return nil, err
		}
	}
}

// sleep waits for d, for changed to close or for ctx to end, with a timer and channels
// only, so that under testing/synctest a waiting receive is durably blocked.
func sleep(ctx context.Context, changed <-chan struct{}, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-changed:
	case <-t.C:
	}
	return nil
}

// take takes up to limit messages as one receive at now: it moves to the dead-letter queue
// the candidates whose receive count has reached maxReceiveCount, then raises the receive
// count of each message it returns, stamps its first receive and starts its visibility
// timeout with a new receipt handle.
func (s *Server) take(q *queue, now time.Time, limit int, visibility time.Duration) []*message {
	var got []*message
	for _, m := range candidates(q.msgs, now, q.fifo) {
		if len(got) == limit {
			break
		}
		if s.redrive(q, m, now) {
			continue
		}
		got = append(got, m)
	}
	for _, m := range got {
		m.receives++
		if m.firstReceive.IsZero() {
			m.firstReceive = now
		}
		serial := s.next()
		m.rcv = &receipt{serial: serial, handle: newHandle(q.name, m.serial, serial), at: now}
		m.visibleAt = now.Add(min(visibility, q.inFlight))
	}
	return got
}

// redrive moves m to q's dead-letter queue if its receive count has reached the redrive
// policy's maxReceiveCount, and reports whether it did. The message keeps its id, body,
// attributes, receive count, SentTimestamp and (FIFO) group, deduplication id and sequence
// number. Its retention period runs on from its first enqueue on a standard queue and
// starts again on a FIFO one ("Setting-up dead-letter queue retention in Amazon SQS").
func (s *Server) redrive(q *queue, m *message, now time.Time) bool {
	p := q.settings.redrive
	if p == nil || m.receives < p.maxReceiveCount {
		return false
	}
	dlq := s.queueByARN(p.targetARN)
	if dlq == nil {
		return false
	}
	q.remove(m)
	m.rcv, m.visibleAt = nil, time.Time{}
	m.available = now
	m.sourceARN = q.arn()
	if dlq.fifo {
		m.enqueued = now
	}
	dlq.add(m)
	return true
}

// replay returns again what the receive with ReceiveRequestAttemptId id returned, with the
// same receipt handles, and restarts their visibility timeout. It declines (and forgets the
// id) when any of those messages was deleted, had its visibility changed or was received
// again since; the receive then goes on as a new one.
func (q *queue) replay(id string, now time.Time, visibility time.Duration) ([]*message, bool) {
	a, ok := q.attempts[id]
	if !ok {
		return nil, false
	}
	var got []*message
	for _, it := range a.items {
		m := q.bySerial[it.msg]
		if m == nil || m.rcv == nil || m.rcv.serial != it.rcv || m.rcv.modified {
			delete(q.attempts, id)
			return nil, false
		}
		got = append(got, m)
	}
	for _, m := range got {
		m.visibleAt = now.Add(min(visibility, q.inFlight))
	}
	return got, true
}

// filter is what a receive asked to see of each message.
type filter struct {
	system     map[string]bool // system attribute names; "All" for all
	attrAll    bool
	attrNames  []string
	attrPrefix []string
}

func newFilter(in *sqs.ReceiveMessageInput) filter {
	f := filter{system: map[string]bool{}}
	for _, n := range in.AttributeNames {
		f.system[string(n)] = true
	}
	for _, n := range in.MessageSystemAttributeNames {
		f.system[string(n)] = true
	}
	for _, n := range in.MessageAttributeNames {
		switch {
		case n == "All" || n == ".*":
			f.attrAll = true
		case strings.HasSuffix(n, ".*"):
			f.attrPrefix = append(f.attrPrefix, strings.TrimSuffix(n, "*"))
		default:
			f.attrNames = append(f.attrNames, n)
		}
	}
	return f
}

func (f filter) wantsAttribute(name string) bool {
	if f.attrAll || slices.Contains(f.attrNames, name) {
		return true
	}
	for _, p := range f.attrPrefix {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

func millis(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

// answer builds a receive's answer. MD5OfMessageAttributes covers the attributes returned.
func answer(q *queue, msgs []*message, f filter) *sqs.ReceiveMessageOutput {
	out := &sqs.ReceiveMessageOutput{}
	for _, m := range msgs {
		tm := types.Message{
			MessageId: aws.String(m.id), ReceiptHandle: aws.String(m.rcv.handle),
			Body: aws.String(m.body), MD5OfBody: aws.String(m.md5Body),
		}
		system := map[string]string{
			"SenderId":                         accountID,
			"SentTimestamp":                    millis(m.sent),
			"ApproximateReceiveCount":          strconv.Itoa(m.receives),
			"ApproximateFirstReceiveTimestamp": millis(m.firstReceive),
		}
		if m.group != "" {
			system["MessageGroupId"] = m.group
		}
		if q.fifo {
			system["MessageDeduplicationId"] = m.dedupID
			system["SequenceNumber"] = m.seq
		}
		if v, ok := m.sysAttrs["AWSTraceHeader"]; ok {
			system["AWSTraceHeader"] = aws.ToString(v.StringValue)
		}
		if m.sourceARN != "" {
			system["DeadLetterQueueSourceArn"] = m.sourceARN
		}
		for name, v := range system {
			if f.system["All"] || f.system[name] {
				if tm.Attributes == nil {
					tm.Attributes = map[string]string{}
				}
				tm.Attributes[name] = v
			}
		}
		for name, v := range m.attrs {
			if f.wantsAttribute(name) {
				if tm.MessageAttributes == nil {
					tm.MessageAttributes = map[string]types.MessageAttributeValue{}
				}
				tm.MessageAttributes[name] = cloneAttribute(v)
			}
		}
		if len(tm.MessageAttributes) > 0 {
			tm.MD5OfMessageAttributes = aws.String(md5OfAttributes(tm.MessageAttributes))
		}
		out.Messages = append(out.Messages, tm)
	}
	return out
}

func cloneAttribute(v types.MessageAttributeValue) types.MessageAttributeValue {
	c := types.MessageAttributeValue{DataType: aws.String(aws.ToString(v.DataType))}
	if v.StringValue != nil {
		c.StringValue = aws.String(*v.StringValue)
	}
	if v.BinaryValue != nil {
		c.BinaryValue = slices.Clone(v.BinaryValue)
	}
	return c
}
