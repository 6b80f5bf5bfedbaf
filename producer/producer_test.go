package producer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/internal/sqsspec"
	"github.com/watchbot/watchbot/internal/testing/fakesqs"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

func TestCheck(t *testing.T) {
	std := Limits{MaxSize: 100}
	fifo := Limits{MaxSize: 100, FIFO: true}
	attr := func(typ, v string) map[string]types.MessageAttributeValue {
		return map[string]types.MessageAttributeValue{"a": {DataType: aws.String(typ), StringValue: aws.String(v)}}
	}
	tests := []struct {
		name   string
		m      Message
		limits Limits
		want   string
	}{
		{"plain", Message{Body: "hello"}, std, ""},
		{"non-ASCII and astral", Message{Body: "héllo 日本 😀"}, std, ""},
		{"empty", Message{}, std, "empty"},
		{"NUL", Message{Body: "a\x00b"}, std, "U+0000 at byte 1"},
		{"invalid UTF-8", Message{Body: "a\xffb"}, std, "invalid UTF-8 at byte 1"},
		{"U+FFFE", Message{Body: "\uFFFE"}, std, "U+FFFE"},
		{"size counts attributes", Message{Body: strings.Repeat("x", 90), Attributes: attr("String", "0123456789")}, std, "MaximumMessageSize of 100"},
		{"exactly the limit", Message{Body: strings.Repeat("x", 100)}, std, ""},
		{"fifo needs group", Message{Body: "x"}, fifo, "group id is required"},
		{"standard takes a tenant group", Message{Body: "x", GroupID: "g"}, std, ""},
		{"standard refuses dedup id", Message{Body: "x", DeduplicationID: "d"}, std, "only for FIFO"},
		{"group too long", Message{Body: "x", GroupID: strings.Repeat("g", 129)}, std, "at most 128"},
		{"fifo refuses delay", Message{Body: "x", GroupID: "g", Delay: time.Second}, fifo, "no per-message delay"},
		{"delay too long", Message{Body: "x", Delay: 16 * time.Minute}, std, "outside"},
		{"number attr", Message{Body: "x", Attributes: attr("Number", "1.5e3")}, std, ""},
		{"bad number", Message{Body: "x", Attributes: attr("Number", "twelve")}, std, "not a number"},
		{"custom type", Message{Body: "x", Attributes: attr("String.json", "{}")}, std, ""},
		{"unknown type", Message{Body: "x", Attributes: attr("Text", "x")}, std, "not String, Number or Binary"},
		{"empty value", Message{Body: "x", Attributes: attr("String", "")}, std, "non-empty"},
		{"reserved name", Message{Body: "x", Attributes: map[string]types.MessageAttributeValue{"AWS.x": {DataType: aws.String("String"), StringValue: aws.String("v")}}}, std, "reserved"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Check(tt.m, tt.limits)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Check = %v, want %q", err, tt.want)
			}
		})
	}
	eleven := map[string]types.MessageAttributeValue{}
	for i := range 11 {
		eleven[fmt.Sprintf("a%d", i)] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String("v")}
	}
	if err := CheckAttributes(eleven); err == nil {
		t.Error("11 attributes accepted")
	}
}

func TestParseAttribute(t *testing.T) {
	tests := []struct {
		in, name, typ, value string
		bin                  []byte
		wantErr              string
	}{
		{in: "kind=bad", name: "kind", typ: "String", value: "bad"},
		{in: "k=a=b,c", name: "k", typ: "String", value: "a=b,c"},
		{in: "n:Number=42", name: "n", typ: "Number", value: "42"},
		{in: "b:Binary=AAEC", name: "b", typ: "Binary", bin: []byte{0, 1, 2}},
		{in: "novalue", wantErr: "NAME=VALUE"},
		{in: "n:Number=x", wantErr: "not a number"},
		{in: "b:Binary=!!", wantErr: "base64"},
		{in: "t:Text=x", wantErr: "String, Number or Binary"},
		{in: "bad name=x", wantErr: "only letters"},
		{in: "k=", wantErr: "non-empty"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			name, v, err := ParseAttribute(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if name != tt.name || aws.ToString(v.DataType) != tt.typ || aws.ToString(v.StringValue) != tt.value || string(v.BinaryValue) != string(tt.bin) {
				t.Fatalf("got %s %s %q %v", name, aws.ToString(v.DataType), aws.ToString(v.StringValue), v.BinaryValue)
			}
		})
	}
}

