package lambda

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	lambdaevents "github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

var fifo = Source{QueueARN: "arn:aws:sqs:eu-west-1:123456789012:jobs.fifo", Region: "eu-west-1"}

// threeMessages are received from a FIFO queue: a string and a number attribute, a binary
// one, and one with an AWSTraceHeader.
func threeMessages() []types.Message {
	sys := func(n, group string, extra ...string) map[string]string {
		m := map[string]string{"ApproximateReceiveCount": n, "SentTimestamp": "1764633600000", "SenderId": "AIDAEXAMPLE",
			"ApproximateFirstReceiveTimestamp": "1764633600100", "MessageGroupId": group, "MessageDeduplicationId": "d-" + n,
			"SequenceNumber": "1860000000000000000" + n, "NotPassedOn": "x"}
		for i := 0; i+1 < len(extra); i += 2 {
			m[extra[i]] = extra[i+1]
		}
		return m
	}
	return []types.Message{
		{MessageId: aws.String("m1"), ReceiptHandle: aws.String("rh1"), Body: aws.String(`{"n":1,"html":"<b>&"}`), MD5OfBody: aws.String("26625e7a74e20aa602c6f4c58de1f932"),
			Attributes: sys("1", "g1"), MessageAttributes: map[string]types.MessageAttributeValue{
				"tenant": {DataType: aws.String("String"), StringValue: aws.String("acme")},
				"size":   {DataType: aws.String("Number.int"), StringValue: aws.String("42")}}},
		{MessageId: aws.String("m2"), ReceiptHandle: aws.String("rh2"), Body: aws.String("two"), Attributes: sys("2", "g1"),
			MessageAttributes: map[string]types.MessageAttributeValue{"blob": {DataType: aws.String("Binary"), BinaryValue: []byte{0, 1, 0xfe}}}},
		{MessageId: aws.String("m3"), ReceiptHandle: aws.String("rh3"), Body: aws.String("three"),
			Attributes: sys("1", "g2", "AWSTraceHeader", "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1")},
	}
}

// The event of three messages, as a golden file, and as aws-lambda-go's events.SQSEvent
// reads it.
func TestEvent(t *testing.T) {
	var records []Record
	for i, m := range threeMessages() {
		body := aws.ToString(m.Body)
		if i == 1 {
			body = "two, from its payload"
		}
		records = append(records, NewRecord(m, body, fifo))
	}
	events, held, tooLarge := Events(records, MaxResponse)
	if len(events) != 1 || len(held[0]) != 3 || len(tooLarge) != 0 {
		t.Fatalf("%d events, %d too large, want one of 3 records", len(events), len(tooLarge))
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, events[0], "", "  "); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "event.golden")
	if *update {
		if err := os.WriteFile(golden, pretty.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if pretty.String() != string(want) {
		t.Errorf("event:\n%s\nwant (go test -update to rewrite):\n%s", pretty.String(), want)
	}

	var ev lambdaevents.SQSEvent
	if err := json.Unmarshal(events[0], &ev); err != nil {
		t.Fatal(err)
	}
	r0, r1, r2 := ev.Records[0], ev.Records[1], ev.Records[2]
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"messageId", r0.MessageId, "m1"},
		{"receiptHandle", r1.ReceiptHandle, "rh2"},
		{"body from the payload", r1.Body, "two, from its payload"},
		{"md5OfBody of the given body", r1.Md5OfBody, "e6f46b788df65ba23f3959e1b1590e02"},
		{"eventSource", r2.EventSource, "aws:sqs"},
		{"eventSourceARN", r2.EventSourceARN, fifo.QueueARN},
		{"awsRegion", r2.AWSRegion, "eu-west-1"},
		{"receive count", r1.Attributes["ApproximateReceiveCount"], "2"},
		{"group", r2.Attributes["MessageGroupId"], "g2"},
		{"dedup id", r0.Attributes["MessageDeduplicationId"], "d-1"},
		{"sequence number", r0.Attributes["SequenceNumber"], "18600000000000000001"},
		{"trace header", r2.Attributes["AWSTraceHeader"], "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"},
		{"unlisted attribute", r0.Attributes["NotPassedOn"], ""},
		{"string attribute", *r0.MessageAttributes["tenant"].StringValue, "acme"},
		{"number type", r0.MessageAttributes["size"].DataType, "Number.int"},
		{"binary attribute", string(r1.MessageAttributes["blob"].BinaryValue), "\x00\x01\xfe"},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
}

// An event stays within the limit: records go to the next event when the current is full,
// in order, and one too large for any event is set apart.
func TestEventsLimit(t *testing.T) {
	rec := func(id string, size int) Record {
		return NewRecord(types.Message{MessageId: aws.String(id), Body: aws.String(strings.Repeat("x", size))}, strings.Repeat("x", size), fifo)
	}
	one := len(encodeRecord(rec("a", 1000)))
	limit := len(`{"Records":[]}`) + 2*one + 1 // two records and their comma
	records := []Record{rec("a", 1000), rec("b", 1000), rec("c", 1000), rec("huge", 3000), rec("d", 1000)}
	events, held, tooLarge := Events(records, limit)
	var got []string
	for i, e := range events {
		if len(e) > limit || !json.Valid(e) {
			t.Errorf("event %d: %d bytes (limit %d), valid %v", i, len(e), limit, json.Valid(e))
		}
		var ids []string
		for _, r := range held[i] {
			ids = append(ids, r.MessageID)
		}
		got = append(got, strings.Join(ids, ","))
	}
	if strings.Join(got, " ") != "a,b c,d" || len(tooLarge) != 1 || tooLarge[0].MessageID != "huge" {
		t.Errorf("events %q, too large %d, want [a,b c,d] and huge apart", got, len(tooLarge))
	}
}

func TestFunctionARN(t *testing.T) {
	for queue, want := range map[string]string{
		"arn:aws:sqs:eu-west-1:123456789012:jobs":     "arn:aws:lambda:eu-west-1:123456789012:function:fn",
		"arn:aws-cn:sqs:cn-north-1:123456789012:jobs": "arn:aws-cn:lambda:cn-north-1:123456789012:function:fn",
		"arn:aws:sqs:us-east-1:000000000000:q.fifo":   "arn:aws:lambda:us-east-1:000000000000:function:fn",
		"not an arn": "arn:aws:lambda:::function:fn",
	} {
		if got := FunctionARN(queue, "fn"); got != want {
			t.Errorf("FunctionARN(%q) = %q, want %q", queue, got, want)
		}
	}
}

func TestTraceID(t *testing.T) {
	for _, tc := range []struct{ name, header, traceparent, want string }{
		{"AWSTraceHeader first", "Root=1-a-b", "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01", "Root=1-a-b"},
		{"sampled traceparent", "", "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01", "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"},
		{"unsampled traceparent", "", "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-00", "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=0"},
		{"malformed traceparent", "", "00-zz-53995c3f42cd8ad8-01", ""},
		{"upper-case hex", "", "00-5759E988BD862E3FE1BE46A994272793-53995c3f42cd8ad8-01", ""},
		{"neither", "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := TraceID(tc.header, tc.traceparent); got != tc.want {
				t.Errorf("TraceID = %q, want %q", got, tc.want)
			}
		})
	}
}
