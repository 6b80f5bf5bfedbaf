package fakesqs

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/google/go-cmp/cmp"
)

// TestVisibility covers "Amazon SQS visibility timeout": a received message is hidden for
// the call's or the queue's visibility timeout, then comes back with a higher receive count.
func TestVisibility(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New()
		url := createQueue(t, s, "q", map[string]string{"VisibilityTimeout": "30"})
		send(t, s, url, "m")
		start := time.Now()
		if got := bodies(receive(t, s, url, 10)); !slices.Equal(got, []string{"m"}) {
			t.Fatalf("first receive: %v", got)
		}
		time.Sleep(29 * time.Second)
		if got := receive(t, s, url, 10); len(got) != 0 {
			t.Fatalf("received %v during the visibility timeout", bodies(got))
		}
		time.Sleep(time.Second)
		msgs, err := s.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), VisibilityTimeout: 5,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		if err != nil || len(msgs.Messages) != 1 {
			t.Fatalf("receive after the timeout: %v, %v", msgs, err)
		}
		a := msgs.Messages[0].Attributes
		if a["ApproximateReceiveCount"] != "2" || a["ApproximateFirstReceiveTimestamp"] != millis(start) || a["SentTimestamp"] != millis(start) {
			t.Errorf("attributes after the second receive: %v", a)
		}
		state := s.Messages(url)[0]
		if !state.InFlight || !state.VisibleAt.Equal(time.Now().Add(5*time.Second)) || !state.FirstReceived.Equal(start) {
			t.Errorf("state %+v: want in flight until now+5s (the call's timeout), first received at the start", state)
		}
	})
}

// TestStandardRedrive covers "Using dead-letter queues in Amazon SQS": the receive after the
// maxReceiveCount-th moves the message, which keeps its id, body, attributes and
// SentTimestamp; ApproximateReceiveCount counts receives across both queues.
func TestStandardRedrive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New()
		attrs, dlq := withDLQ(t, s, "work", `"2"`, false) // maxReceiveCount as a string
		url := createQueue(t, s, "work", attrs)
		sent := time.Now()
		out, err := s.SendMessage(context.Background(), &sqs.SendMessageInput{
			QueueUrl: aws.String(url), MessageBody: aws.String("m"),
			MessageAttributes: map[string]types.MessageAttributeValue{"k": {DataType: aws.String("String"), StringValue: aws.String("v")}},
		})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if n := len(receive(t, s, url, 1)); n != 1 {
				t.Fatalf("received %d, want 1", n)
			}
			time.Sleep(31 * time.Second)
		}
		if got := receive(t, s, url, 10); len(got) != 0 {
			t.Fatalf("third receive returned %v, want nothing (the message moves)", bodies(got))
		}
		if n := len(s.Messages(url)); n != 0 {
			t.Fatalf("%d messages left in the source queue", n)
		}
		got := receive(t, s, dlq, 10)
		if len(got) != 1 {
			t.Fatalf("dead-letter queue gave %d messages", len(got))
		}
		m := got[0]
		if aws.ToString(m.MessageId) != aws.ToString(out.MessageId) || aws.ToString(m.Body) != "m" ||
			aws.ToString(m.MessageAttributes["k"].StringValue) != "v" || m.Attributes["SentTimestamp"] != millis(sent) ||
			m.Attributes["ApproximateReceiveCount"] != "3" {
			t.Errorf("dead-lettered message: id %s body %s attributes %v %v", aws.ToString(m.MessageId), aws.ToString(m.Body), m.MessageAttributes, m.Attributes)
		}
	})
}

