package deadletter

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/google/go-cmp/cmp"

	"github.com/watchbot/watchbot/internal/dlqattr"
	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/internal/setting"
	"github.com/watchbot/watchbot/producer"
)

// fakeQueues knows queue attributes and answers ListDeadLetterSourceQueues, which the emulator
// does not support, page by page. The other calls are not used by Locate.
type fakeQueues struct {
	API
	attrs   map[string]map[string]string // by URL
	sources map[string][]string          // DLQ URL → source URLs
	listErr error
	calls   int
}

func (f *fakeQueues) GetQueueAttributes(_ context.Context, in *sqs.GetQueueAttributesInput, _ ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	a, ok := f.attrs[aws.ToString(in.QueueUrl)]
	if !ok {
		return nil, errors.New("AWS.SimpleQueueService.NonExistentQueue")
	}
	return &sqs.GetQueueAttributesOutput{Attributes: a}, nil
}

func (f *fakeQueues) ListDeadLetterSourceQueues(_ context.Context, in *sqs.ListDeadLetterSourceQueuesInput, _ ...func(*sqs.Options)) (*sqs.ListDeadLetterSourceQueuesOutput, error) {
	f.calls++
	if f.listErr != nil {
		return nil, f.listErr
	}
	all := f.sources[aws.ToString(in.QueueUrl)]
	start, _ := strconv.Atoi(aws.ToString(in.NextToken))
	end := min(start+2, len(all)) // pages of two, to exercise NextToken
	out := &sqs.ListDeadLetterSourceQueuesOutput{QueueUrls: all[start:end]}
	if end < len(all) {
		out.NextToken = aws.String(strconv.Itoa(end))
	}
	return out, nil
}

const (
	fakeDLQ = "https://sqs.us-east-1.amazonaws.com/123456789012/jobs-dlq"
	fakeSrc = "https://sqs.us-east-1.amazonaws.com/123456789012/jobs"
)

