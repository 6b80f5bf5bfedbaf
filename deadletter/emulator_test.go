package deadletter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/google/go-cmp/cmp"

	"github.com/watchbot/watchbot/internal/dlqattr"
	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

func str(s string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(s)}
}

func num(s string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("Number"), StringValue: aws.String(s)}
}

func bin(b []byte) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("Binary"), BinaryValue: b}
}

// deadLetter sends n messages straight into the DLQ as the supervisor does: body, the
// message's own attributes, and the cause written by dlqattr.With. Messages whose index bad
// returns true carry kind=bad, the others kind=ok. Every fourth message carries eight
// attributes of its own, which leaves dlqattr.With too few slots for three and makes it pack the
// cause into watchbot-deadletter. It returns each body's own attributes.
func deadLetter(t *testing.T, c *sqs.Client, q testenv.Queue, n int, bad func(int) bool) map[string]map[string]types.MessageAttributeValue {
	t.Helper()
	sent := map[string]map[string]types.MessageAttributeValue{}
	var letters []testenv.Letter
	for i := range n {
		kind := "ok"
		if bad(i) {
			kind = "bad"
		}
		own := map[string]types.MessageAttributeValue{
			"kind":  str(kind),
			"n":     num(strconv.Itoa(i)),
			"trace": bin([]byte{0, 1, 2, byte(i), 0xff}),
		}
		if i%4 == 3 {
			for j := range 5 {
				own["pad"+strconv.Itoa(j)] = str("x")
			}
		}
		attrs, _ := dlqattr.With(own, dlqattr.Cause{Reason: fmt.Sprintf("exit 3 #%d", i), SourceQueue: q.URL, Attempts: 3})
		if _, packed := attrs[dlqattr.Packed]; packed != (i%4 == 3) {
			t.Fatalf("message %d: dlqattr.With packed the cause: %v, want %v", i, packed, i%4 == 3)
		}
		l := testenv.Letter{Body: fmt.Sprintf(`{"job":%d,"kind":%q,"text":"héllo wörld ✓"}`, i, kind), Attributes: attrs}
		if strings.HasSuffix(q.DLQURL, ".fifo") {
			l.Group = "group-" + strconv.Itoa(i%3)
		}
		letters = append(letters, l)
		sent[l.Body] = own
	}
	testenv.DeadLetter(t, c, q, letters...)
	return sent
}

// drain receives every message of url (deleting it) and returns them by body.
func drain(t *testing.T, c *sqs.Client, url string) map[string]types.Message {
	t.Helper()
	got := map[string]types.Message{}
	for _, m := range testenv.Drain(t, c, url, 10*time.Second) {
		got[aws.ToString(m.Body)] = m
	}
	return got
}

// visible returns the visible messages of url and reports any in flight as a test error.
func visible(t *testing.T, c *sqs.Client, url string) int64 {
	t.Helper()
	d := testenv.Depth(t, c, url)
	if d.InFlight != 0 {
		t.Errorf("%s: %d messages still in flight, want every message visible again", queueattr.NameFromURL(url), d.InFlight)
	}
	return d.Visible
}

var attrCmp = cmp.Comparer(func(a, b types.MessageAttributeValue) bool {
	return aws.ToString(a.DataType) == aws.ToString(b.DataType) && aws.ToString(a.StringValue) == aws.ToString(b.StringValue) && bytes.Equal(a.BinaryValue, b.BinaryValue)
})

func testConfig() ReplayConfig {
	cfg := DefaultReplayConfig()
	cfg.Hold = time.Minute
	return cfg
}