// TestBatchFailures: batch calls refuse a malformed request as a whole and report each
// entry's own failure in Failed, with SenderFault.
func TestBatchFailures(t *testing.T) {
	s := New()
	url := createQueue(t, s, "q", nil)
	ctx := context.Background()
	entry := func(id, body string) types.SendMessageBatchRequestEntry {
		return types.SendMessageBatchRequestEntry{Id: aws.String(id), MessageBody: aws.String(body)}
	}
	t.Run("whole-call errors", func(t *testing.T) {
		var eleven []types.SendMessageBatchRequestEntry
		for i := range 11 {
			eleven = append(eleven, entry(string(rune('a'+i)), "x"))
		}
		big := strings.Repeat("x", 600_000)
		tests := []struct {
			name    string
			entries []types.SendMessageBatchRequestEntry
			want    string
		}{
			{"empty", []types.SendMessageBatchRequestEntry{}, "AWS.SimpleQueueService.EmptyBatchRequest"},
			{"eleven entries", eleven, "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"},
			{"same id twice", []types.SendMessageBatchRequestEntry{entry("a", "x"), entry("a", "y")}, "AWS.SimpleQueueService.BatchEntryIdsNotDistinct"},
			{"bad id", []types.SendMessageBatchRequestEntry{entry("a b", "x")}, "AWS.SimpleQueueService.InvalidBatchEntryId"},
			{"over 1 MiB in all", []types.SendMessageBatchRequestEntry{entry("a", big), entry("b", big)}, "AWS.SimpleQueueService.BatchRequestTooLong"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				_, err := s.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: tt.entries})
				if got := errorCode(err); got != tt.want {
					t.Errorf("error %q (%v), want %q", got, err, tt.want)
				}
			})
		}
	})
	t.Run("per-entry failures", func(t *testing.T) {
		sent, err := s.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: []types.SendMessageBatchRequestEntry{
			entry("good", "fine"), entry("bad", "nul\x00"), entry("empty", ""),
		}})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"bad:InvalidMessageContents:true", "empty:MissingParameter:true"}, failures(sent.Failed)); diff != "" {
			t.Errorf("send failures (-want +got):\n%s", diff)
		}
		if len(sent.Successful) != 1 || aws.ToString(sent.Successful[0].Id) != "good" || aws.ToString(sent.Successful[0].MD5OfMessageBody) != md5Hex([]byte("fine")) {
			t.Errorf("send successes: %+v", sent.Successful)
		}
		msgs := receive(t, s, url, 10)
		handle := msgs[0].ReceiptHandle
		changed, err := s.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(url), Entries: []types.ChangeMessageVisibilityBatchRequestEntry{
			{Id: aws.String("ok"), ReceiptHandle: handle, VisibilityTimeout: 60},
			{Id: aws.String("range"), ReceiptHandle: handle, VisibilityTimeout: 43201},
			{Id: aws.String("junk"), ReceiptHandle: aws.String("junk"), VisibilityTimeout: 60},
		}})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"range:InvalidParameterValue:true", "junk:ReceiptHandleIsInvalid:true"}, failures(changed.Failed)); diff != "" {
			t.Errorf("visibility failures (-want +got):\n%s", diff)
		}
		deleted, err := s.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: []types.DeleteMessageBatchRequestEntry{
			{Id: aws.String("ok"), ReceiptHandle: handle},
			{Id: aws.String("junk"), ReceiptHandle: aws.String("AQEBjunk")},
		}})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"junk:ReceiptHandleIsInvalid:true"}, failures(deleted.Failed)); diff != "" {
			t.Errorf("delete failures (-want +got):\n%s", diff)
		}
		if len(deleted.Successful) != 1 || len(s.Messages(url)) != 0 {
			t.Errorf("delete successes %+v, %d messages left", deleted.Successful, len(s.Messages(url)))
		}
	})
}

func failures(entries []types.BatchResultErrorEntry) []string {
	var out []string
	for _, e := range entries {
		sender := "false"
		if e.SenderFault {
			sender = "true"
		}
		out = append(out, aws.ToString(e.Id)+":"+aws.ToString(e.Code)+":"+sender)
	}
	return out
}

// TestInFlightCeiling: ChangeMessageVisibility cannot keep a message in flight for more than
// 12 hours after its receive ("ChangeMessageVisibility" API reference).
func TestInFlightCeiling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New()
		url := createQueue(t, s, "q", nil)
		send(t, s, url, "m")
		handle := receive(t, s, url, 1)[0].ReceiptHandle
		change := func(seconds int32) error {
			_, err := s.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{
				QueueUrl: aws.String(url), ReceiptHandle: handle, VisibilityTimeout: seconds,
			})
			return err
		}
		if err := change(43200); err != nil {
			t.Fatalf("12 h from the receive: %v", err)
		}
		time.Sleep(time.Hour)
		if err := change(43200); errorCode(err) != "InvalidParameterValue" {
			t.Errorf("13 h from the receive: %v, want InvalidParameterValue", err)
		}
		if err := change(11 * 3600); err != nil {
			t.Errorf("exactly 12 h from the receive: %v", err)
		}
		if err := change(43201); errorCode(err) != "InvalidParameterValue" {
			t.Errorf("43201 s: %v, want InvalidParameterValue", err)
		}
	})
}

