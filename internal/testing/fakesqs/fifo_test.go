package fakesqs

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/google/go-cmp/cmp"
)

// TestCandidates checks the delivery rule on its own: which messages a receive may take,
// in which order.
func TestCandidates(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	ready := func(group, body string) *message { return &message{group: group, body: body} }
	inFlight := func(group, body string) *message {
		return &message{group: group, body: body, rcv: &receipt{}, visibleAt: now.Add(time.Second)}
	}
	released := func(group, body string) *message {
		return &message{group: group, body: body, rcv: &receipt{}, visibleAt: now}
	}
	delayed := func(group, body string) *message {
		return &message{group: group, body: body, available: now.Add(time.Second)}
	}
	tests := []struct {
		name string
		fifo bool
		msgs []*message
		want []string
	}{
		{"standard: every ready message, oldest first", false,
			[]*message{ready("", "1"), inFlight("", "2"), delayed("", "3"), released("", "4")}, []string{"1", "4"}},
		{"fifo: a group gives all its ready messages in order", true,
			[]*message{ready("a", "a1"), ready("a", "a2"), ready("a", "a3")}, []string{"a1", "a2", "a3"}},
		{"fifo: a message in flight blocks its whole group", true,
			[]*message{inFlight("a", "a1"), ready("a", "a2"), ready("b", "b1")}, []string{"b1"}},
		{"fifo: a later message in flight blocks the group too", true,
			[]*message{ready("a", "a1"), inFlight("a", "a2")}, []string{}},
		{"fifo: a released head comes before its successors", true,
			[]*message{released("a", "a1"), ready("a", "a2")}, []string{"a1", "a2"}},
		{"fifo: groups come in the order of their oldest message", true,
			[]*message{ready("b", "b1"), ready("a", "a1"), ready("b", "b2"), ready("c", "c1"), ready("a", "a2")},
			[]string{"b1", "b2", "a1", "a2", "c1"}},
		{"fifo: a delayed message stops its group", true,
			[]*message{ready("a", "a1"), delayed("a", "a2"), ready("a", "a3"), ready("b", "b1")}, []string{"a1", "b1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := []string{}
			for _, m := range candidates(tt.msgs, now, tt.fifo) {
				got = append(got, m.body)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("candidates (-want +got):\n%s", diff)
			}
		})
	}
}

// fifoHarness is the state a FIFO scenario's steps share.
type fifoHarness struct {
	s       *Server
	url     string
	handles map[string]string // body -> receipt handle of its latest receive
}

type fifoStep struct {
	name string
	run  func(t *testing.T, h *fifoHarness)
}

func sendTo(group string, msgs ...string) fifoStep {
	return fifoStep{fmt.Sprintf("send %v to %s", msgs, group), func(t *testing.T, h *fifoHarness) {
		for _, body := range msgs {
			sendFIFO(t, h.s, h.url, group, body)
		}
	}}
}

func recv(max int32, want ...string) fifoStep {
	return fifoStep{fmt.Sprintf("receive %d", max), func(t *testing.T, h *fifoHarness) {
		got := receive(t, h.s, h.url, max)
		for _, m := range got {
			h.handles[aws.ToString(m.Body)] = aws.ToString(m.ReceiptHandle)
		}
		if want == nil {
			want = []string{}
		}
		if diff := cmp.Diff(want, bodies(got)); diff != "" {
			t.Fatalf("received (-want +got):\n%s", diff)
		}
	}}
}

func del(msgs ...string) fifoStep {
	return fifoStep{fmt.Sprintf("delete %v", msgs), func(t *testing.T, h *fifoHarness) {
		for _, body := range msgs {
			if _, err := h.s.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{
				QueueUrl: aws.String(h.url), ReceiptHandle: aws.String(h.handles[body]),
			}); err != nil {
				t.Fatalf("delete %s: %v", body, err)
			}
		}
	}}
}

func release(body string) fifoStep {
	return fifoStep{"release " + body, func(t *testing.T, h *fifoHarness) {
		if _, err := h.s.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{
			QueueUrl: aws.String(h.url), ReceiptHandle: aws.String(h.handles[body]), VisibilityTimeout: 0,
		}); err != nil {
			t.Fatalf("release %s: %v", body, err)
		}
	}}
}

func pause(d time.Duration) fifoStep {
	return fifoStep{"sleep " + d.String(), func(*testing.T, *fifoHarness) { time.Sleep(d) }}
}