func TestReplayMatchAttrMovesOnlyMatchingMessages(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	c := emu.Client()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	sent := deadLetter(t, c, q, 25, func(i int) bool { return i%5 == 0 })
	queues, err := Locate(t.Context(), c, Location{QueueURL: q.URL})
	if err != nil {
		t.Fatal(err)
	}

	dry := testConfig()
	dry.Filter = mustFilter(t, "", "kind=bad")
	dry.DryRun = true
	var listing bytes.Buffer
	dry.Out = &listing
	sum, err := Replay(t.Context(), c, queues, dry)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Summary{Replayed: 5, Skipped: 20, DryRun: true}); !cmp.Equal(sum, want) {
		t.Errorf("dry run summary = %+v, want %+v", sum, want)
	}
	if n := strings.Count(listing.String(), "would replay"); n != 5 {
		t.Errorf("dry run listed %d messages, want 5:\n%s", n, listing.String())
	}
	if !strings.Contains(listing.String(), "(reason: exit 3 #0)") {
		t.Errorf("dry run listing lacks the reason:\n%s", listing.String())
	}
	if v := visible(t, c, q.DLQURL); v != 25 {
		t.Fatalf("after dry run the DLQ holds %d visible messages, want 25", v)
	}
	if v := visible(t, c, q.URL); v != 0 {
		t.Fatalf("after dry run the source holds %d messages, want 0", v)
	}

	cfg := testConfig()
	cfg.Filter = mustFilter(t, "", "kind=bad")
	stamp := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	cfg.Now = func() time.Time { return stamp }
	sum, err = Replay(t.Context(), c, queues, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Summary{Replayed: 5, Skipped: 20}); !cmp.Equal(sum, want) {
		t.Errorf("summary = %+v, want %+v", sum, want)
	}
	if v := visible(t, c, q.DLQURL); v != 20 {
		t.Errorf("DLQ holds %d visible messages, want 20", v)
	}
	replayed := drain(t, c, q.URL)
	if len(replayed) != 5 {
		t.Fatalf("source got %d messages, want 5", len(replayed))
	}
	for body, m := range replayed {
		own, ok := sent[body]
		if !ok {
			t.Errorf("unexpected body %q", body)
			continue
		}
		got := map[string]types.MessageAttributeValue{}
		for k, v := range m.MessageAttributes {
			if !strings.HasPrefix(k, dlqattr.Prefix) {
				got[k] = v
			}
		}
		if diff := cmp.Diff(own, got, attrCmp); diff != "" {
			t.Errorf("attributes of %q (-want +got):\n%s", body, diff)
		}
		// The helper dead-letters without an original id, so the DLQ id is the original.
		if l := dlqattr.ReadLineage(m.MessageAttributes); l.ReplayedAt != "2026-03-04T05:06:07Z" || l.ReplayedFrom == "" || l.OriginalMessageID != l.ReplayedFrom {
			t.Errorf("lineage of %q = %+v, want the DLQ id as both and the replay time", body, l)
		}
	}
	for _, m := range drain(t, c, q.DLQURL) {
		if aws.ToString(m.MessageAttributes["kind"].StringValue) != "ok" {
			t.Errorf("a kind=bad message stayed in the DLQ: %s", aws.ToString(m.Body))
		}
	}
}

func TestReplayBodyRegexLimitAndPackedReason(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	c := emu.Client()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	deadLetter(t, c, q, 12, func(int) bool { return false })
	queues, err := Locate(t.Context(), c, Location{DLQURL: q.DLQURL, To: q.URL})
	if err != nil {
		t.Fatal(err)
	}
	// Messages 3, 7 and 11 carry the packed form; the filter must see the reason inside it.
	cfg := testConfig()
	cfg.Filter = mustFilter(t, "", "watchbot-reason=exit 3 #7")
	sum, err := Replay(t.Context(), c, queues, cfg)
	if err != nil || sum.Replayed != 1 || sum.Skipped != 11 {
		t.Fatalf("replay by packed reason = %+v, %v; want 1 replayed, 11 skipped", sum, err)
	}
	cfg = testConfig()
	cfg.Filter = mustFilter(t, `"job":1\d`)
	cfg.Limit = 1
	sum, err = Replay(t.Context(), c, queues, cfg)
	if err != nil || sum.Replayed != 1 {
		t.Fatalf("replay with --limit 1 = %+v, %v; want 1 replayed", sum, err)
	}
	got := drain(t, c, q.URL)
	if len(got) != 2 {
		t.Fatalf("source got %d messages, want 2", len(got))
	}
	for body, m := range got {
		for name := range m.MessageAttributes {
			if strings.HasPrefix(name, dlqattr.Prefix) && name != dlqattr.ReplayedAt && name != dlqattr.ReplayedFrom && name != dlqattr.OriginalMessageID && name != dlqattr.ReplayPacked {
				t.Errorf("%q kept attribute %s", body, name)
			}
		}
	}
	if v := visible(t, c, q.DLQURL); v != 10 {
		t.Errorf("DLQ holds %d, want 10", v)
	}
}