// TestReceiptHandles covers what DeleteMessage and ChangeMessageVisibility do with every kind
// of receipt handle (see the package documentation for the choices made where the API
// reference leaves room).
func TestReceiptHandles(t *testing.T) {
	type outcome struct {
		deleteCode, changeCode string
		deleted                bool // whether DeleteMessage removed the message
	}
	tests := []struct {
		name string
		fifo bool
		// handle receives the message (possibly more than once) and returns the handle to use.
		handle func(t *testing.T, s *Server, url string) string
		want   outcome
	}{
		{"latest receive, in flight", false, func(t *testing.T, s *Server, url string) string {
			return aws.ToString(receive(t, s, url, 1)[0].ReceiptHandle)
		}, outcome{"", "", true}},
		{"earlier receive of a message received again", false, func(t *testing.T, s *Server, url string) string {
			old := aws.ToString(receive(t, s, url, 1)[0].ReceiptHandle)
			time.Sleep(31 * time.Second)
			receive(t, s, url, 1)
			return old
		}, outcome{"", "InvalidParameterValue", false}},
		{"latest receive, visibility timeout over (standard)", false, func(t *testing.T, s *Server, url string) string {
			h := aws.ToString(receive(t, s, url, 1)[0].ReceiptHandle)
			time.Sleep(31 * time.Second)
			return h
		}, outcome{"", "AWS.SimpleQueueService.MessageNotInflight", true}},
		{"latest receive, visibility timeout over (FIFO)", true, func(t *testing.T, s *Server, url string) string {
			h := aws.ToString(receive(t, s, url, 1)[0].ReceiptHandle)
			time.Sleep(31 * time.Second)
			return h
		}, outcome{"InvalidParameterValue", "AWS.SimpleQueueService.MessageNotInflight", false}},
		{"message already deleted", false, func(t *testing.T, s *Server, url string) string {
			h := aws.ToString(receive(t, s, url, 1)[0].ReceiptHandle)
			if _, err := s.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: aws.String(h)}); err != nil {
				t.Fatal(err)
			}
			return h
		}, outcome{"", "InvalidParameterValue", true}},
		{"malformed", false, func(*testing.T, *Server, string) string { return "not-a-handle" }, outcome{"ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid", false}},
		{"another queue's", false, func(t *testing.T, s *Server, url string) string {
			other := createQueue(t, s, "other", nil)
			send(t, s, other, "o")
			return aws.ToString(receive(t, s, other, 1)[0].ReceiptHandle)
		}, outcome{"ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid", false}},
	}
	for _, tt := range tests {
		for _, op := range []string{"delete", "change"} {
			t.Run(tt.name+"/"+op, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					s := New()
					var url string
					if tt.fifo {
						url = createQueue(t, s, "q.fifo", map[string]string{"FifoQueue": "true", "VisibilityTimeout": "30"})
						sendFIFO(t, s, url, "g", "m")
					} else {
						url = createQueue(t, s, "q", map[string]string{"VisibilityTimeout": "30"})
						send(t, s, url, "m")
					}
					h := tt.handle(t, s, url)
					var err error
					want := tt.want.changeCode
					if op == "delete" {
						want = tt.want.deleteCode
						_, err = s.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: aws.String(h)})
						if deleted := len(s.Messages(url)) == 0; deleted != tt.want.deleted {
							t.Errorf("deleted = %v, want %v", deleted, tt.want.deleted)
						}
					} else {
						_, err = s.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: aws.String(h), VisibilityTimeout: 10})
					}
					if got := errorCode(err); got != want {
						t.Errorf("error %q (%v), want %q", got, err, want)
					}
				})
			})
		}
	}
}

// TestAttributeFiltering covers the ReceiveMessage API reference's MessageAttributeNames
// ("All", ".*", "prefix.*", names) and MessageSystemAttributeNames / AttributeNames.
func TestAttributeFiltering(t *testing.T) {
	s := New()
	url := createQueue(t, s, "q", nil)
	str := func(v string) types.MessageAttributeValue {
		return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	attrs := map[string]types.MessageAttributeValue{"a.one": str("1"), "a.two": str("2"), "b": str("3")}
	if _, err := s.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("m"), MessageAttributes: attrs}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		in         sqs.ReceiveMessageInput
		wantAttrs  []string
		wantSystem []string
	}{
		{"nothing asked, nothing given", sqs.ReceiveMessageInput{}, nil, nil},
		{"All", sqs.ReceiveMessageInput{MessageAttributeNames: []string{"All"}}, []string{"a.one", "a.two", "b"}, nil},
		{".*", sqs.ReceiveMessageInput{MessageAttributeNames: []string{".*"}}, []string{"a.one", "a.two", "b"}, nil},
		{"prefix", sqs.ReceiveMessageInput{MessageAttributeNames: []string{"a.*"}}, []string{"a.one", "a.two"}, nil},
		{"names", sqs.ReceiveMessageInput{MessageAttributeNames: []string{"b", "missing"}}, []string{"b"}, nil},
		{"system attributes by name", sqs.ReceiveMessageInput{MessageSystemAttributeNames: []types.MessageSystemAttributeName{"SentTimestamp", "ApproximateReceiveCount"}},
			nil, []string{"ApproximateReceiveCount", "SentTimestamp"}},
		{"system attributes by the deprecated AttributeNames", sqs.ReceiveMessageInput{AttributeNames: []types.QueueAttributeName{"All"}},
			nil, []string{"ApproximateFirstReceiveTimestamp", "ApproximateReceiveCount", "SenderId", "SentTimestamp"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in
			in.QueueUrl, in.VisibilityTimeout = aws.String(url), 1
			out, err := s.ReceiveMessage(context.Background(), &in)
			if err != nil || len(out.Messages) != 1 {
				t.Fatalf("receive: %v, %v", out, err)
			}
			m := out.Messages[0]
			var gotAttrs, gotSystem []string
			for k := range m.MessageAttributes {
				gotAttrs = append(gotAttrs, k)
			}
			for k := range m.Attributes {
				gotSystem = append(gotSystem, k)
			}
			slices.Sort(gotAttrs)
			slices.Sort(gotSystem)
			if diff := cmp.Diff(tt.wantAttrs, gotAttrs); diff != "" {
				t.Errorf("message attributes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantSystem, gotSystem); diff != "" {
				t.Errorf("system attributes (-want +got):\n%s", diff)
			}
			if want := md5OfAttributes(m.MessageAttributes); aws.ToString(m.MD5OfMessageAttributes) != want {
				t.Errorf("MD5OfMessageAttributes %q does not cover the attributes returned (%q)", aws.ToString(m.MD5OfMessageAttributes), want)
			}
			// Let the message come back for the next case.
			if _, err := s.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestMD5OfMessageAttributes checks the digest against the worked examples of the
// npm package aws-md5-of-message-attributes, which follows "Calculating the MD5 message
// digest for message attributes".
func TestMD5OfMessageAttributes(t *testing.T) {
	str := func(dt, v string) types.MessageAttributeValue {
		return types.MessageAttributeValue{DataType: aws.String(dt), StringValue: aws.String(v)}
	}
	bin := types.MessageAttributeValue{DataType: aws.String("Binary"), BinaryValue: []byte("Hello binary world!")}
	tests := []struct {
		name  string
		attrs map[string]types.MessageAttributeValue
		want  string
	}{
		{"none", nil, ""},
		{"string", map[string]types.MessageAttributeValue{"attribName1": str("String", "attribValue 1")}, "19e27d4e946b072f3f58da80d94fd778"},
		{"custom number", map[string]types.MessageAttributeValue{"customNumberTypeAttrib": str("Number.float", "4563442423554324324264524243.32543234")}, "9fe1b90bbd9965bdf77bac517c7d2495"},
		{"binary", map[string]types.MessageAttributeValue{"binaryAttribute": bin}, "31a92b15d92f8db860eda32aceb656c3"},
		{"all three", map[string]types.MessageAttributeValue{
			"attribName1":            str("String", "attribValue 1"),
			"customNumberTypeAttrib": str("Number.float", "4563442423554324324264524243.32543234"),
			"binaryAttribute":        bin,
		}, "c932db14a896c663f83c260297d594ff"},
	}
	s := New()
	url := createQueue(t, s, "q", nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := s.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("body"), MessageAttributes: tt.attrs})
			if err != nil {
				t.Fatal(err)
			}
			if got := aws.ToString(out.MD5OfMessageAttributes); got != tt.want {
				t.Errorf("MD5OfMessageAttributes = %q, want %q", got, tt.want)
			}
			if got := aws.ToString(out.MD5OfMessageBody); got != "841a2d689ad86bd1611447453c22c6fc" {
				t.Errorf("MD5OfMessageBody = %q, want md5(\"body\")", got)
			}
		})
	}
}

