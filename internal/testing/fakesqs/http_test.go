package fakesqs

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"github.com/google/go-cmp/cmp"

	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// listen serves s for the test and returns its endpoint.
func listen(t *testing.T, s *Server) string {
	t.Helper()
	endpoint, closeFn, err := s.Listen()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := closeFn(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return endpoint
}

// client is a real SDK client for endpoint, configured as watchbot's tests configure theirs.
// With retries false it makes one attempt per call.
func client(endpoint string, retries bool) *sqs.Client {
	return testenv.ClientFor(endpoint, func(o *sqs.Options) {
		if !retries {
			o.Retryer = aws.NopRetryer{}
		}
	})
}

// TestHTTPOperations runs every operation through the real SDK, whose own checks (MD5 of
// bodies, response parsing) run on every answer.
func TestHTTPOperations(t *testing.T) {
	ctx := context.Background()
	s := New()
	endpoint := listen(t, s)
	c := client(endpoint, false)
	port := endpoint[strings.LastIndexByte(endpoint, ':')+1:]

	dlq := createQueue(t, c, "dlq", nil)
	url := createQueue(t, c, "work", map[string]string{
		"VisibilityTimeout": "60",
		"RedrivePolicy":     `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":"5"}`,
	})
	if want := "http://sqs.us-east-1.localhost:" + port + "/000000000000/work"; url != want {
		t.Errorf("queue URL %s, want %s", url, want)
	}
	got, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("work")})
	if err != nil || aws.ToString(got.QueueUrl) != url {
		t.Errorf("GetQueueUrl: %v, %v", got, err)
	}
	if _, err := c.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(url), Attributes: map[string]string{"DelaySeconds": "0"}}); err != nil {
		t.Errorf("SetQueueAttributes: %v", err)
	}
	attrs, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{"All"}})
	if err != nil || attrs.Attributes["VisibilityTimeout"] != "60" || attrs.Attributes["QueueArn"] != "arn:aws:sqs:us-east-1:000000000000:work" {
		t.Errorf("GetQueueAttributes: %v, %v", attrs, err)
	}

	msgAttrs := map[string]types.MessageAttributeValue{
		"s": {DataType: aws.String("String"), StringValue: aws.String("text ✓")},
		"n": {DataType: aws.String("Number"), StringValue: aws.String("42")},
		"b": {DataType: aws.String("Binary.gz"), BinaryValue: []byte{0, 1, 2, 255}},
	}
	sent, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("one \U0001F600"), MessageAttributes: msgAttrs})
	if err != nil {
		t.Fatalf("SendMessage: %v", err)
	}
	if aws.ToString(sent.MD5OfMessageAttributes) != md5OfAttributes(msgAttrs) {
		t.Errorf("MD5OfMessageAttributes %s", aws.ToString(sent.MD5OfMessageAttributes))
	}
	batch, err := c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: []types.SendMessageBatchRequestEntry{
		{Id: aws.String("two"), MessageBody: aws.String("two")},
		{Id: aws.String("three"), MessageBody: aws.String("three"), DelaySeconds: 1},
	}})
	if err != nil || len(batch.Successful) != 2 || len(batch.Failed) != 0 {
		t.Fatalf("SendMessageBatch: %+v, %v", batch, err)
	}

	recv, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
		MessageAttributeNames: []string{"All"}, MessageSystemAttributeNames: []types.MessageSystemAttributeName{"All"},
	})
	if err != nil {
		t.Fatalf("ReceiveMessage: %v", err)
	}
	if got := bodies(recv.Messages); !slices.Equal(got, []string{"one \U0001F600", "two"}) {
		t.Fatalf("received %v", got)
	}
	first := recv.Messages[0]
	if diff := cmp.Diff(msgAttrs, first.MessageAttributes, cmp.Comparer(func(a, b types.MessageAttributeValue) bool {
		return aws.ToString(a.DataType) == aws.ToString(b.DataType) && aws.ToString(a.StringValue) == aws.ToString(b.StringValue) && slices.Equal(a.BinaryValue, b.BinaryValue)
	})); diff != "" {
		t.Errorf("message attributes after the round trip (-sent +received):\n%s", diff)
	}
	if first.Attributes["ApproximateReceiveCount"] != "1" || aws.ToString(first.MessageId) != aws.ToString(sent.MessageId) {
		t.Errorf("first message: %+v", first)
	}

	if _, err := c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: first.ReceiptHandle, VisibilityTimeout: 120}); err != nil {
		t.Errorf("ChangeMessageVisibility: %v", err)
	}
	cmv, err := c.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(url), Entries: []types.ChangeMessageVisibilityBatchRequestEntry{
		{Id: aws.String("a"), ReceiptHandle: recv.Messages[1].ReceiptHandle, VisibilityTimeout: 120},
	}})
	if err != nil || len(cmv.Successful) != 1 {
		t.Errorf("ChangeMessageVisibilityBatch: %+v, %v", cmv, err)
	}
	if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: first.ReceiptHandle}); err != nil {
		t.Errorf("DeleteMessage: %v", err)
	}
	del, err := c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: []types.DeleteMessageBatchRequestEntry{
		{Id: aws.String("a"), ReceiptHandle: recv.Messages[1].ReceiptHandle},
	}})
	if err != nil || len(del.Successful) != 1 {
		t.Errorf("DeleteMessageBatch: %+v, %v", del, err)
	}

	sources, err := c.ListDeadLetterSourceQueues(ctx, &sqs.ListDeadLetterSourceQueuesInput{QueueUrl: aws.String(dlq)})
	if err != nil || !slices.Equal(sources.QueueUrls, []string{url}) {
		t.Errorf("ListDeadLetterSourceQueues: %+v, %v", sources, err)
	}
	if _, err := c.PurgeQueue(ctx, &sqs.PurgeQueueInput{QueueUrl: aws.String(url)}); err != nil || len(s.Messages(url)) != 0 {
		t.Errorf("PurgeQueue: %v, %d messages left", err, len(s.Messages(url)))
	}

	// The in-memory URL shape names the same queue.
	if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(memoryBase + "/000000000000/work"), MessageBody: aws.String("x")}); err != nil {
		t.Errorf("send to the in-memory URL: %v", err)
	}

	// FIFO: several messages of one group in one receive, over the wire too.
	fifo := createQueue(t, c, "f.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})
	for _, body := range []string{"a1", "a2", "a3"} {
		if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(fifo), MessageBody: aws.String(body), MessageGroupId: aws.String("a")}); err != nil {
			t.Fatal(err)
		}
	}
	if got := bodies(receive(t, c, fifo, 10)); !slices.Equal(got, []string{"a1", "a2", "a3"}) {
		t.Errorf("FIFO receive over HTTP: %v", got)
	}
}

