package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/creack/pty"

	"github.com/watchbot/watchbot/deadletter"
	"github.com/watchbot/watchbot/internal/dlqattr"
	"github.com/watchbot/watchbot/internal/testing/faultproxy"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// operatorEnv points the in-process CLI at the emulator.
func operatorEnv(t *testing.T) *testenv.Emulator {
	t.Helper()
	emu := testenv.SQS(t)
	for _, kv := range emu.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	return emu
}

func runCLI(t *testing.T, stdin io.Reader, args ...string) (int, string, string) {
	t.Helper()
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	var out, errOut bytes.Buffer
	code := run(append([]string{"watchbot"}, args...), stdin, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestSendFromStdinAndStatus(t *testing.T) {
	emu := operatorEnv(t)
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 5})
	counter, endpoint := faultproxy.Serve(t, emu.Endpoint, faultproxy.Config{}) // no rules: it only counts
	calls := func(op string) int { return counter.Stats().Operations[op].Requests }
	var lines strings.Builder
	for i := range 25 {
		fmt.Fprintf(&lines, `{"n":%d,"text":"naïve, with commas"}`+"\n", i)
	}
	code, stdout, stderr := runCLI(t, strings.NewReader(lines.String()),
		"send", "--queue-url", q.URL, "--endpoint-url", endpoint, "--attr", "kind=a,b", "--attr", "n:Number=7", "--delay", "0")
	if code != 0 {
		t.Fatalf("send exit %d: %s", code, stderr)
	}
	if ids := strings.Fields(stdout); len(ids) != 25 {
		t.Errorf("printed %d ids, want 25:\n%s", len(ids), stdout)
	}
	if n := calls("SendMessageBatch"); n != 3 {
		t.Errorf("%d SendMessageBatch calls for 25 lines, want 3", n)
	}
	if n := calls("SendMessage"); n != 0 {
		t.Errorf("%d SendMessage calls, want 0", n)
	}
	out, err := emu.Client().ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.URL), MessageAttributeNames: []string{"All"}, VisibilityTimeout: 1})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("receive: %v", err)
	}
	if got := out.Messages[0].MessageAttributes["kind"]; aws.ToString(got.StringValue) != "a,b" {
		t.Errorf("--attr kind=a,b arrived as %q", aws.ToString(got.StringValue))
	}
	if got := out.Messages[0].MessageAttributes["n"]; aws.ToString(got.DataType) != "Number" {
		t.Errorf("--attr n:Number=7 arrived as %s", aws.ToString(got.DataType))
	}

	code, stdout, stderr = runCLI(t, nil, "send", "--queue-url", q.URL, "--body", "one more", "--delay", "2m")
	if code != 0 || len(strings.Fields(stdout)) != 1 {
		t.Fatalf("send --body: exit %d, %q, %s", code, stdout, stderr)
	}
	file := filepath.Join(t.TempDir(), "body.json")
	if err := os.WriteFile(file, []byte("line 1\nline 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr = runCLI(t, nil, "send", "--queue-url", q.URL, "--file", file); code != 0 {
		t.Fatalf("send --file: exit %d: %s", code, stderr)
	}
	deadLetterDirectly(t, emu.Client(), q, 3, nil)

	code, stdout, stderr = runCLI(t, nil, "status", "--queue-url", q.URL, "--json")
	if code != 0 {
		t.Fatalf("status exit %d: %s", code, stderr)
	}
	var s deadletter.QueueStatus
	if err := json.Unmarshal([]byte(stdout), &s); err != nil {
		t.Fatal(err)
	}
	// 25 lines + the file = 26, one of them received above (in flight); --body was delayed.
	if s.Visible != 25 || s.InFlight != 1 || s.Delayed != 1 || s.Redrive == nil || s.Redrive.MaxReceiveCount != 5 || s.Redrive.DLQ.Visible != 3 || s.OldestMessageAge != nil {
		t.Errorf("status = %+v (redrive %+v)", s, s.Redrive)
	}
	code, stdout, _ = runCLI(t, nil, "status", "--queue-url", q.URL)
	if code != 0 || !strings.Contains(stdout, "dlq depth:   3") || !strings.Contains(stdout, "oldest age:  n/a") {
		t.Errorf("status text: exit %d\n%s", code, stdout)
	}
}