// TestSendRules covers the SendMessage API reference's rules for a message on a standard
// queue with MaximumMessageSize 1024.
func TestSendRules(t *testing.T) {
	s := New()
	url := createQueue(t, s, "q", map[string]string{"MaximumMessageSize": "1024"})
	str := func(v string) types.MessageAttributeValue {
		return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	many := map[string]types.MessageAttributeValue{}
	for i := range 11 {
		many[string(rune('a'+i))] = str("v")
	}
	tests := []struct {
		name  string
		body  string
		attrs map[string]types.MessageAttributeValue
		delay int32
		dedup *string
		want  string
	}{
		{"empty body", "", nil, 0, nil, "MissingParameter"},
		{"NUL", "a\x00b", nil, 0, nil, "InvalidMessageContents"},
		{"U+0008", "\b", nil, 0, nil, "InvalidMessageContents"},
		{"U+FFFE", "\uFFFE", nil, 0, nil, "InvalidMessageContents"},
		{"invalid UTF-8", "\xff", nil, 0, nil, "InvalidMessageContents"},
		{"tab, newline, return", "\t\n\r", nil, 0, nil, ""},
		{"above U+FFFF, which SQS accepts", "\U0001F600 \U0010FFFD", nil, 0, nil, ""},
		{"exactly the maximum size", strings.Repeat("x", 1024), nil, 0, nil, ""},
		{"one byte more", strings.Repeat("x", 1025), nil, 0, nil, "InvalidParameterValue"},
		{"attributes count toward the size", strings.Repeat("x", 1020), map[string]types.MessageAttributeValue{"k": str("v")}, 0, nil, "InvalidParameterValue"},
		{"ten attributes", "x", map[string]types.MessageAttributeValue{"a": str("1"), "b": str("2"), "c": str("3"), "d": str("4"), "e": str("5"),
			"f": str("6"), "g": str("7"), "h": str("8"), "i": str("9"), "j": str("10")}, 0, nil, ""},
		{"eleven attributes", "x", many, 0, nil, "InvalidParameterValue"},
		{"reserved attribute name", "x", map[string]types.MessageAttributeValue{"AWS.x": str("v")}, 0, nil, "InvalidParameterValue"},
		{"attribute name with ..", "x", map[string]types.MessageAttributeValue{"a..b": str("v")}, 0, nil, "InvalidParameterValue"},
		{"unknown data type", "x", map[string]types.MessageAttributeValue{"k": {DataType: aws.String("Text"), StringValue: aws.String("v")}}, 0, nil, "InvalidParameterValue"},
		{"not a number", "x", map[string]types.MessageAttributeValue{"k": {DataType: aws.String("Number"), StringValue: aws.String("ten")}}, 0, nil, "InvalidParameterValue"},
		{"a number", "x", map[string]types.MessageAttributeValue{"k": {DataType: aws.String("Number.int"), StringValue: aws.String("-1.5e3")}}, 0, nil, ""},
		{"empty attribute value", "x", map[string]types.MessageAttributeValue{"k": str("")}, 0, nil, "InvalidParameterValue"},
		{"delay 900", "x", nil, 900, nil, ""},
		{"delay 901", "x", nil, 901, nil, "InvalidParameterValue"},
		{"deduplication id on a standard queue", "x", nil, 0, aws.String("d"), "InvalidParameterValue"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.SendMessage(context.Background(), &sqs.SendMessageInput{
				QueueUrl: aws.String(url), MessageBody: aws.String(tt.body), MessageAttributes: tt.attrs,
				DelaySeconds: tt.delay, MessageDeduplicationId: tt.dedup,
			})
			if got := errorCode(err); got != tt.want {
				t.Errorf("error %q (%v), want %q", got, err, tt.want)
			}
		})
	}
}