// TestHTTPErrors checks, for each error the Server returns, that the SDK reports over the
// wire the same ErrorCode() and the same Go type as the in-memory face returns.
func TestHTTPErrors(t *testing.T) {
	ctx := context.Background()
	s := New()
	c := client(listen(t, s), false)
	url := createQueue(t, s, "q", nil)
	fifo := createQueue(t, s, "f.fifo", map[string]string{"FifoQueue": "true"})
	missingURL := aws.String(memoryBase + "/000000000000/nope")
	send(t, s, url, "m")
	stale := receive(t, s, url, 1)[0].ReceiptHandle
	if _, err := s.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: stale}); err != nil {
		t.Fatal(err)
	}
	released := receive(t, s, url, 1)[0].ReceiptHandle
	if _, err := s.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: released}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PurgeQueue(ctx, &sqs.PurgeQueueInput{QueueUrl: aws.String(fifo)}); err != nil {
		t.Fatal(err)
	}
	entries := func(ids ...string) []types.SendMessageBatchRequestEntry {
		out := []types.SendMessageBatchRequestEntry{}
		for _, id := range ids {
			out = append(out, types.SendMessageBatchRequestEntry{Id: aws.String(id), MessageBody: aws.String("x")})
		}
		return out
	}

	tests := []struct {
		name string
		call func(api sqsAPI) error
		want string
	}{
		{"unknown queue name", func(api sqsAPI) error {
			_, err := api.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("nope")})
			return err
		}, "AWS.SimpleQueueService.NonExistentQueue"},
		{"unknown queue URL", func(api sqsAPI) error {
			_, err := api.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: missingURL, MessageBody: aws.String("x")})
			return err
		}, "AWS.SimpleQueueService.NonExistentQueue"},
		{"not a queue URL", func(api sqsAPI) error {
			_, err := api.PurgeQueue(ctx, &sqs.PurgeQueueInput{QueueUrl: aws.String("q")})
			return err
		}, "InvalidAddress"},
		{"queue exists with other attributes", func(api sqsAPI) error {
			_, err := api.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("q"), Attributes: map[string]string{"DelaySeconds": "5"}})
			return err
		}, "QueueAlreadyExists"},
		{"unknown attribute", func(api sqsAPI) error {
			_, err := api.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("x"), Attributes: map[string]string{"Colour": "5"}})
			return err
		}, "InvalidAttributeName"},
		{"attribute out of range", func(api sqsAPI) error {
			_, err := api.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(url), Attributes: map[string]string{"DelaySeconds": "901"}})
			return err
		}, "InvalidAttributeValue"},
		{"too many messages asked", func(api sqsAPI) error {
			_, err := api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 11})
			return err
		}, "InvalidParameterValue"},
		{"empty body", func(api sqsAPI) error {
			_, err := api.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("")})
			return err
		}, "MissingParameter"},
		{"invalid characters", func(api sqsAPI) error {
			_, err := api.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("\x00")})
			return err
		}, "InvalidMessageContents"},
		{"malformed receipt handle", func(api sqsAPI) error {
			_, err := api.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: aws.String("junk")})
			return err
		}, "ReceiptHandleIsInvalid"},
		{"stale receipt handle", func(api sqsAPI) error {
			_, err := api.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: stale, VisibilityTimeout: 5})
			return err
		}, "InvalidParameterValue"},
		{"message not in flight", func(api sqsAPI) error {
			_, err := api.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: released, VisibilityTimeout: 5})
			return err
		}, "AWS.SimpleQueueService.MessageNotInflight"},
		{"empty batch", func(api sqsAPI) error {
			_, err := api.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries()})
			return err
		}, "AWS.SimpleQueueService.EmptyBatchRequest"},
		{"eleven entries", func(api sqsAPI) error {
			_, err := api.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries("1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11")})
			return err
		}, "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"},
		{"ids not distinct", func(api sqsAPI) error {
			_, err := api.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: []types.DeleteMessageBatchRequestEntry{
				{Id: aws.String("a"), ReceiptHandle: stale}, {Id: aws.String("a"), ReceiptHandle: stale},
			}})
			return err
		}, "AWS.SimpleQueueService.BatchEntryIdsNotDistinct"},
		{"bad batch id", func(api sqsAPI) error {
			_, err := api.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries("a.b")})
			return err
		}, "AWS.SimpleQueueService.InvalidBatchEntryId"},
		{"batch over 1 MiB", func(api sqsAPI) error {
			big := strings.Repeat("x", 700_000)
			_, err := api.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: []types.SendMessageBatchRequestEntry{
				{Id: aws.String("a"), MessageBody: &big}, {Id: aws.String("b"), MessageBody: &big},
			}})
			return err
		}, "AWS.SimpleQueueService.BatchRequestTooLong"},
		{"purge within 60 s", func(api sqsAPI) error {
			_, err := api.PurgeQueue(ctx, &sqs.PurgeQueueInput{QueueUrl: aws.String(fifo)})
			return err
		}, "AWS.SimpleQueueService.PurgeQueueInProgress"},
		{"injected fault", func(api sqsAPI) error {
			s.Fail("GetQueueAttributes", 1, Before)
			_, err := api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url)})
			return err
		}, "InternalFailure"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			memErr, wireErr := tt.call(s), tt.call(c)
			if got := errorCode(memErr); got != tt.want {
				t.Errorf("in memory: ErrorCode %q (%v), want %q", got, memErr, tt.want)
			}
			if got := errorCode(wireErr); got != tt.want {
				t.Errorf("over HTTP: ErrorCode %q (%v), want %q", got, wireErr, tt.want)
			}
			var memAPI, wireAPI smithy.APIError
			if errors.As(memErr, &memAPI) && errors.As(wireErr, &wireAPI) {
				if mt, wt := fmt.Sprintf("%T", memAPI), fmt.Sprintf("%T", wireAPI); mt != wt {
					t.Errorf("error types differ: %s in memory, %s over HTTP", mt, wt)
				}
				if memAPI.ErrorFault() != wireAPI.ErrorFault() {
					t.Errorf("faults differ: %v in memory, %v over HTTP", memAPI.ErrorFault(), wireAPI.ErrorFault())
				}
			}
		})
	}
}