// failingSends is the real client with SendMessageBatch failing the entries whose body
// contains poison.
type failingSends struct {
	*sqs.Client
	poison string
}

func (f failingSends) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	pass := *in
	pass.Entries = nil
	var failed []types.BatchResultErrorEntry
	for _, e := range in.Entries {
		if strings.Contains(aws.ToString(e.MessageBody), f.poison) {
			failed = append(failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InternalError"), Message: aws.String("injected"), SenderFault: false})
			continue
		}
		pass.Entries = append(pass.Entries, e)
	}
	out := &sqs.SendMessageBatchOutput{}
	if len(pass.Entries) > 0 {
		real, err := f.Client.SendMessageBatch(ctx, &pass, opts...)
		if err != nil {
			return nil, err
		}
		out = real
	}
	out.Failed = append(out.Failed, failed...)
	return out, nil
}

func TestReplaySendFailureLeavesMessageInDLQ(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	c := emu.Client()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	deadLetter(t, c, q, 6, func(int) bool { return true })
	api := failingSends{Client: c, poison: `"job":4,`}
	queues, err := Locate(t.Context(), api, Location{QueueURL: q.URL})
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	var errs bytes.Buffer
	cfg.Errs = &errs
	sum, err := Replay(t.Context(), api, queues, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Summary{Replayed: 5, Failed: 1}); !cmp.Equal(sum, want) {
		t.Errorf("summary = %+v, want %+v", sum, want)
	}
	if sum.Err() == nil {
		t.Error("summary.Err() = nil with a failed message")
	}
	if !strings.Contains(errs.String(), "injected") {
		t.Errorf("failure not reported: %q", errs.String())
	}
	left := drain(t, c, q.DLQURL)
	if len(left) != 1 {
		t.Fatalf("DLQ holds %d messages, want the 1 whose send failed", len(left))
	}
	for body, m := range left {
		if !strings.Contains(body, `"job":4,`) {
			t.Errorf("DLQ kept %q, want job 4", body)
		}
		if _, ok := m.MessageAttributes[dlqattr.Reason]; !ok {
			t.Errorf("the message left in the DLQ lost its attributes: %v", m.MessageAttributes)
		}
	}
	if n := len(drain(t, c, q.URL)); n != 5 {
		t.Errorf("source got %d, want 5", n)
	}
}

func TestReplayWholeCallFailureLeavesEverything(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	c := emu.Client()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	deadLetter(t, c, q, 3, func(int) bool { return true })
	queues, err := Locate(t.Context(), c, Location{QueueURL: q.URL})
	if err != nil {
		t.Fatal(err)
	}
	// Replay to a queue that was deleted meanwhile: every send fails.
	if _, err := c.DeleteQueue(t.Context(), &sqs.DeleteQueueInput{QueueUrl: aws.String(q.URL)}); err != nil {
		t.Fatal(err)
	}
	sum, err := Replay(t.Context(), c, queues, testConfig())
	if err != nil || sum.Failed != 3 || sum.Replayed != 0 {
		t.Fatalf("replay to a vanished queue = %+v, %v; want 3 failed", sum, err)
	}
	if v := visible(t, c, q.DLQURL); v != 3 {
		t.Errorf("DLQ holds %d visible, want 3", v)
	}
}