func receiveCounts(want map[string]int) fifoStep {
	return fifoStep{"receive counts", func(t *testing.T, h *fifoHarness) {
		got := map[string]int{}
		for _, m := range h.s.Messages(h.url) {
			got[m.Body] = m.ReceiveCount
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("receive counts (-want +got):\n%s", diff)
		}
	}}
}

// TestFIFODelivery runs the rules of "FIFO queue delivery logic" (SQS Developer Guide)
// against the in-memory Server, on synctest's clock. The queue's visibility timeout is 30 s.
func TestFIFODelivery(t *testing.T) {
	tests := []struct {
		name  string
		attrs map[string]string
		steps []fifoStep
	}{
		{"one receive takes several messages of one group, in order", nil, []fifoStep{
			sendTo("a", "a1", "a2", "a3"),
			recv(10, "a1", "a2", "a3"),
		}},
		{"a group with a message in flight gives nothing more", nil, []fifoStep{
			sendTo("a", "a1", "a2"),
			recv(1, "a1"),
			recv(10),
			sendTo("a", "a3"),
			recv(10),
		}},
		{"deleting every message in flight unblocks the group", nil, []fifoStep{
			sendTo("a", "a1", "a2", "a3"),
			recv(2, "a1", "a2"),
			del("a1"),
			recv(10),
			del("a2"),
			recv(10, "a3"),
		}},
		{"a released head comes back before its successors", nil, []fifoStep{
			sendTo("a", "a1", "a2", "a3"),
			recv(1, "a1"),
			release("a1"),
			recv(10, "a1", "a2", "a3"),
		}},
		{"after a visibility timeout the group comes back in order", nil, []fifoStep{
			sendTo("a", "a1", "a2", "a3"),
			recv(2, "a1", "a2"),
			pause(29 * time.Second),
			recv(10),
			pause(time.Second),
			recv(10, "a1", "a2", "a3"),
		}},
		{"groups interleave, oldest first, each as far as it goes", nil, []fifoStep{
			sendTo("a", "a1"), sendTo("b", "b1"), sendTo("a", "a2"), sendTo("c", "c1"), sendTo("b", "b2"),
			recv(3, "a1", "a2", "b1"),
			recv(10, "c1"),
			del("a1", "a2"),
			sendTo("a", "a3"),
			del("c1"),
			recv(10, "a3"),
		}},
		{"a blocked group is passed over for the next", nil, []fifoStep{
			sendTo("a", "a1", "a2"), sendTo("b", "b1", "b2"),
			recv(1, "a1"),
			recv(10, "b1", "b2"),
			recv(10),
		}},
		{"every receive raises the receive count of what it returns", nil, []fifoStep{
			sendTo("a", "a1", "a2"),
			recv(1, "a1"),
			release("a1"),
			recv(10, "a1", "a2"),
			receiveCounts(map[string]int{"a1": 2, "a2": 1}),
		}},
		{"delayed messages are not available", map[string]string{"DelaySeconds": "10"}, []fifoStep{
			sendTo("a", "a1"),
			pause(5 * time.Second),
			sendTo("a", "a2"),
			recv(10),
			pause(5 * time.Second),
			recv(10, "a1"),
			del("a1"),
			pause(5 * time.Second),
			recv(10, "a2"),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := New()
				attrs := map[string]string{"FifoQueue": "true", "VisibilityTimeout": "30"}
				maps.Copy(attrs, tt.attrs)
				h := &fifoHarness{s: s, url: createQueue(t, s, "q.fifo", attrs), handles: map[string]string{}}
				for i, step := range tt.steps {
					t.Logf("step %d: %s", i, step.name)
					step.run(t, h)
				}
			})
		})
	}
}