// TestHTTPWire checks the raw protocol where the SDK would hide it: the error shape and an
// unknown operation.
func TestHTTPWire(t *testing.T) {
	endpoint := listen(t, New())
	post := func(target, body string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, endpoint, strings.NewReader(body))
		req.Header.Set("X-Amz-Target", target)
		req.Header.Set("Content-Type", "application/x-amz-json-1.0")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	resp := post("AmazonSQS.GetQueueUrl", `{"QueueName":"nope"}`)
	if resp.StatusCode != 400 || resp.Header.Get("x-amzn-query-error") != "AWS.SimpleQueueService.NonExistentQueue;Sender" {
		t.Errorf("unknown queue: %d, %q", resp.StatusCode, resp.Header.Get("x-amzn-query-error"))
	}
	var buf [256]byte
	n, _ := resp.Body.Read(buf[:])
	if !regexp.MustCompile(`"__type":"com.amazonaws.sqs#QueueDoesNotExist"`).Match(buf[:n]) {
		t.Errorf("error body %s", buf[:n])
	}
	if resp := post("AmazonSQS.DeleteQueue", `{}`); resp.StatusCode != 400 || resp.Header.Get("x-amzn-query-error") != "InvalidAction;Sender" {
		t.Errorf("unknown operation: %d, %q", resp.StatusCode, resp.Header.Get("x-amzn-query-error"))
	}
	if resp := post("AmazonSQS.CreateQueue", `{"QueueName": 5}`); resp.StatusCode != 400 {
		t.Errorf("malformed body: %d", resp.StatusCode)
	}
}