// TestDelay: a message is delayed by its own DelaySeconds, else by the queue's.
func TestDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New()
		url := createQueue(t, s, "q", map[string]string{"DelaySeconds": "10"})
		send(t, s, url, "queue delay")
		if _, err := s.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("own delay"), DelaySeconds: 5}); err != nil {
			t.Fatal(err)
		}
		if got := attribute(t, s, url, "ApproximateNumberOfMessagesDelayed"); got != "2" {
			t.Errorf("delayed = %s, want 2", got)
		}
		time.Sleep(5 * time.Second)
		if got := bodies(receive(t, s, url, 10)); !slices.Equal(got, []string{"own delay"}) {
			t.Errorf("after 5 s: %v", got)
		}
		time.Sleep(5 * time.Second)
		if got := bodies(receive(t, s, url, 10)); !slices.Equal(got, []string{"queue delay"}) {
			t.Errorf("after 10 s: %v", got)
		}
	})
}

func attribute(t *testing.T, s *Server, url, name string) string {
	t.Helper()
	out, err := s.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeName(name)}})
	if err != nil {
		t.Fatal(err)
	}
	return out.Attributes[name]
}

// TestReceiveParameters covers the ReceiveMessage API reference's ranges.
func TestReceiveParameters(t *testing.T) {
	s := New()
	url := createQueue(t, s, "q.fifo", map[string]string{"FifoQueue": "true"})
	tests := []struct {
		name string
		in   sqs.ReceiveMessageInput
		want string
	}{
		{"11 messages", sqs.ReceiveMessageInput{MaxNumberOfMessages: 11}, "InvalidParameterValue"},
		{"-1 messages", sqs.ReceiveMessageInput{MaxNumberOfMessages: -1}, "InvalidParameterValue"},
		{"wait 21 s", sqs.ReceiveMessageInput{WaitTimeSeconds: 21}, "InvalidParameterValue"},
		{"visibility 43201 s", sqs.ReceiveMessageInput{VisibilityTimeout: 43201}, "InvalidParameterValue"},
		{"attempt id of 129 characters", sqs.ReceiveMessageInput{ReceiveRequestAttemptId: aws.String(strings.Repeat("a", 129))}, "InvalidParameterValue"},
		{"10 messages, 43200 s", sqs.ReceiveMessageInput{MaxNumberOfMessages: 10, VisibilityTimeout: 43200}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in
			in.QueueUrl = aws.String(url)
			_, err := s.ReceiveMessage(context.Background(), &in)
			if got := errorCode(err); got != tt.want {
				t.Errorf("error %q (%v), want %q", got, err, tt.want)
			}
		})
	}
}

// TestLongPoll covers "Amazon SQS short and long polling": a long poll returns as soon as a
// message is available, or empty when the wait ends, and gives up when its context ends.
func TestLongPoll(t *testing.T) {
	poll := func(s *Server, ctx context.Context, url string, wait int32) (chan []string, chan error) {
		got, errs := make(chan []string, 1), make(chan error, 1)
		go func() {
			out, err := s.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: wait})
			errs <- err
			if err == nil {
				got <- bodies(out.Messages)
			}
		}()
		return got, errs
	}
	t.Run("returns when a message is sent", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := New()
			url := createQueue(t, s, "q", nil)
			start := time.Now()
			got, errs := poll(s, context.Background(), url, 20)
			time.Sleep(7 * time.Second)
			synctest.Wait() // the poll is durably blocked
			send(t, s, url, "m")
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
			if b := <-got; !slices.Equal(b, []string{"m"}) || time.Since(start) != 7*time.Second {
				t.Errorf("got %v after %v", b, time.Since(start))
			}
		})
	})
	t.Run("returns empty when the wait ends", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := New()
			url := createQueue(t, s, "q", map[string]string{"ReceiveMessageWaitTimeSeconds": "12"})
			start := time.Now()
			got, errs := poll(s, context.Background(), url, 0) // the queue's wait time
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
			if b := <-got; len(b) != 0 || time.Since(start) != 12*time.Second {
				t.Errorf("got %v after %v, want nothing after 12s", b, time.Since(start))
			}
		})
	})
	t.Run("returns when a visibility timeout ends", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := New()
			url := createQueue(t, s, "q", map[string]string{"VisibilityTimeout": "5"})
			send(t, s, url, "m")
			receive(t, s, url, 1)
			start := time.Now()
			got, errs := poll(s, context.Background(), url, 20)
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
			if b := <-got; !slices.Equal(b, []string{"m"}) || time.Since(start) != 5*time.Second {
				t.Errorf("got %v after %v, want [m] after 5s", b, time.Since(start))
			}
		})
	})
	t.Run("gives up when its context ends", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := New()
			url := createQueue(t, s, "q", nil)
			ctx, cancel := context.WithCancel(context.Background())
			_, errs := poll(s, ctx, url, 20)
			time.Sleep(time.Second)
			cancel()
			if err := <-errs; !errors.Is(err, context.Canceled) {
				t.Errorf("error %v, want context.Canceled", err)
			}
			send(t, s, url, "m")
			if n := len(inFlightBodies(s, url)); n != 0 {
				t.Errorf("the abandoned poll took %d messages", n)
			}
		})
	})
}