// deadLetterDirectly puts n messages into q's DLQ as the supervisor does; kind(i) gives each
// message's kind attribute.
func deadLetterDirectly(t *testing.T, c *sqs.Client, q testenv.Queue, n int, kind func(int) string) map[string]bool {
	t.Helper()
	bodies := map[string]bool{}
	var letters []testenv.Letter
	for i := range n {
		k := "ok"
		if kind != nil {
			k = kind(i)
		}
		attrs, _ := dlqattr.With(map[string]types.MessageAttributeValue{
			"kind": {DataType: aws.String("String"), StringValue: aws.String(k)},
			"blob": {DataType: aws.String("Binary"), BinaryValue: []byte{0xde, 0xad, byte(i)}},
		}, dlqattr.Cause{Reason: "worker exited 3", SourceQueue: q.URL, Attempts: 3, Lineage: dlqattr.Lineage{OriginalMessageID: fmt.Sprintf("orig-%d", i)}})
		letters = append(letters, testenv.Letter{Body: fmt.Sprintf("job %d — ünïcødé", i), Attributes: attrs})
		bodies[letters[i].Body] = true
	}
	testenv.DeadLetter(t, c, q, letters...)
	return bodies
}

// dlqCount returns the visible and in-flight messages of a queue.
func dlqCount(t *testing.T, c *sqs.Client, url string) (visible, inFlight int64) {
	t.Helper()
	d := testenv.Depth(t, c, url)
	return d.Visible, d.InFlight
}