func TestReplayFIFOKeepsGroupAndIsNotDeduplicated(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	c := emu.Client()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3, FIFO: true})
	sent := deadLetter(t, c, q, 3, func(int) bool { return true })
	// The same bodies were sent to the source minutes ago in real life; content-based
	// deduplication must not swallow the replay.
	for body := range sent {
		if _, err := c.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(q.URL), MessageBody: aws.String(body), MessageGroupId: aws.String("g")}); err != nil {
			t.Fatal(err)
		}
	}
	drain(t, c, q.URL)
	queues, err := Locate(t.Context(), c, Location{QueueURL: q.URL})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := Replay(t.Context(), c, queues, testConfig())
	if err != nil || sum.Replayed != 3 {
		t.Fatalf("replay = %+v, %v", sum, err)
	}
	got := drain(t, c, q.URL)
	if len(got) != 3 {
		t.Fatalf("source got %d messages, want 3", len(got))
	}
	for body, m := range got {
		var i int
		fmt.Sscanf(body, `{"job":%d`, &i)
		if g := m.Attributes["MessageGroupId"]; g != "group-"+strconv.Itoa(i%3) {
			t.Errorf("%q: group %q, want group-%d", body, g, i%3)
		}
	}
}

func TestPeekLeavesTheQueueAsItWas(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	c := emu.Client()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	deadLetter(t, c, q, 25, func(i int) bool { return i < 5 })
	queues, err := Locate(t.Context(), c, Location{QueueURL: q.URL})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	n, err := Peek(t.Context(), c, queues, 12, func(m Message) error { return WriteListing(&out, m, 0) })
	if err != nil || n != 12 {
		t.Fatalf("peek = %d, %v; want 12", n, err)
	}
	if got := strings.Count(out.String(), "id:"); got != 12 {
		t.Errorf("listing shows %d messages, want 12", got)
	}
	if !strings.Contains(out.String(), "reason:   exit 3 #") || !strings.Contains(out.String(), "attr:     kind (String) =") {
		t.Errorf("listing lacks reason or attributes:\n%s", out.String())
	}
	if v := visible(t, c, q.DLQURL); v != 25 {
		t.Errorf("after peek the DLQ holds %d visible, want 25", v)
	}
	counts, err := Count(t.Context(), c, queues)
	if err != nil || counts != (Counts{Visible: 25}) {
		t.Errorf("count = %+v, %v; want 25 visible", counts, err)
	}
	// Peeking again sees all of them again: nothing was consumed, nothing is left hidden.
	n, err = Peek(t.Context(), c, queues, 100, func(Message) error { return nil })
	if err != nil || n != 25 {
		t.Errorf("second peek = %d, %v; want all 25", n, err)
	}
	if info, err := queueattr.Describe(t.Context(), c, q.DLQURL); err != nil || info.Visible != 25 || info.InFlight != 0 {
		t.Errorf("after two peeks the DLQ holds %d visible + %d in flight (%v), want 25 visible", info.Visible, info.InFlight, err)
	}
}

func TestPeekShowsMessagesMovedByRedrive(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	c := emu.Client()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 1})
	if _, err := c.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(q.URL), MessageBody: aws.String("poison")}); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the receive after maxReceiveCount moves it
		out, err := c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.URL)})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range out.Messages {
			if _, err := c.ChangeMessageVisibility(t.Context(), &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(q.URL), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0}); err != nil {
				t.Fatal(err)
			}
		}
	}
	queues, err := Locate(t.Context(), c, Location{QueueURL: q.URL})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	n, err := Peek(t.Context(), c, queues, 5, func(m Message) error { return WriteListing(&out, m, 0) })
	if err != nil || n != 1 {
		t.Fatalf("peek = %d, %v; want the redriven message", n, err)
	}
	if !strings.Contains(out.String(), "moved by the redrive policy") || !strings.Contains(out.String(), "body:     poison") {
		t.Errorf("listing:\n%s", out.String())
	}
}