// TestQueues covers CreateQueue, GetQueueUrl, GetQueueAttributes and SetQueueAttributes.
func TestQueues(t *testing.T) {
	ctx := context.Background()
	s := New()
	std := createQueue(t, s, "std", nil)
	fifo := createQueue(t, s, "f.fifo", map[string]string{"FifoQueue": "true"})
	if std != "http://sqs.us-east-1.localhost/000000000000/std" {
		t.Errorf("queue URL %s", std)
	}
	t.Run("create errors", func(t *testing.T) {
		tests := []struct {
			name  string
			qname string
			attrs map[string]string
			want  string
		}{
			{"FIFO name without .fifo", "plain", map[string]string{"FifoQueue": "true"}, "InvalidParameterValue"},
			{".fifo name of a standard queue", "x.fifo", nil, "InvalidParameterValue"},
			{"81 characters", strings.Repeat("n", 81), nil, "InvalidParameterValue"},
			{"unknown attribute", "q2", map[string]string{"Colour": "blue"}, "InvalidAttributeName"},
			{"FIFO attribute on a standard queue", "q2", map[string]string{"ContentBasedDeduplication": "true"}, "InvalidAttributeName"},
			{"visibility out of range", "q2", map[string]string{"VisibilityTimeout": "43201"}, "InvalidAttributeValue"},
			{"existing name, other attributes", "std", map[string]string{"VisibilityTimeout": "5"}, "QueueAlreadyExists"},
			{"redrive to a missing queue", "q2", map[string]string{"RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:nope","maxReceiveCount":3}`}, "InvalidParameterValue"},
			{"FIFO queue redriving to a standard one", "q2.fifo", map[string]string{"FifoQueue": "true", "RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:std","maxReceiveCount":3}`}, "InvalidParameterValue"},
			{"standard queue redriving to a FIFO one", "q2", map[string]string{"RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:f.fifo","maxReceiveCount":3}`}, "InvalidParameterValue"},
			{"maxReceiveCount 0", "q2", map[string]string{"RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:std","maxReceiveCount":0}`}, "InvalidParameterValue"},
			{"existing name, same attributes", "std", map[string]string{"VisibilityTimeout": "30"}, ""},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				_, err := s.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(tt.qname), Attributes: tt.attrs})
				if got := errorCode(err); got != tt.want {
					t.Errorf("error %q (%v), want %q", got, err, tt.want)
				}
			})
		}
	})
	t.Run("GetQueueUrl", func(t *testing.T) {
		out, err := s.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("f.fifo")})
		if err != nil || aws.ToString(out.QueueUrl) != fifo {
			t.Errorf("GetQueueUrl: %v, %v", out, err)
		}
		_, err = s.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("nope")})
		var missing *types.QueueDoesNotExist
		if !errors.As(err, &missing) || errorCode(err) != "AWS.SimpleQueueService.NonExistentQueue" {
			t.Errorf("unknown queue: %v", err)
		}
		if _, err := s.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String("http://sqs.us-east-1.localhost:9/000000000000/nope")}); errorCode(err) != "AWS.SimpleQueueService.NonExistentQueue" {
			t.Errorf("unknown queue URL: %v", err)
		}
		if _, err := s.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String("std")}); errorCode(err) != "InvalidAddress" {
			t.Errorf("a name as URL: %v", err)
		}
	})
	t.Run("GetQueueAttributes", func(t *testing.T) {
		out, err := s.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(fifo), AttributeNames: []types.QueueAttributeName{"All"}})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{
			"QueueArn": "arn:aws:sqs:us-east-1:000000000000:f.fifo", "FifoQueue": "true", "ContentBasedDeduplication": "false",
			"VisibilityTimeout": "30", "DelaySeconds": "0", "ReceiveMessageWaitTimeSeconds": "0", "MessageRetentionPeriod": "345600",
			"MaximumMessageSize": "1048576", "ApproximateNumberOfMessages": "0", "ApproximateNumberOfMessagesNotVisible": "0",
			"ApproximateNumberOfMessagesDelayed": "0", "DeduplicationScope": "queue", "FifoThroughputLimit": "perQueue", "SqsManagedSseEnabled": "true",
		}
		for k, v := range want {
			if out.Attributes[k] != v {
				t.Errorf("%s = %q, want %q", k, out.Attributes[k], v)
			}
		}
		// A standard queue has no FIFO attributes.
		std, _ := s.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(std), AttributeNames: []types.QueueAttributeName{"All"}})
		for _, k := range []string{"FifoQueue", "ContentBasedDeduplication", "RedrivePolicy"} {
			if v, ok := std.Attributes[k]; ok {
				t.Errorf("standard queue has %s = %q", k, v)
			}
		}
		if _, err := s.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(fifo), AttributeNames: []types.QueueAttributeName{"Colour"}}); errorCode(err) != "InvalidAttributeName" {
			t.Errorf("unknown attribute: %v", err)
		}
	})
	t.Run("counts", func(t *testing.T) {
		url := createQueue(t, s, "counts", nil)
		for _, b := range []string{"a", "b", "c"} {
			send(t, s, url, b)
		}
		if _, err := s.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("later"), DelaySeconds: 60}); err != nil {
			t.Fatal(err)
		}
		receive(t, s, url, 1)
		got := []string{
			attribute(t, s, url, "ApproximateNumberOfMessages"),
			attribute(t, s, url, "ApproximateNumberOfMessagesNotVisible"),
			attribute(t, s, url, "ApproximateNumberOfMessagesDelayed"),
		}
		if !slices.Equal(got, []string{"2", "1", "1"}) {
			t.Errorf("visible, not visible, delayed = %v, want [2 1 1]", got)
		}
	})
	t.Run("SetQueueAttributes", func(t *testing.T) {
		url := createQueue(t, s, "settable", nil)
		dlqARN := queueARN(t, s, std)
		set := func(attrs map[string]string) error {
			_, err := s.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(url), Attributes: attrs})
			return err
		}
		if err := set(map[string]string{"VisibilityTimeout": "60", "RedrivePolicy": `{"deadLetterTargetArn":"` + dlqARN + `","maxReceiveCount":"4"}`}); err != nil {
			t.Fatal(err)
		}
		if got := attribute(t, s, url, "RedrivePolicy"); got != `{"deadLetterTargetArn":"`+dlqARN+`","maxReceiveCount":4}` {
			t.Errorf("RedrivePolicy = %s", got)
		}
		if got := attribute(t, s, url, "VisibilityTimeout"); got != "60" {
			t.Errorf("VisibilityTimeout = %s", got)
		}
		if err := set(map[string]string{"FifoQueue": "true"}); errorCode(err) != "InvalidAttributeName" {
			t.Errorf("setting FifoQueue: %v", err)
		}
		if err := set(map[string]string{"RedrivePolicy": ""}); err != nil || attribute(t, s, url, "RedrivePolicy") != "" {
			t.Errorf("removing the redrive policy: %v", err)
		}
	})
	t.Run("ListDeadLetterSourceQueues", func(t *testing.T) {
		dlq := createQueue(t, s, "dlq", nil)
		arn := queueARN(t, s, dlq)
		for _, name := range []string{"src-c", "src-a", "src-b"} {
			createQueue(t, s, name, map[string]string{"RedrivePolicy": `{"deadLetterTargetArn":"` + arn + `","maxReceiveCount":3}`})
		}
		var pages [][]string
		var token *string
		for {
			out, err := s.ListDeadLetterSourceQueues(ctx, &sqs.ListDeadLetterSourceQueuesInput{QueueUrl: aws.String(dlq), MaxResults: aws.Int32(2), NextToken: token})
			if err != nil {
				t.Fatal(err)
			}
			pages = append(pages, out.QueueUrls)
			if token = out.NextToken; token == nil {
				break
			}
		}
		base := "http://sqs.us-east-1.localhost/000000000000/"
		want := [][]string{{base + "src-a", base + "src-b"}, {base + "src-c"}}
		if diff := cmp.Diff(want, pages); diff != "" {
			t.Errorf("pages (-want +got):\n%s", diff)
		}
	})
}