// TestFIFORedrive: a message whose receive count has reached maxReceiveCount goes to the
// FIFO dead-letter queue on the next receive that would return it, keeping its id, group and
// deduplication id, and its successors are delivered in the same receive.
func TestFIFORedrive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New()
		attrs, dlq := withDLQ(t, s, "work", "2", true)
		url := createQueue(t, s, "work.fifo", attrs)
		id := sendFIFO(t, s, url, "g", "a1")
		sendFIFO(t, s, url, "g", "a2")
		h := &fifoHarness{s: s, url: url, handles: map[string]string{}}
		for _, step := range []fifoStep{
			recv(1, "a1"), release("a1"),
			recv(1, "a1"), release("a1"),
			recv(10, "a2"),
		} {
			step.run(t, h)
		}
		moved := s.Messages(dlq)
		if len(moved) != 1 {
			t.Fatalf("dead-letter queue holds %d messages, want 1", len(moved))
		}
		want := MessageState{ID: id, Body: "a1", GroupID: "g", DedupID: "a1", ReceiveCount: 2}
		got := moved[0]
		got.SequenceNumber, got.VisibleAt, got.FirstReceived, got.Sent = "", time.Time{}, time.Time{}, time.Time{}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("moved message (-want +got):\n%s", diff)
		}
		msgs := receive(t, s, dlq, 10)
		if len(msgs) != 1 {
			t.Fatalf("received %d messages from the dead-letter queue, want 1", len(msgs))
		}
		a := msgs[0].Attributes
		if a["MessageGroupId"] != "g" || a["MessageDeduplicationId"] != "a1" || a["ApproximateReceiveCount"] != "3" ||
			a["DeadLetterQueueSourceArn"] != queueARN(t, s, url) || aws.ToString(msgs[0].MessageId) != id {
			t.Errorf("dead-lettered message attributes = %v (id %s)", a, aws.ToString(msgs[0].MessageId))
		}
	})
}

// TestReceiveRequestAttemptID covers "Using the Amazon SQS receive request attempt ID" and the
// ReceiveMessage API reference: a retry with the same id within 5 minutes gets the same
// messages and receipt handles back, with a new visibility timeout, unless one of them was
// modified since.
func TestReceiveRequestAttemptID(t *testing.T) {
	receiveWith := func(s *Server, url, attemptID string) (*sqs.ReceiveMessageOutput, error) {
		return s.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 10, ReceiveRequestAttemptId: aws.String(attemptID),
		})
	}
	handlesOf := func(msgs []types.Message) []string {
		var out []string
		for _, m := range msgs {
			out = append(out, aws.ToString(m.ReceiptHandle))
		}
		return out
	}
	// lost sends a1, a2 to group a and b1 to group b, then loses the answer of a receive
	// that took all three with attempt id "x".
	lost := func(t *testing.T) (*Server, string) {
		s := New()
		url := createQueue(t, s, "q.fifo", map[string]string{"FifoQueue": "true", "VisibilityTimeout": "30"})
		sendFIFO(t, s, url, "a", "a1")
		sendFIFO(t, s, url, "a", "a2")
		sendFIFO(t, s, url, "b", "b1")
		s.Fail("ReceiveMessage", 1, After)
		if _, err := receiveWith(s, url, "x"); errorCode(err) != "InternalFailure" {
			t.Fatalf("receive with a lost answer: %v, want InternalFailure", err)
		}
		if got := inFlightBodies(s, url); !slices.Equal(got, []string{"a1", "a2", "b1"}) {
			t.Fatalf("in flight after the lost answer: %v", got)
		}
		return s, url
	}

	t.Run("a retry gets the same messages and handles without waiting", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s, url := lost(t)
			time.Sleep(20 * time.Second)
			first, err := receiveWith(s, url, "x")
			if err != nil {
				t.Fatal(err)
			}
			if got := bodies(first.Messages); !slices.Equal(got, []string{"a1", "a2", "b1"}) {
				t.Fatalf("retry returned %v", got)
			}
			again, err := receiveWith(s, url, "x")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(handlesOf(first.Messages), handlesOf(again.Messages)); diff != "" {
				t.Errorf("handles differ between retries (-first +again):\n%s", diff)
			}
			for _, m := range s.Messages(url) {
				if m.ReceiveCount != 1 || !m.VisibleAt.Equal(time.Now().Add(30*time.Second)) {
					t.Errorf("%s: receive count %d, visible at %v; want 1 and a visibility timeout restarted now", m.Body, m.ReceiveCount, m.VisibleAt)
				}
			}
			// The handles work.
			for _, h := range handlesOf(again.Messages) {
				if _, err := s.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: aws.String(h)}); err != nil {
					t.Errorf("delete with a replayed handle: %v", err)
				}
			}
			if n := len(s.Messages(url)); n != 0 {
				t.Errorf("%d messages left after deleting every replayed one", n)
			}
		})
	})
	t.Run("after a message was modified the id starts a new receive", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s, url := lost(t)
			handle := latestHandle(t, s, url, "b1")
			if _, err := s.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{
				QueueUrl: aws.String(url), ReceiptHandle: aws.String(handle), VisibilityTimeout: 0,
			}); err != nil {
				t.Fatal(err)
			}
			out, err := receiveWith(s, url, "x")
			if err != nil {
				t.Fatal(err)
			}
			if got := bodies(out.Messages); !slices.Equal(got, []string{"b1"}) {
				t.Errorf("receive after a modification returned %v, want the fresh receive's [b1]", got)
			}
		})
	})
	t.Run("the id is forgotten after 5 minutes", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s, url := lost(t)
			time.Sleep(5 * time.Minute)
			out, err := receiveWith(s, url, "x")
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range s.Messages(url) {
				if m.ReceiveCount != 2 {
					t.Errorf("%s: receive count %d after a fresh receive, want 2", m.Body, m.ReceiveCount)
				}
			}
			if got := bodies(out.Messages); !slices.Equal(got, []string{"a1", "a2", "b1"}) {
				t.Errorf("fresh receive returned %v", got)
			}
		})
	})
	t.Run("a standard queue ignores the id", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := New()
			url := createQueue(t, s, "std", nil)
			send(t, s, url, "m")
			s.Fail("ReceiveMessage", 1, After)
			if _, err := receiveWith(s, url, "x"); err == nil {
				t.Fatal("receive did not fail")
			}
			out, err := receiveWith(s, url, "x")
			if err != nil || len(out.Messages) != 0 {
				t.Errorf("retry on a standard queue: %v, %v; want nothing until the visibility timeout ends", bodies(out.Messages), err)
			}
		})
	})
}