func TestExportPurgeImportRoundTrip(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	c := emu.Client()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	sent := deadLetter(t, c, q, 7, func(i int) bool { return i == 2 })
	big := strings.Repeat("0123456789abcdef", 200*1024/16-1) + "ünïcødé 日本語 \t\r\n \"quotes\" <&> \\ end"
	bigAttrs := map[string]types.MessageAttributeValue{"blob": bin(bytes.Repeat([]byte{0, 0xfe, 0x80}, 100)), "lang": str("日本語")}
	if _, err := c.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(q.DLQURL), MessageBody: aws.String(big), MessageAttributes: bigAttrs}); err != nil {
		t.Fatal(err)
	}
	sent[big] = bigAttrs
	before := map[string]types.Message{}
	queues, err := Locate(t.Context(), c, Location{QueueURL: q.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Peek(t.Context(), c, queues, 100, func(m Message) error {
		before[m.Body] = types.Message{MessageAttributes: m.Attributes}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := Export(t.Context(), c, queues, f, ExportConfig{Hold: time.Minute})
	if err != nil || sum.Exported != 8 || sum.Deleted != 0 {
		t.Fatalf("export = %+v, %v; want 8 exported", sum, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if v := visible(t, c, q.DLQURL); v != 8 {
		t.Fatalf("export without --delete left %d visible, want 8", v)
	}
	if err := Purge(t.Context(), c, queues); err != nil {
		t.Fatal(err)
	}
	if v := visible(t, c, q.DLQURL); v != 0 {
		t.Fatalf("after purge %d visible", v)
	}
	in, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	isum, err := Import(t.Context(), c, queues, in, ImportConfig{Name: "dlq.jsonl"})
	if err != nil || isum != (ImportSummary{Imported: 8}) {
		t.Fatalf("import = %+v, %v; want 8 imported", isum, err)
	}
	after := drain(t, c, q.DLQURL)
	if len(after) != len(before) {
		t.Fatalf("after import the DLQ holds %d messages, want %d", len(after), len(before))
	}
	for body, m := range before {
		got, ok := after[body]
		if !ok {
			t.Errorf("body of %d bytes not restored byte for byte", len(body))
			continue
		}
		if diff := cmp.Diff(m.MessageAttributes, got.MessageAttributes, attrCmp); diff != "" {
			t.Errorf("attributes not restored (-before +after):\n%s", diff)
		}
	}
	if _, ok := after[big]; !ok {
		t.Error("the 200 KiB body was not restored")
	}
}

func TestExportDeleteWritesBeforeDeleting(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	c := emu.Client()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	deadLetter(t, c, q, 23, func(int) bool { return false })
	queues, err := Locate(t.Context(), c, Location{QueueURL: q.URL})
	if err != nil {
		t.Fatal(err)
	}
	w := &syncRecorder{}
	sum, err := Export(t.Context(), c, queues, w, ExportConfig{Delete: true, Hold: time.Minute})
	if err != nil || sum != (ExportSummary{Exported: 23, Deleted: 23}) {
		t.Fatalf("export --delete = %+v, %v", sum, err)
	}
	if got := bytes.Count(w.synced, []byte("\n")); got != 23 {
		t.Errorf("%d lines were synced before the end, want 23", got)
	}
	if v := visible(t, c, q.DLQURL); v != 0 {
		t.Errorf("DLQ holds %d after export --delete", v)
	}

	// A failing write deletes nothing.
	deadLetter(t, c, q, 3, func(int) bool { return false })
	_, err = Export(t.Context(), c, queues, &syncRecorder{failSync: true}, ExportConfig{Delete: true, Hold: time.Minute})
	if err == nil {
		t.Fatal("export with a failing sync succeeded")
	}
	if v := visible(t, c, q.DLQURL); v != 3 {
		t.Errorf("after a failed sync the DLQ holds %d visible, want all 3", v)
	}
}

type syncRecorder struct {
	buf, synced []byte
	failSync    bool
}

func (s *syncRecorder) Write(p []byte) (int, error) { s.buf = append(s.buf, p...); return len(p), nil }
func (s *syncRecorder) Sync() error {
	if s.failSync {
		return errors.New("disk full")
	}
	s.synced = append(s.synced[:0], s.buf...)
	return nil
}

func TestImportReportsBadLinesAndContinues(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	c := emu.Client()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	queues, err := Locate(t.Context(), c, Location{QueueURL: q.URL})
	if err != nil {
		t.Fatal(err)
	}
	file := strings.Join([]string{
		`{"messageId":"a","body":"first","messageAttributes":{"kind":{"dataType":"String","stringValue":"x"}}}`,
		`{"messageId":"b","body":"trunc`,
		``,
		`{"messageId":"c","body":""}`,
		`{"messageId":"d","body":"bad \u0000 char"}`,
		`{"messageId":"e","body":"typo","messageAtributes":{}}`,
		`{"messageId":"f","body":"` + strings.Repeat("x", 1<<20+1) + `"}`,
		`{"messageId":"g","body":"last","messageAttributes":{"n":{"dataType":"Number","stringValue":"nope"}}}`,
		`{"messageId":"h","body":"really last"}`,
	}, "\n")
	var errs bytes.Buffer
	sum, err := Import(t.Context(), c, queues, strings.NewReader(file), ImportConfig{Name: "x.jsonl", Errs: &errs})
	if err != nil {
		t.Fatal(err)
	}
	if sum != (ImportSummary{Imported: 2, Rejected: 6}) {
		t.Errorf("summary = %+v, want 2 imported, 6 rejected", sum)
	}
	if sum.Err() == nil {
		t.Error("Err() = nil with rejected lines")
	}
	for _, want := range []string{"x.jsonl:2: not imported: malformed JSON", "x.jsonl:4: not imported: the body is empty", "x.jsonl:5: not imported: body: character U+0000",
		"x.jsonl:6: not imported: malformed JSON: json: unknown field", "x.jsonl:7: not imported: message is", "x.jsonl:8: not imported: attribute n"} {
		if !strings.Contains(errs.String(), want) {
			t.Errorf("errors lack %q:\n%s", want, errs.String())
		}
	}
	got := drain(t, c, q.DLQURL)
	if _, ok := got["first"]; !ok || len(got) != 2 {
		t.Errorf("DLQ got %d messages, want first and really last", len(got))
	}
}

func TestLocateRefusesWrongQueues(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	c := emu.Client()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	other := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	plain := emu.NewQueue(t, testenv.QueueOptions{})

	tests := []struct {
		name string
		loc  Location
		want error
	}{
		{"source without redrive policy", Location{QueueURL: plain.URL}, queueattr.ErrNoRedrivePolicy},
		{"work queue given as DLQ", Location{DLQURL: q.URL}, ErrNotDeadLetterQueue},
		{"DLQ of another queue", Location{DLQURL: other.DLQURL, To: q.URL}, ErrNotDeadLetterQueue},
		{"--to without redrive policy", Location{DLQURL: q.DLQURL, To: plain.URL}, ErrNotDeadLetterQueue},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Locate(t.Context(), c, tt.loc)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Locate = %v, want %v", err, tt.want)
			}
		})
	}

	// A DLQ without --to: the emulator cannot list its sources, so replay asks for --to while
	// the other verbs work.
	queues, err := Locate(t.Context(), c, Location{DLQURL: q.DLQURL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := queues.Target(); err == nil || !strings.Contains(err.Error(), "with To") {
		t.Errorf("Target() = %v, want an error asking for --to", err)
	}
	if _, err := Replay(t.Context(), c, queues, testConfig()); err == nil {
		t.Error("replay without a target succeeded")
	}
	if _, err := Count(t.Context(), c, queues); err != nil {
		t.Errorf("count: %v", err)
	}
}

func TestStatusMatchesTheQueue(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	c := emu.Client()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 4, VisibilityTimeout: 40 * time.Second})
	for i := range 7 {
		in := &sqs.SendMessageInput{QueueUrl: aws.String(q.URL), MessageBody: aws.String("m" + strconv.Itoa(i))}
		if i == 6 {
			in.DelaySeconds = 600
		}
		if _, err := c.SendMessage(t.Context(), in); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.URL), MaxNumberOfMessages: 2}); err != nil {
		t.Fatal(err)
	}
	deadLetter(t, c, q, 3, func(int) bool { return false })
	s, err := Status(t.Context(), c, q.URL)
	if err != nil {
		t.Fatal(err)
	}
	want := QueueStatus{
		Name: q.Name, URL: q.URL, Counts: Counts{Visible: 4, InFlight: 2, Delayed: 1},
		OldestAgeNote: OldestAgeNote, VisibilityTimeout: 40, RetentionPeriod: s.RetentionPeriod,
		Redrive: &RedriveStatus{DeadLetterQueue: queueattr.NameFromURL(q.DLQURL), DLQURL: q.DLQURL, MaxReceiveCount: 4, DLQ: Counts{Visible: 3}},
	}
	if diff := cmp.Diff(want, s); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	var out bytes.Buffer
	if err := WriteStatus(&out, s); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"visible:     4", "in flight:   2", "delayed:     1", "oldest age:  n/a", "after 4 receives", "dlq depth:   3"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("status output lacks %q:\n%s", line, out.String())
		}
	}

	plain := emu.NewQueue(t, testenv.QueueOptions{})
	s, err = Status(t.Context(), c, plain.URL)
	if err != nil || s.Redrive != nil {
		t.Errorf("status of a queue without redrive = %+v, %v", s, err)
	}
}