// TestPurgeAndRetention covers PurgeQueue (one purge per 60 seconds) and the end of a
// message's retention period.
func TestPurgeAndRetention(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := New()
		url := createQueue(t, s, "q", map[string]string{"MessageRetentionPeriod": "60"})
		send(t, s, url, "a")
		send(t, s, url, "b")
		receive(t, s, url, 1)
		if _, err := s.PurgeQueue(ctx, &sqs.PurgeQueueInput{QueueUrl: aws.String(url)}); err != nil {
			t.Fatal(err)
		}
		if n := len(s.Messages(url)); n != 0 {
			t.Errorf("%d messages after a purge", n)
		}
		time.Sleep(59 * time.Second)
		if _, err := s.PurgeQueue(ctx, &sqs.PurgeQueueInput{QueueUrl: aws.String(url)}); errorCode(err) != "AWS.SimpleQueueService.PurgeQueueInProgress" {
			t.Errorf("second purge within 60 s: %v", err)
		}
		time.Sleep(time.Second)
		if _, err := s.PurgeQueue(ctx, &sqs.PurgeQueueInput{QueueUrl: aws.String(url)}); err != nil {
			t.Errorf("purge after 60 s: %v", err)
		}
		send(t, s, url, "old")
		time.Sleep(59 * time.Second)
		if n := len(s.Messages(url)); n != 1 {
			t.Errorf("%d messages before the retention period ends, want 1", n)
		}
		time.Sleep(time.Second)
		if n := len(s.Messages(url)); n != 0 {
			t.Errorf("%d messages after the retention period, want 0", n)
		}
	})
}