// latestHandle is the receipt handle of the latest receive of the message with body, which
// a test cannot learn from an answer that was lost.
func latestHandle(t *testing.T, s *Server, url, body string) string {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queueByURL(&url)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range q.msgs {
		if m.body == body && m.rcv != nil {
			return m.rcv.handle
		}
	}
	t.Fatalf("no received message %q", body)
	return ""
}

// TestFIFODeduplication covers "Exactly-once processing in Amazon SQS": within 5 minutes a
// send with a known deduplication id is accepted and answered with the first message's id,
// but not enqueued again, even after that message was deleted.
func TestFIFODeduplication(t *testing.T) {
	sendDedup := func(t *testing.T, s *Server, url, group, body string, dedupID *string) (string, error) {
		out, err := s.SendMessage(context.Background(), &sqs.SendMessageInput{
			QueueUrl: aws.String(url), MessageBody: aws.String(body), MessageGroupId: aws.String(group), MessageDeduplicationId: dedupID,
		})
		if err != nil {
			return "", err
		}
		return aws.ToString(out.MessageId), nil
	}
	t.Run("explicit ids, 5-minute interval", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := New()
			url := createQueue(t, s, "q.fifo", map[string]string{"FifoQueue": "true"})
			first, _ := sendDedup(t, s, url, "g", "one", aws.String("d"))
			second, _ := sendDedup(t, s, url, "g", "two", aws.String("d"))
			if second != first || len(s.Messages(url)) != 1 {
				t.Fatalf("duplicate: id %s (first %s), %d messages; want the first id and 1 message", second, first, len(s.Messages(url)))
			}
			h := &fifoHarness{s: s, url: url, handles: map[string]string{}}
			recv(1, "one").run(t, h)
			del("one").run(t, h)
			time.Sleep(4 * time.Minute)
			if again, _ := sendDedup(t, s, url, "g", "three", aws.String("d")); again != first || len(s.Messages(url)) != 0 {
				t.Errorf("duplicate after delete: id %s, %d messages; want %s and none", again, len(s.Messages(url)), first)
			}
			time.Sleep(time.Minute)
			if later, _ := sendDedup(t, s, url, "g", "four", aws.String("d")); later == first || len(s.Messages(url)) != 1 {
				t.Errorf("send after the interval: id %s, %d messages; want a new message", later, len(s.Messages(url)))
			}
		})
	})
	t.Run("content-based deduplication hashes the body", func(t *testing.T) {
		s := New()
		url := createQueue(t, s, "q.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})
		a, _ := sendDedup(t, s, url, "g", "same", nil)
		b, _ := sendDedup(t, s, url, "h", "same", nil)
		c, _ := sendDedup(t, s, url, "g", "other", nil)
		if a != b || a == c {
			t.Errorf("ids %s %s %s; want the first two equal and the third new", a, b, c)
		}
		// SHA-256 of "same".
		if got := s.Messages(url)[0].DedupID; got != "0967115f2813a3541eaef77de9d9d5773f1c0c04314b0bbfe4ff3b3b1c55b5d5" {
			t.Errorf("content-based deduplication id = %s", got)
		}
	})
	t.Run("no id and no content-based deduplication is refused", func(t *testing.T) {
		s := New()
		url := createQueue(t, s, "q.fifo", map[string]string{"FifoQueue": "true"})
		if _, err := sendDedup(t, s, url, "g", "x", nil); errorCode(err) != "InvalidParameterValue" {
			t.Errorf("send: %v, want InvalidParameterValue", err)
		}
	})
	t.Run("deduplication scope messageGroup", func(t *testing.T) {
		s := New()
		url := createQueue(t, s, "q.fifo", map[string]string{"FifoQueue": "true", "DeduplicationScope": "messageGroup"})
		a, _ := sendDedup(t, s, url, "g", "x", aws.String("d"))
		b, _ := sendDedup(t, s, url, "h", "x", aws.String("d"))
		if a == b {
			t.Errorf("same deduplication id in two groups was deduplicated")
		}
	})
	t.Run("sequence numbers are fixed-width and increasing", func(t *testing.T) {
		s := New()
		url := createQueue(t, s, "q.fifo", map[string]string{"FifoQueue": "true"})
		var seqs []string
		for i := range 3 {
			out, err := s.SendMessage(context.Background(), &sqs.SendMessageInput{
				QueueUrl: aws.String(url), MessageBody: aws.String("m"), MessageGroupId: aws.String("g"),
				MessageDeduplicationId: aws.String(fmt.Sprint(i)),
			})
			if err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, aws.ToString(out.SequenceNumber))
		}
		if !slices.IsSorted(seqs) || len(seqs[0]) != 20 || len(seqs[2]) != 20 || seqs[0] == seqs[1] {
			t.Errorf("sequence numbers %v", seqs)
		}
	})
}