func TestDeadLetterVerbs(t *testing.T) {
	emu := operatorEnv(t)
	c := emu.Client()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	deadLetterDirectly(t, c, q, 25, func(i int) string {
		if i%5 == 2 {
			return "bad"
		}
		return "ok"
	})

	code, stdout, stderr := runCLI(t, nil, "dead-letter", "--queue-url", q.URL, "replay", "--match-attr", "kind=bad", "--dry-run")
	if code != 0 || strings.Count(stdout, " to "+q.Name+" (reason: worker exited 3)") != 5 || !strings.Contains(stdout, "dry run: would replay 5, skip 20; nothing was changed") {
		t.Fatalf("dry run: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if v, f := dlqCount(t, c, q.DLQURL); v != 25 || f != 0 {
		t.Fatalf("after dry run: %d visible, %d in flight", v, f)
	}

	// Location flags after the verb work too.
	code, stdout, stderr = runCLI(t, nil, "dead-letter", "replay", "--queue-url", q.URL, "--match-attr", "kind=bad", "--rate", "100")
	if code != 0 || !strings.Contains(stdout, "replayed 5, skipped 20, failed 0") {
		t.Fatalf("replay: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if v, _ := dlqCount(t, c, q.URL); v != 5 {
		t.Errorf("source holds %d, want 5", v)
	}

	// --id takes an original id; --max caps the run.
	code, stdout, stderr = runCLI(t, nil, "dead-letter", "--queue-url", q.URL, "replay", "--id", "orig-0", "--id", "orig-404")
	if code != 1 || !strings.Contains(stdout, "replayed 1, skipped") || !strings.Contains(stderr, "--id orig-404") {
		t.Fatalf("replay --id: exit %d\n%s\n%s", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, nil, "dead-letter", "--queue-url", q.URL, "replay", "--max", "2")
	if code != 0 || !strings.Contains(stdout, "replayed 2, skipped 0, failed 0") {
		t.Fatalf("replay --max 2: exit %d\n%s\n%s", code, stdout, stderr)
	}
	testenv.Drain(t, c, q.URL, 5*time.Second)
	deadLetterDirectly(t, c, q, 3, nil)

	code, stdout, _ = runCLI(t, nil, "dead-letter", "--queue-url", q.URL, "count")
	if code != 0 || !strings.Contains(stdout, "visible:   20") {
		t.Errorf("count: exit %d\n%s", code, stdout)
	}
	// --to names the replay target; TestPeekDLQWithoutTarget covers --dlq-url alone, which asks
	// ListDeadLetterSourceQueues (the emulator does not implement it).
	code, stdout, stderr = runCLI(t, nil, "dead-letter", "--dlq-url", q.DLQURL, "--to", q.URL, "peek", "--limit", "3", "--json")
	if code != 0 {
		t.Fatalf("peek: exit %d: %s", code, stderr)
	}
	sc := bufio.NewScanner(strings.NewReader(stdout))
	lines := 0
	for sc.Scan() {
		var r deadletter.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("peek --json line %q: %v", sc.Text(), err)
		}
		if r.DeadLetter == nil || r.DeadLetter.Reason != "worker exited 3" || len(r.MessageAttributes["blob"].BinaryValue) != 3 || !strings.HasPrefix(r.OriginalMessageID, "orig-") {
			t.Errorf("peek record %+v", r)
		}
		lines++
	}
	if lines != 3 {
		t.Errorf("peek --json wrote %d lines, want 3", lines)
	}
	code, stdout, _ = runCLI(t, nil, "dead-letter", "--dlq-url", q.DLQURL, "--to", q.URL, "peek", "--limit", "2")
	if code != 0 || strings.Count(stdout, "reason:   worker exited 3") != 2 || strings.Count(stdout, "original: orig-") != 2 ||
		strings.Count(stdout, " before this look\n") != 2 || !strings.Contains(stdout, "adds one to its receive count") {
		t.Errorf("peek: exit %d\n%s", code, stdout)
	}
	if v, f := dlqCount(t, c, q.DLQURL); v != 20 || f != 0 {
		t.Errorf("after peek: %d visible, %d in flight; want 20, 0", v, f)
	}

	file := filepath.Join(t.TempDir(), "dlq.jsonl")
	code, stdout, stderr = runCLI(t, nil, "dead-letter", "--queue-url", q.URL, "export", file)
	if code != 0 || !strings.Contains(stdout, "exported 20 messages") {
		t.Fatalf("export: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if code, _, stderr = runCLI(t, nil, "dead-letter", "--queue-url", q.URL, "export", file); code != 2 || !strings.Contains(stderr, "exists") {
		t.Errorf("export over an existing file: exit %d: %s", code, stderr)
	}
	if code, _, stderr = runCLI(t, nil, "dead-letter", "--queue-url", q.URL, "purge"); code != 2 || !strings.Contains(stderr, "--yes") {
		t.Errorf("purge without --yes: exit %d: %s", code, stderr)
	}
	if v, _ := dlqCount(t, c, q.DLQURL); v != 20 {
		t.Fatalf("DLQ holds %d after export and a refused purge, want 20", v)
	}
	if code, _, stderr = runCLI(t, nil, "dead-letter", "--queue-url", q.URL, "purge", "--yes"); code != 0 {
		t.Fatalf("purge --yes: exit %d: %s", code, stderr)
	}
	if v, _ := dlqCount(t, c, q.DLQURL); v != 0 {
		t.Fatalf("DLQ holds %d after purge", v)
	}
	code, stdout, stderr = runCLI(t, nil, "dead-letter", "--queue-url", q.URL, "import", file)
	if code != 0 || !strings.Contains(stdout, "imported 20 messages") {
		t.Fatalf("import: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if v, _ := dlqCount(t, c, q.DLQURL); v != 20 {
		t.Errorf("DLQ holds %d after import, want 20", v)
	}

	// A malformed line is reported with its number, the rest still go in, the exit is 1.
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	if err := os.WriteFile(bad, []byte("{\"body\":\"fine\"}\n{\"body\":\n{\"body\":\"also fine\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = runCLI(t, nil, "dead-letter", "--queue-url", q.URL, "import", bad)
	if code != 1 || !strings.Contains(stderr, "bad.jsonl:2: not imported: malformed JSON") || !strings.Contains(stdout, "imported 2 messages") {
		t.Errorf("import with a malformed line: exit %d\n%s\n%s", code, stdout, stderr)
	}

	// export --delete empties the DLQ into the file.
	moved := filepath.Join(t.TempDir(), "moved.jsonl")
	code, stdout, stderr = runCLI(t, nil, "dead-letter", "--queue-url", q.URL, "export", "--delete", moved)
	if code != 0 || !strings.Contains(stdout, "exported 22 messages") || !strings.Contains(stdout, "deleted 22") {
		t.Fatalf("export --delete: exit %d\n%s\n%s", code, stdout, stderr)
	}
	data, err := os.ReadFile(moved)
	if err != nil || bytes.Count(data, []byte("\n")) != 22 {
		t.Errorf("export file holds %d lines, %v", bytes.Count(data, []byte("\n")), err)
	}
	if v, f := dlqCount(t, c, q.DLQURL); v != 0 || f != 0 {
		t.Errorf("DLQ holds %d/%d after export --delete", v, f)
	}
}

func TestOperatorBadInput(t *testing.T) {
	emu := operatorEnv(t)
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	plain := emu.NewQueue(t, testenv.QueueOptions{})
	deadLetterDirectly(t, emu.Client(), q, 2, nil)
	tests := []struct {
		name  string
		stdin string
		args  []string
		code  int
		want  string
	}{
		{"invalid regex", "", []string{"dead-letter", "--queue-url", q.URL, "replay", "--match-body", "(unclosed"}, 2, `--match-body "(unclosed" is not a valid regular expression: error parsing regexp`},
		{"attr without =", "", []string{"dead-letter", "--queue-url", q.URL, "replay", "--match-attr", "kind"}, 2, `--match-attr "kind": want NAME=VALUE`},
		{"attr twice", "", []string{"dead-letter", "--queue-url", q.URL, "replay", "--match-attr", "k=a", "--match-attr", "k=b"}, 2,
			`--match-attr k is given twice with different values ("a", "b"): no message can match`},
		{"rate 0", "", []string{"dead-letter", "--queue-url", q.URL, "replay", "--rate", "0"}, 2, "--rate"},
		{"no redrive policy", "", []string{"dead-letter", "--queue-url", plain.URL, "count"}, 2, "no redrive policy, so it has no dead-letter queue (give the DLQ itself with --dlq-url)"},
		{"work queue as DLQ", "", []string{"dead-letter", "--dlq-url", q.URL, "purge", "--yes"}, 2, "looks like a work queue: pass it as --queue-url, or name its source with --to: not a dead-letter queue"},
		{"DLQ of another queue", "", []string{"dead-letter", "--dlq-url", q.DLQURL, "--to", plain.URL, "replay"}, 2, "is not a dead-letter queue of --to "},
		{"no queue", "", []string{"dead-letter", "count"}, 2, "give --queue-url (the source queue; WATCHBOT_QUEUE_URL gives it too) or --dlq-url (the dead-letter queue)"},
		{"both queues", "", []string{"dead-letter", "--queue-url", q.URL, "--dlq-url", q.DLQURL, "count"}, 2, "give either --queue-url or --dlq-url, not both"},
		{"--to with --queue-url", "", []string{"dead-letter", "--queue-url", q.URL, "--to", q.URL, "count"}, 2,
			"--to is only for --dlq-url: with --queue-url, messages are replayed to that queue"},
		{"bad --dlq-url", "", []string{"dead-letter", "--dlq-url", "jobs-dlq", "count"}, 2, "--dlq-url: "},
		{"no verb target", "", []string{"dead-letter", "--dlq-url", q.DLQURL, "replay"}, 1, "the replay target with --to (peek shows each message's watchbot-source-queue)"},
		{"triage without terminal", "", []string{"dead-letter", "--queue-url", q.URL, "triage"}, 2, "not a terminal"},
		{"peek limit 0", "", []string{"dead-letter", "--queue-url", q.URL, "peek", "--limit", "0"}, 2, "--limit (0) must be at least 1"},
		{"export limit -1", "", []string{"dead-letter", "--queue-url", q.URL, "export", "--limit", "-1", "x.jsonl"}, 2, "--limit (-1) must not be negative"},
		{"replay limit -1", "", []string{"dead-letter", "--queue-url", q.URL, "replay", "--limit", "-1"}, 2, "--limit (-1) must not be negative"},
		{"import missing file", "", []string{"dead-letter", "--queue-url", q.URL, "import", "/nonexistent/x.jsonl"}, 2, "import FILE"},
		{"send empty line", "a\n\nb\n", []string{"send", "--queue-url", q.URL}, 2, "stdin line 2: the body is empty"},
		{"send bad char", "ok\nnul\x00here\n", []string{"send", "--queue-url", q.URL}, 2, "stdin line 2: body: character U+0000"},
		{"send nothing", "", []string{"send", "--queue-url", q.URL}, 2, "stdin is empty"},
		{"send long delay", "", []string{"send", "--queue-url", q.URL, "--body", "x", "--delay", "16m"}, 2, "--delay (16m0s) must be between 0 and 15m0s"},
		{"send bad attr", "", []string{"send", "--queue-url", q.URL, "--body", "x", "--attr", "n:Number=abc"}, 2, "not a number"},
		{"send body and file", "", []string{"send", "--queue-url", q.URL, "--body", "x", "--file", "y"}, 2, "not both"},
		{"status bad url", "", []string{"status", "--queue-url", "jobs"}, 2, "--queue-url: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, strings.NewReader(tt.stdin), tt.args...)
			if code != tt.code || !strings.Contains(stderr, tt.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d mentioning %q", code, stderr, tt.code, tt.want)
			}
		})
	}
	// Nothing was lost or sent along the way.
	c := emu.Client()
	if v, f := dlqCount(t, c, q.DLQURL); v != 2 || f != 0 {
		t.Errorf("DLQ holds %d visible, %d in flight; want 2, 0", v, f)
	}
	if v, _ := dlqCount(t, c, q.URL); v != 0 {
		t.Errorf("source holds %d, want 0", v)
	}
}

func TestTriageOnATerminal(t *testing.T) {
	emu := operatorEnv(t)
	c := emu.Client()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	deadLetterDirectly(t, c, q, 2, nil)
	// Replay the first message, keep the second.
	code, out := runOnTerminal(t, "r\nk\n", "dead-letter", "--queue-url", q.URL, "triage")
	if code != 0 {
		t.Fatalf("triage exit %d:\n%s", code, out)
	}
	if !strings.Contains(out, "[r]eplay, [k]eep") {
		t.Errorf("no prompt on the terminal:\n%s", out)
	}
	if v, f := dlqCount(t, c, q.DLQURL); v != 1 || f != 0 {
		t.Errorf("DLQ holds %d visible, %d in flight; want the kept one", v, f)
	}
	if v, _ := dlqCount(t, c, q.URL); v != 1 {
		t.Errorf("source holds %d, want the replayed one", v)
	}
}

// runOnTerminal runs the CLI with args on a pseudo-terminal, typing input, and returns its
// exit code and what it wrote to the terminal.
func runOnTerminal(t *testing.T, input string, args ...string) (int, string) {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	defer ptmx.Close()
	defer tty.Close()
	var screen bytes.Buffer
	var mu sync.Mutex
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			mu.Lock()
			screen.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	if _, err := ptmx.Write([]byte(input)); err != nil {
		t.Fatal(err)
	}
	var code atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		code.Store(int32(run(append([]string{"watchbot"}, args...), tty, tty, tty)))
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%v did not finish", args)
	}
	tty.Close()
	mu.Lock()
	defer mu.Unlock()
	return int(code.Load()), screen.String()
}

// TestPeekDLQWithoutTarget peeks with --dlq-url alone: the emulator cannot list the DLQ's
// sources, which peek does not need.
func TestPeekDLQWithoutTarget(t *testing.T) {
	emu := operatorEnv(t)
	c := emu.Client()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	deadLetterDirectly(t, c, q, 3, nil)
	code, stdout, stderr := runCLI(t, nil, "dead-letter", "--dlq-url", q.DLQURL, "peek", "--limit", "2")
	if code != 0 || strings.Count(stdout, "reason:   worker exited 3") != 2 {
		t.Fatalf("peek: exit %d\n%s\n%s", code, stdout, stderr)
	}
}