// TestHTTPLongPoll: over the wire, a long poll returns when a message arrives, stops
// waiting when the client goes away, and ends when the server closes.
func TestHTTPLongPoll(t *testing.T) {
	ctx := context.Background()
	t.Run("returns when a message arrives", func(t *testing.T) {
		s := New()
		c := client(listen(t, s), false)
		url := createQueue(t, c, "q", nil)
		go func() {
			time.Sleep(200 * time.Millisecond)
			send(t, s, url, "m")
		}()
		start := time.Now()
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 10})
		if err != nil || !slices.Equal(bodies(out.Messages), []string{"m"}) || time.Since(start) > 5*time.Second {
			t.Errorf("long poll: %v, %v after %v", out, err, time.Since(start))
		}
	})
	t.Run("stops waiting when the client goes away", func(t *testing.T) {
		s := New()
		c := client(listen(t, s), false)
		url := createQueue(t, c, "q", nil)
		cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		if _, err := c.ReceiveMessage(cctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 20}); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("error %v, want context.DeadlineExceeded", err)
		}
		waitFor(t, func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.queues["q"].waiters == 0
		})
		send(t, s, url, "m")
		if got := inFlightBodies(s, url); len(got) != 0 {
			t.Errorf("the abandoned poll took %v", got)
		}
	})
	t.Run("closing the server ends long polls", func(t *testing.T) {
		s := New()
		endpoint, closeFn, err := s.Listen()
		if err != nil {
			t.Fatal(err)
		}
		c := client(endpoint, false)
		url := createQueue(t, c, "q", nil)
		done := make(chan error, 1)
		go func() {
			_, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 20})
			done <- err
		}()
		waitFor(t, func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.queues["q"].waiters == 1
		})
		start := time.Now()
		if err := closeFn(); err != nil {
			t.Errorf("close: %v", err)
		}
		<-done
		if time.Since(start) > 5*time.Second {
			t.Errorf("close took %v", time.Since(start))
		}
		if err := closeFn(); err != nil {
			t.Errorf("second close: %v", err)
		}
	})
}

// waitFor polls cond for up to 5 s; for conditions on the other side of a real connection.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("condition not met within 5s")
}

// TestHTTPLostReceiveRetried: the SDK's own retry of a receive whose answer was lost re-sends
// the same input, so with a ReceiveRequestAttemptId it gets the messages back at once;
// without one their FIFO group stays locked until the visibility timeout ends.
func TestHTTPLostReceiveRetried(t *testing.T) {
	ctx := context.Background()
	for _, withID := range []bool{true, false} {
		t.Run(fmt.Sprintf("attempt id %v", withID), func(t *testing.T) {
			s := New()
			c := client(listen(t, s), true)
			url := createQueue(t, s, "q.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})
			for _, body := range []string{"a1", "a2"} {
				if _, err := s.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body), MessageGroupId: aws.String("a")}); err != nil {
					t.Fatal(err)
				}
			}
			s.Fail("ReceiveMessage", 1, After)
			in := &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10}
			if withID {
				in.ReceiveRequestAttemptId = aws.String("attempt-1")
			}
			out, err := c.ReceiveMessage(ctx, in)
			if err != nil {
				t.Fatal(err)
			}
			want := []string{"a1", "a2"}
			if !withID {
				want = []string{}
			}
			if got := bodies(out.Messages); !slices.Equal(got, want) || s.Calls("ReceiveMessage") != 2 {
				t.Errorf("after the SDK's retry: %v in %d calls, want %v in 2", got, s.Calls("ReceiveMessage"), want)
			}
		})
	}
}