// TestFIFOSendRules covers the SendMessage API reference's FIFO-only rules.
func TestFIFOSendRules(t *testing.T) {
	s := New()
	url := createQueue(t, s, "q.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})
	tests := []struct {
		name string
		in   sqs.SendMessageInput
		want string
	}{
		{"group id required", sqs.SendMessageInput{MessageBody: aws.String("x")}, "MissingParameter"},
		{"per-message delay refused", sqs.SendMessageInput{MessageBody: aws.String("x"), MessageGroupId: aws.String("g"), DelaySeconds: 5}, "InvalidParameterValue"},
		{"group id of 129 characters", sqs.SendMessageInput{MessageBody: aws.String("x"), MessageGroupId: aws.String(string(slices.Repeat([]byte("g"), 129)))}, "InvalidParameterValue"},
		{"group id with a space", sqs.SendMessageInput{MessageBody: aws.String("x"), MessageGroupId: aws.String("a b")}, "InvalidParameterValue"},
		{"accepted", sqs.SendMessageInput{MessageBody: aws.String("x"), MessageGroupId: aws.String("g")}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in
			in.QueueUrl = aws.String(url)
			_, err := s.SendMessage(context.Background(), &in)
			if got := errorCode(err); got != tt.want {
				t.Errorf("error code %q (%v), want %q", got, err, tt.want)
			}
		})
	}
}

// TestFIFOLongPoll: a long poll waiting on a blocked group returns when the group is freed.
func TestFIFOLongPoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New()
		url := createQueue(t, s, "q.fifo", map[string]string{"FifoQueue": "true"})
		sendFIFO(t, s, url, "a", "a1")
		sendFIFO(t, s, url, "a", "a2")
		h := &fifoHarness{s: s, url: url, handles: map[string]string{}}
		recv(1, "a1").run(t, h)
		start := time.Now()
		done := make(chan []string)
		go func() {
			out, err := s.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 20})
			if err != nil {
				t.Error(err)
			}
			done <- bodies(out.Messages)
		}()
		time.Sleep(3 * time.Second)
		synctest.Wait()
		del("a1").run(t, h)
		got := <-done
		if !slices.Equal(got, []string{"a2"}) || time.Since(start) != 3*time.Second {
			t.Errorf("long poll returned %v after %v, want [a2] after 3s", got, time.Since(start))
		}
	})
}