func TestTriageActsOnAnswers(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	c := emu.Client()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	deadLetter(t, c, q, 4, func(int) bool { return false })
	queues, err := Locate(t.Context(), c, Location{QueueURL: q.URL})
	if err != nil {
		t.Fatal(err)
	}
	// Message 1: show its body, keep it. Message 2: delete, decline, delete, confirm.
	// Message 3: replay. Message 4: quit; it stays.
	in := strings.NewReader("s\nk\nd\nn\nd\ny\nr\nwhat\nq\n")
	var out bytes.Buffer
	sum, err := Triage(t.Context(), c, queues, TriageConfig{In: in, Out: &out, Hold: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if sum != (TriageSummary{Replayed: 1, Kept: 1, Deleted: 1}) {
		t.Errorf("summary = %+v", sum)
	}
	for _, want := range []string{"not deleted.", "deleted ", "replayed to " + q.Name, "k, keep", Prompt(ConfirmingDelete)} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("dialogue lacks %q:\n%s", want, out.String())
		}
	}
	if v := visible(t, c, q.DLQURL); v != 2 {
		t.Errorf("DLQ holds %d visible, want the kept one and the one shown at quit", v)
	}
	if got := drain(t, c, q.URL); len(got) != 1 {
		t.Errorf("source got %d, want the replayed one", len(got))
	}

	// End of input quits like q.
	sum, err = Triage(t.Context(), c, queues, TriageConfig{In: strings.NewReader(""), Out: &out, Hold: time.Minute})
	if err != nil || sum != (TriageSummary{}) {
		t.Errorf("triage with no input = %+v, %v", sum, err)
	}
	if v := visible(t, c, q.DLQURL); v != 2 {
		t.Errorf("DLQ holds %d visible after triage on empty input, want 2", v)
	}
}

// mustFilter compiles a filter as --match-body body and --match-attr attrs would.
func mustFilter(t *testing.T, body string, attrs ...string) Filter {
	t.Helper()
	f, err := ParseFilter(body, attrs)
	if err != nil {
		t.Fatal(err)
	}
	return f
}