func TestBatches(t *testing.T) {
	bodies := func(sizes ...int) []Message {
		var ms []Message
		for _, n := range sizes {
			ms = append(ms, Message{Body: strings.Repeat("x", n)})
		}
		return ms
	}
	many := make([]int, 25)
	for i := range many {
		many[i] = 10
	}
	tests := []struct {
		name string
		msgs []Message
		want [][2]int
	}{
		{"none", nil, nil},
		{"25 small", bodies(many...), [][2]int{{0, 10}, {10, 20}, {20, 25}}},
		{"bytes split", bodies(600<<10, 600<<10, 100, 500<<10), [][2]int{{0, 1}, {1, 3}, {3, 4}}},
		{"exactly 1 MiB", bodies(512<<10, 512<<10, 1), [][2]int{{0, 2}, {2, 3}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Batches(tt.msgs)
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("Batches = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestReadLines(t *testing.T) {
	got, err := ReadLines(strings.NewReader("a\r\nb\n\nc"), "stdin")
	if err != nil {
		t.Fatal(err)
	}
	want := []Body{{Text: "a", Source: "stdin line 1"}, {Text: "b", Source: "stdin line 2"}, {Text: "", Source: "stdin line 3"}, {Text: "c", Source: "stdin line 4"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("ReadLines = %v, want %v", got, want)
	}
	_, err = ReadLines(strings.NewReader("ok\n"+strings.Repeat("x", 1<<20+10)+"\n"), "stdin")
	if err == nil || !strings.Contains(err.Error(), "stdin line 2: longer than 1 MiB") {
		t.Fatalf("long line: %v", err)
	}
}

// countingSends is the real client, counting SendMessageBatch calls.
type countingSends struct {
	*sqs.Client
	calls atomic.Int32
}

func (c *countingSends) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	c.calls.Add(1)
	return c.Client.SendMessageBatch(ctx, in, opts...)
}

func TestDeliverAgainstEmulator(t *testing.T) {
	emu := testenv.SQS(t)
	q := emu.NewQueue(t, testenv.QueueOptions{})
	api := &countingSends{Client: emu.Client()}
	var lines strings.Builder
	for i := range 25 {
		fmt.Fprintf(&lines, "message %d ✓\n", i)
	}
	bodies, err := ReadLines(strings.NewReader(lines.String()), "stdin")
	if err != nil {
		t.Fatal(err)
	}
	_, kind, _ := ParseAttribute("kind=test")
	req := Request{QueueURL: q.URL, Bodies: bodies, Attributes: map[string]types.MessageAttributeValue{"kind": kind}}
	results, err := Deliver(t.Context(), api, req)
	if err != nil {
		t.Fatal(err)
	}
	if n := api.calls.Load(); n != 3 {
		t.Errorf("%d SendMessageBatch calls for 25 messages, want 3", n)
	}
	ids := map[string]bool{}
	for i, r := range results {
		if r.Err != nil || r.MessageID == "" {
			t.Errorf("message %d: %+v", i, r)
		}
		ids[r.MessageID] = true
	}
	if len(ids) != 25 {
		t.Errorf("%d distinct ids, want 25", len(ids))
	}
	info, err := queueattr.Describe(t.Context(), api, q.URL)
	if err != nil || info.Visible != 25 {
		t.Errorf("queue holds %d, %v; want 25", info.Visible, err)
	}

	// A bad line sends nothing and names the line.
	before := api.calls.Load()
	req.Bodies = append(req.Bodies[:2:2], Body{Text: "", Source: "stdin line 3"}, Body{Text: "bad\x01", Source: "stdin line 4"})
	_, err = Deliver(t.Context(), api, req)
	var bad *InputError
	if !errors.As(err, &bad) || len(bad.Problems) != 2 || !strings.Contains(bad.Problems[0].Error(), "stdin line 3") || !strings.Contains(bad.Problems[1].Error(), "stdin line 4: body: character U+0001") {
		t.Fatalf("Deliver with bad lines = %v", err)
	}
	if api.calls.Load() != before {
		t.Error("a request with bad lines sent something")
	}
}

// TestDeliverFairQueue sends a tenant's group id to a standard queue: SQS fair queues take
// MessageGroupId on standard queues as the tenant ("Amazon SQS fair queues", SQS Developer
// Guide), and fakesqs keeps it as SQS does (fauxqs drops it).
func TestDeliverFairQueue(t *testing.T) {
	fake := fakesqs.New()
	out, err := fake.CreateQueue(t.Context(), &sqs.CreateQueueInput{QueueName: aws.String("tenants")})
	if err != nil {
		t.Fatal(err)
	}
	url := aws.ToString(out.QueueUrl)
	req := Request{QueueURL: url, Bodies: []Body{{Text: "x", Source: "--body"}, {Text: "y", Source: "stdin line 2"}}, GroupID: "tenant-a"}
	if _, err := Deliver(t.Context(), fake, req); err != nil {
		t.Fatalf("group id on a standard queue: %v", err)
	}
	got, err := fake.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
	if err != nil || len(got.Messages) != 2 {
		t.Fatalf("receive: %d messages, %v", len(got.Messages), err)
	}
	for _, m := range got.Messages {
		if g := m.Attributes["MessageGroupId"]; g != "tenant-a" {
			t.Errorf("message %s has group %q, want tenant-a", aws.ToString(m.Body), g)
		}
		if d, ok := m.Attributes["MessageDeduplicationId"]; ok {
			t.Errorf("a standard queue's message has a deduplication id %q", d)
		}
	}
}

func TestDeliverFIFO(t *testing.T) {
	emu := testenv.SQS(t)
	c := emu.Client()
	q := emu.NewQueue(t, testenv.QueueOptions{FIFO: true})
	req := Request{QueueURL: q.URL, Bodies: []Body{{Text: "same", Source: "stdin line 1"}, {Text: "same", Source: "stdin line 2"}}}
	var bad *InputError
	if _, err := Deliver(t.Context(), c, req); !errors.As(err, &bad) || !strings.Contains(err.Error(), "GroupID is required") {
		t.Fatalf("FIFO without group: %v", err)
	}
	req.GroupID = "g"
	results, err := Deliver(t.Context(), c, req)
	if err != nil {
		t.Fatal(err)
	}
	// Content-based deduplication is on for the test queues: the same body twice is one message.
	if results[0].MessageID != results[1].MessageID {
		t.Errorf("content-based deduplication: ids %s and %s differ", results[0].MessageID, results[1].MessageID)
	}
	req.Delay = time.Second
	if _, err := Deliver(t.Context(), c, req); !errors.As(err, &bad) || !strings.Contains(err.Error(), "Delay is not allowed") {
		t.Errorf("FIFO with delay: %v", err)
	}
}

// failingBatch fails some entries and drops one from the answer.
type failingBatch struct{}

func (failingBatch) SendMessageBatch(_ context.Context, in *sqs.SendMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	out := &sqs.SendMessageBatchOutput{}
	for i, e := range in.Entries {
		switch i {
		case 1:
			out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InvalidMessageContents"), Message: aws.String("nope"), SenderFault: true})
		case 2: // no answer at all
		default:
			out.Successful = append(out.Successful, types.SendMessageBatchResultEntry{Id: e.Id, MessageId: aws.String("id-" + aws.ToString(e.MessageBody))})
		}
	}
	return out, nil
}

func TestSendBatchReportsEachEntry(t *testing.T) {
	got := SendBatch(t.Context(), failingBatch{}, "u", []Message{{Body: "a"}, {Body: "b"}, {Body: "c"}, {Body: "d"}})
	if got[0].MessageID != "id-a" || got[3].MessageID != "id-d" {
		t.Errorf("successes: %+v", got)
	}
	var ee *sqsspec.EntryError
	if !errors.As(got[1].Err, &ee) || ee.Code != "InvalidMessageContents" || !ee.SenderFault {
		t.Errorf("entry 1: %v", got[1].Err)
	}
	if got[2].Err == nil {
		t.Error("an entry SQS did not answer counted as sent")
	}
}