func newFake(sources ...string) *fakeQueues {
	f := &fakeQueues{
		attrs: map[string]map[string]string{
			fakeDLQ: {"QueueArn": "arn:aws:sqs:us-east-1:123456789012:jobs-dlq", "ApproximateNumberOfMessages": "4"},
		},
		sources: map[string][]string{fakeDLQ: sources},
	}
	for _, s := range sources {
		f.attrs[s] = map[string]string{
			"QueueArn":      "arn:aws:sqs:us-east-1:123456789012:" + queueattr.NameFromURL(s),
			"RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:123456789012:jobs-dlq","maxReceiveCount":5}`,
		}
	}
	return f
}

func TestLocateByDeadLetterSourceQueues(t *testing.T) {
	t.Parallel()
	t.Run("one source is the target", func(t *testing.T) {
		f := newFake(fakeSrc)
		q, err := Locate(t.Context(), f, Location{DLQURL: fakeDLQ})
		if err != nil {
			t.Fatal(err)
		}
		target, err := q.Target()
		if err != nil || target.URL != fakeSrc {
			t.Fatalf("Target() = %v, %v; want %s", target.URL, err, fakeSrc)
		}
		if q.DLQ.Visible != 4 {
			t.Errorf("DLQ visible = %d", q.DLQ.Visible)
		}
	})
	t.Run("several sources need --to", func(t *testing.T) {
		srcs := []string{fakeSrc, fakeSrc + "-b", fakeSrc + "-c"}
		f := newFake(srcs...)
		q, err := Locate(t.Context(), f, Location{DLQURL: fakeDLQ})
		if err != nil {
			t.Fatal(err)
		}
		_, err = q.Target()
		if err == nil || !strings.Contains(err.Error(), "choose the replay target with To") || !strings.Contains(err.Error(), fakeSrc+"-c") {
			t.Fatalf("Target() = %v, want an error naming all three sources and asking for --to", err)
		}
		if f.calls != 2 {
			t.Errorf("%d list calls, want 2 pages", f.calls)
		}
	})
	t.Run("no source means not a DLQ", func(t *testing.T) {
		_, err := Locate(t.Context(), newFake(), Location{DLQURL: fakeDLQ})
		if !errors.Is(err, ErrNotDeadLetterQueue) || !strings.Contains(err.Error(), "no queue's redrive policy names it") {
			t.Fatalf("Locate = %v, want ErrNotDeadLetterQueue", err)
		}
	})
	t.Run("listing refused", func(t *testing.T) {
		f := newFake(fakeSrc)
		f.listErr = errors.New("AccessDenied")
		q, err := Locate(t.Context(), f, Location{DLQURL: fakeDLQ})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := q.Target(); err == nil || !strings.Contains(err.Error(), "AccessDenied") || !strings.Contains(err.Error(), "name the replay target with To") {
			t.Fatalf("Target() = %v, want the list error and a hint at --to", err)
		}
	})
	t.Run("--to skips the listing", func(t *testing.T) {
		f := newFake(fakeSrc)
		if _, err := Locate(t.Context(), f, Location{DLQURL: fakeDLQ, To: fakeSrc}); err != nil {
			t.Fatal(err)
		}
		if f.calls != 0 {
			t.Errorf("%d list calls with --to, want 0", f.calls)
		}
	})
}

func TestLocationValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		loc  Location
		want string
	}{
		{"nothing", Location{}, "give QueueURL (the source queue; WATCHBOT_QUEUE_URL gives it too) or DLQURL (the dead-letter queue)"},
		{"both", Location{QueueURL: fakeSrc, DLQURL: fakeDLQ}, "give either QueueURL or DLQURL, not both"},
		{"--to with --queue-url", Location{QueueURL: fakeSrc, To: fakeSrc}, "To is only for DLQURL: with QueueURL, messages are replayed to that queue"},
		{"bad url", Location{DLQURL: "jobs-dlq"}, "DLQURL: "},
		{"bad --to", Location{DLQURL: fakeDLQ, To: "ftp://x/y"}, "To: "},
		{"queue", Location{QueueURL: fakeSrc}, ""},
		{"dlq and to", Location{DLQURL: fakeDLQ, To: fakeSrc}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.loc.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if _, typed := errors.AsType[setting.Error](err); !typed || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("Validate() = %v, want a setting.Error %q", err, tt.want)
			}
		})
	}
}

func TestCauseOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		attrs  map[string]types.MessageAttributeValue
		want   dlqattr.Cause
		wantOK bool
	}{
		{"separate", map[string]types.MessageAttributeValue{dlqattr.Reason: str("exit 3"), dlqattr.SourceQueue: str(fakeSrc), dlqattr.Attempts: num("4")}, dlqattr.Cause{Reason: "exit 3", SourceQueue: fakeSrc, Attempts: 4}, true},
		{"packed", map[string]types.MessageAttributeValue{dlqattr.Packed: str(`{"reason":"too old","sourceQueue":"` + fakeSrc + `","attempts":2}`)}, dlqattr.Cause{Reason: "too old", SourceQueue: fakeSrc, Attempts: 2}, true},
		{"redrive", map[string]types.MessageAttributeValue{"kind": str("x")}, dlqattr.Cause{}, false},
		{"none", nil, dlqattr.Cause{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := dlqattr.Read(tt.attrs)
			if got != tt.want || ok != tt.wantOK {
				t.Fatalf("CauseOf = %+v, %v; want %+v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestReplayMessage(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("X", 3600))
	stamp := str("2026-01-02T02:04:05Z")
	t.Run("strips watchbot attributes and stamps", func(t *testing.T) {
		m := Message{ID: "dlq-1", Body: "b", Attributes: map[string]types.MessageAttributeValue{
			"kind": str("bad"), "blob": bin([]byte{1, 2}), dlqattr.Reason: str("r"), dlqattr.SourceQueue: str("q"), dlqattr.Attempts: num("3"), "watchbot-other": str("x"),
			dlqattr.OriginalMessageID: str("orig-1"),
		}}
		got := replayMessage(m, false, 1<<20, now)
		want := map[string]types.MessageAttributeValue{"kind": str("bad"), "blob": bin([]byte{1, 2}), dlqattr.ReplayedAt: stamp,
			dlqattr.ReplayedFrom: str("dlq-1"), dlqattr.OriginalMessageID: str("orig-1")}
		if diff := cmp.Diff(want, got.Attributes, attrCmp); diff != "" {
			t.Error(diff)
		}
		if got.GroupID != "" || got.DeduplicationID != "" {
			t.Errorf("standard target got group %q dedup %q", got.GroupID, got.DeduplicationID)
		}
	})
	t.Run("ten attributes leave no room for the stamp", func(t *testing.T) {
		attrs := map[string]types.MessageAttributeValue{}
		for i := range 10 {
			attrs[fmt.Sprintf("a%d", i)] = str("v")
		}
		got := replayMessage(Message{Body: "b", Attributes: attrs}, false, 1<<20, now)
		if len(got.Attributes) != 10 {
			t.Fatalf("%d attributes, want the 10 originals", len(got.Attributes))
		}
		if _, ok := got.Attributes[dlqattr.ReplayedAt]; ok {
			t.Error("stamp added beyond SQS's 10 attributes")
		}
	})
	t.Run("eight attributes: the lineage is packed", func(t *testing.T) {
		attrs := map[string]types.MessageAttributeValue{}
		for i := range 8 {
			attrs[fmt.Sprintf("a%d", i)] = str("v")
		}
		got := replayMessage(Message{ID: "dlq-2", Body: "b", Attributes: attrs}, false, 1<<20, now)
		want := dlqattr.Lineage{OriginalMessageID: "dlq-2", ReplayedFrom: "dlq-2", ReplayedAt: "2026-01-02T02:04:05Z"}
		if len(got.Attributes) != 9 || dlqattr.ReadLineage(got.Attributes) != want {
			t.Fatalf("attributes = %v, want 8 originals and %s holding %+v", got.Attributes, dlqattr.ReplayPacked, want)
		}
	})
	t.Run("packed form frees its slot", func(t *testing.T) {
		attrs := map[string]types.MessageAttributeValue{dlqattr.Packed: str(`{"reason":"r"}`)}
		for i := range 9 {
			attrs[fmt.Sprintf("a%d", i)] = str("v")
		}
		got := replayMessage(Message{Body: "b", Attributes: attrs}, false, 1<<20, now)
		if len(got.Attributes) != 10 || got.Attributes[dlqattr.ReplayPacked].StringValue == nil {
			t.Fatalf("attributes = %v, want 9 originals and the packed lineage", got.Attributes)
		}
	})
	t.Run("stamp left out when it would outgrow the queue", func(t *testing.T) {
		got := replayMessage(Message{Body: strings.Repeat("x", 1024)}, false, 1030, now)
		if len(got.Attributes) != 0 {
			t.Errorf("attributes = %v, want none", got.Attributes)
		}
	})
	t.Run("standard keeps a fair queue's tenant, no dedup id", func(t *testing.T) {
		m := Message{ID: "dlq-4", Body: "b", System: map[string]string{"MessageGroupId": "tenant-a"}}
		got := replayMessage(m, false, 1<<20, now)
		if got.GroupID != "tenant-a" || got.DeduplicationID != "" {
			t.Errorf("group %q dedup %q; want tenant-a and none", got.GroupID, got.DeduplicationID)
		}
		if err := producer.Check(got, producer.Limits{MaxSize: 1 << 20}); err != nil {
			t.Error(err)
		}
	})
	t.Run("FIFO keeps the group, fresh dedup id", func(t *testing.T) {
		m := Message{ID: "dlq-3", Body: "b", System: map[string]string{"MessageGroupId": "g1", "MessageDeduplicationId": "old"}}
		a := replayMessage(m, true, 1<<20, now)
		b := replayMessage(m, true, 1<<20, now)
		if a.GroupID != "g1" || a.DeduplicationID == "" || a.DeduplicationID == "old" || a.DeduplicationID == b.DeduplicationID {
			t.Errorf("group %q dedup %q/%q", a.GroupID, a.DeduplicationID, b.DeduplicationID)
		}
		if err := producer.Check(a, producer.Limits{MaxSize: 1 << 20, FIFO: true}); err != nil {
			t.Error(err)
		}
	})
}

func TestFilter(t *testing.T) {
	t.Parallel()
	m := Message{Body: `{"user":42,"op":"resize"}`, Attributes: map[string]types.MessageAttributeValue{
		"kind": str("bad"), "n": num("7"), "blob": bin([]byte{1, 2, 3}),
		dlqattr.Packed: str(`{"reason":"timeout","sourceQueue":"q","attempts":3}`),
	}}
	tests := []struct {
		name  string
		body  string
		attrs []string
		want  bool
	}{
		{"everything", "", nil, true},
		{"body", `"op":"resize"`, nil, true},
		{"body miss", `^resize`, nil, false},
		{"attr", "", []string{"kind=bad"}, true},
		{"attr miss", "", []string{"kind=ok"}, false},
		{"absent attr", "", []string{"tenant=a"}, false},
		{"number", "", []string{"n=7"}, true},
		{"binary as base64", "", []string{"blob=AQID"}, true},
		{"packed reason", "", []string{"watchbot-reason=timeout", "watchbot-attempts=3"}, true},
		{"all must match", `user`, []string{"kind=bad", "n=8"}, false},
		{"value with =", "", []string{"kind=bad=x"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := ParseFilter(tt.body, tt.attrs)
			if err != nil {
				t.Fatal(err)
			}
			if got := f.Match(m); got != tt.want {
				t.Fatalf("Match = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestParseFilterRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		body  string
		attrs []string
		want  string
	}{
		{"invalid regex", "(", nil, `Filter.Body "(" is not a valid regular expression: `},
		{"attr without =", "", []string{"kind"}, `Filter.Attrs "kind": want NAME=VALUE`},
		{"contradicting attrs", "", []string{"k=a", "k=b"}, `Filter.Attrs k is given twice`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseFilter(tt.body, tt.attrs)
			if _, typed := errors.AsType[setting.Error](err); !typed || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("ParseFilter = %v, want a setting.Error %q", err, tt.want)
			}
		})
	}
}

func TestReplayConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		change func(*ReplayConfig)
		want   string
	}{
		{"default", func(*ReplayConfig) {}, ""},
		{"negative rate", func(c *ReplayConfig) { c.Rate = -1 }, "Rate (-1) must be a positive number"},
		{"negative limit", func(c *ReplayConfig) { c.Limit = -1 }, "Limit (-1) must not be negative"},
		{"short hold", func(c *ReplayConfig) { c.Hold = 0 }, "hold"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultReplayConfig()
			tt.change(&c)
			err := c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("Validate() = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestPacer(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(4) // one message every 250 ms
		start := time.Now()
		for _, n := range []int{4, 4, 2} {
			if err := p.wait(t.Context(), n); err != nil {
				t.Fatal(err)
			}
		}
		// The first 4 go at once, the next 4 after 1 s, the last 2 after 2 s.
		if got := time.Since(start); got != 2*time.Second {
			t.Errorf("10 messages at 4/s waited %v, want 2s", got)
		}
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if err := p.wait(ctx, 1); !errors.Is(err, context.Canceled) {
			t.Errorf("wait after cancel = %v", err)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(0)
		start := time.Now()
		for range 100 {
			_ = p.wait(t.Context(), 10)
		}
		if time.Since(start) != 0 {
			t.Error("an unlimited pacer waited")
		}
	})
}

func TestParseRecord(t *testing.T) {
	t.Parallel()
	std := producer.Limits{MaxSize: 1024}
	fifo := producer.Limits{MaxSize: 1024, FIFO: true}
	tests := []struct {
		name   string
		line   string
		limits producer.Limits
		want   string
	}{
		{"minimal", `{"body":"x"}`, std, ""},
		{"binary", `{"body":"x","messageAttributes":{"b":{"dataType":"Binary","binaryValue":"AAE="}}}`, std, ""},
		{"binary given as string", `{"body":"x","messageAttributes":{"b":{"dataType":"Binary","stringValue":"AAE="}}}`, std, "binaryValue"},
		{"bad base64", `{"body":"x","messageAttributes":{"b":{"dataType":"Binary","binaryValue":"***"}}}`, std, "malformed JSON"},
		{"two values", `{"body":"x"} {"body":"y"}`, std, "more than one value"},
		{"fifo group from groupId", `{"body":"x","groupId":"g"}`, fifo, ""},
		{"fifo group from system attributes", `{"body":"x","attributes":{"MessageGroupId":"g"}}`, fifo, ""},
		{"fifo without group", `{"body":"x"}`, fifo, "group id is required"},
		{"standard keeps the tenant", `{"body":"x","groupId":"g"}`, std, ""},
		{"standard keeps the tenant from system attributes", `{"body":"x","attributes":{"MessageGroupId":"g"}}`, std, ""},
		{"too big", `{"body":"` + strings.Repeat("y", 1025) + `"}`, std, "MaximumMessageSize"},
		{"unknown field", `{"body":"x","bodyy":"y"}`, std, "unknown field"},
		{"deadLetter is informative", `{"body":"x","deadLetter":{"reason":"r"}}`, std, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := parseRecord([]byte(tt.line), tt.limits)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if tt.limits.FIFO && (m.GroupID != "g" || m.DeduplicationID == "") {
					t.Errorf("FIFO message group %q dedup %q", m.GroupID, m.DeduplicationID)
				}
				if !tt.limits.FIFO && m.DeduplicationID != "" {
					t.Errorf("standard message got dedup id %q", m.DeduplicationID)
				}
				if !tt.limits.FIFO && strings.Contains(tt.line, `"g"`) != (m.GroupID == "g") {
					t.Errorf("standard message group %q from %s", m.GroupID, tt.line)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("parseRecord = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	t.Parallel()
	tests := []struct {
		state      TriageState
		answer     string
		wantState  TriageState
		wantAction TriageAction
	}{
		{Choosing, "r\n", Choosing, ActionReplay},
		{Choosing, "Replay", Choosing, ActionReplay},
		{Choosing, "k", Choosing, ActionKeep},
		{Choosing, "next", Choosing, ActionKeep},
		{Choosing, "s", Choosing, ActionShowBody},
		{Choosing, " body ", Choosing, ActionShowBody},
		{Choosing, "q", Choosing, ActionQuit},
		{Choosing, "d", ConfirmingDelete, ActionAskDelete},
		{Choosing, "", Choosing, ActionHelp},
		{Choosing, "?", Choosing, ActionHelp},
		{Choosing, "y", Choosing, ActionHelp},
		{ConfirmingDelete, "y", Choosing, ActionDelete},
		{ConfirmingDelete, "YES\n", Choosing, ActionDelete},
		{ConfirmingDelete, "", Choosing, ActionCancelDelete},
		{ConfirmingDelete, "n", Choosing, ActionCancelDelete},
		{ConfirmingDelete, "d", Choosing, ActionCancelDelete},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d/%q", tt.state, tt.answer), func(t *testing.T) {
			s, a := Decide(tt.state, tt.answer)
			if s != tt.wantState || a != tt.wantAction {
				t.Fatalf("Decide = %v, %v; want %v, %v", s, a, tt.wantState, tt.wantAction)
			}
		})
	}
	if Prompt(ConfirmingDelete) == Prompt(Choosing) {
		t.Error("the delete confirmation has the same prompt as the choice")
	}
}