// TestFaults covers Fail, Calls and calls with a done context.
func TestFaults(t *testing.T) {
	ctx := context.Background()
	t.Run("Before fails without effect", func(t *testing.T) {
		s := New()
		url := createQueue(t, s, "q", nil)
		s.Fail("SendMessage", 2, Before)
		for range 2 {
			_, err := s.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("m")})
			if errorCode(err) != "InternalFailure" {
				t.Fatalf("send: %v, want InternalFailure", err)
			}
		}
		if n := len(s.Messages(url)); n != 0 {
			t.Errorf("%d messages after failed sends", n)
		}
		send(t, s, url, "m")
		if n := s.Calls("SendMessage"); n != 3 {
			t.Errorf("Calls = %d, want 3", n)
		}
	})
	t.Run("After takes effect and loses the answer", func(t *testing.T) {
		s := New()
		url := createQueue(t, s, "q", nil)
		send(t, s, url, "m")
		h := receive(t, s, url, 1)[0].ReceiptHandle
		s.Fail("DeleteMessage", 1, After)
		if _, err := s.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: h}); errorCode(err) != "InternalFailure" {
			t.Fatalf("delete: %v", err)
		}
		if n := len(s.Messages(url)); n != 0 {
			t.Errorf("message not deleted by the call whose answer was lost")
		}
		if _, err := s.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: h}); err != nil {
			t.Errorf("retried delete: %v", err)
		}
	})
	t.Run("n <= 0 cancels", func(t *testing.T) {
		s := New()
		s.Fail("CreateQueue", 3, Before)
		s.Fail("CreateQueue", 0, Before)
		createQueue(t, s, "q", nil)
	})
	t.Run("a done context fails as the SDK does, uncounted", func(t *testing.T) {
		s := New()
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := s.CreateQueue(cctx, &sqs.CreateQueueInput{QueueName: aws.String("q")}); !errors.Is(err, context.Canceled) {
			t.Errorf("error %v, want context.Canceled", err)
		}
		if n := s.Calls("CreateQueue"); n != 0 {
			t.Errorf("Calls = %d", n)
		}
	})
	t.Run("an unknown operation panics", func(t *testing.T) {
		defer func() {
			if recover() == nil {
				t.Error("no panic")
			}
		}()
		New().Fail("ReceiveMessages", 1, Before)
	})
}

// TestInFlightLimit covers InFlightLimit, SQS's 12-hour limit scaled down: a change past it
// is refused with SQS's error, the message is visible again at the limit whatever the
// receive asked, the next receive counts, and the first receive's handle no longer deletes.
func TestInFlightLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New(InFlightLimit(3 * time.Second))
		url := createQueue(t, s, "q", map[string]string{"VisibilityTimeout": "30"})
		send(t, s, url, "m")
		first := receive(t, s, url, 1)[0]
		if state := s.Messages(url)[0]; !state.VisibleAt.Equal(time.Now().Add(3 * time.Second)) {
			t.Fatalf("visible at %v after a 30 s receive: want the limit, 3 s", state.VisibleAt.Sub(time.Now()))
		}
		change := func(handle *string, secs int32) error {
			_, err := s.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: handle, VisibilityTimeout: secs})
			return err
		}
		time.Sleep(time.Second)
		if err := change(first.ReceiptHandle, 2); err != nil {
			t.Fatalf("a change to the limit: %v", err)
		}
		err := change(first.ReceiptHandle, 3)
		if errorCode(err) != "InvalidParameterValue" || !strings.Contains(err.Error(), "Total VisibilityTimeout for the message is beyond the limit") {
			t.Fatalf("a change past the limit: %v, want SQS's InvalidParameterValue", err)
		}
		time.Sleep(2 * time.Second)
		again := receive(t, s, url, 1)
		if len(again) != 1 || again[0].Attributes["ApproximateReceiveCount"] != "2" {
			t.Fatalf("receive at the limit: %+v", again)
		}
		if _, err := s.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: first.ReceiptHandle}); err != nil {
			t.Fatalf("delete with the stale handle: %v", err)
		}
		if n := len(s.Messages(url)); n != 1 {
			t.Fatalf("the stale handle's delete deleted the message")
		}
	})
}
