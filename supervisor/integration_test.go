package supervisor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/backoff"
	"github.com/watchbot/watchbot/internal/dlqattr"
	"github.com/watchbot/watchbot/internal/testing/testenv"
	"github.com/watchbot/watchbot/internal/tracing"
)

// harness runs the supervisor against the emulator for one test.
type harness struct {
	t       *testing.T
	emu     *testenv.Emulator
	q       testenv.Queue
	c       *sqs.Client
	metrics *countingRecorder
	logs    *testenv.Buffer
	dir     string     // scratch directory for worker scripts and their traces
	level   slog.Level // of the supervisor's log, Info unless a test lowers it
	tracer  *tracing.Provider
}

func newHarness(t *testing.T, qo testenv.QueueOptions) *harness {
	t.Helper()
	emu := testenv.SQS(t)
	return &harness{t: t, emu: emu, q: emu.NewQueue(t, qo), c: emu.Client(),
		metrics: &countingRecorder{}, logs: &testenv.Buffer{}, dir: t.TempDir()}
}

// config returns a fast configuration for tests: 1 s backoff base, short waits.
func (h *harness) config(command ...string) Config {
	cfg := DefaultConfig()
	cfg.QueueURL = h.q.URL
	cfg.Command = command
	cfg.Backoff = backoff.Exponential{Base: time.Second, Max: time.Minute, Jitter: backoff.None}
	cfg.WaitTime = time.Second
	cfg.VisibilityTimeout = 30 * time.Second
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.KillGrace = time.Second
	return cfg
}

// script writes an executable shell script and returns its path.
func (h *harness) script(name, body string) string {
	h.t.Helper()
	p := filepath.Join(h.dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		h.t.Fatal(err)
	}
	return p
}

// start runs the supervisor until the returned stop is called; stop returns Run's error.
func (h *harness) start(cfg Config) (stop func() error) {
	h.t.Helper()
	return testenv.Run(h.t, "supervisor", 60*time.Second, func(ctx context.Context) error {
		log := slog.New(slog.NewJSONHandler(h.logs, &slog.HandlerOptions{Level: h.level}))
		return Run(ctx, cfg, Deps{SQS: h.c, Logger: log, Metrics: h.metrics, Tracer: h.tracer})
	}, h.logs.String)
}

func (h *harness) send(body string, attrs map[string]string) string {
	h.t.Helper()
	in := &sqs.SendMessageInput{QueueUrl: aws.String(h.q.URL), MessageBody: aws.String(body)}
	if len(attrs) > 0 {
		in.MessageAttributes = map[string]types.MessageAttributeValue{}
		for k, v := range attrs {
			in.MessageAttributes[k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
		}
	}
	out, err := h.c.SendMessage(context.Background(), in)
	if err != nil {
		h.t.Fatalf("send: %v", err)
	}
	return aws.ToString(out.MessageId)
}

// eventually is testenv.Eventually with the supervisor's log.
func (h *harness) eventually(what string, limit time.Duration, cond func() bool) {
	h.t.Helper()
	testenv.Eventually(h.t, what, limit, cond, h.logs.String)
}

func (h *harness) empty(url string) bool {
	h.t.Helper()
	return testenv.Depth(h.t, h.c, url).Total() == 0
}

// receiveDLQ takes every message from the DLQ.
func (h *harness) receiveDLQ() []types.Message {
	h.t.Helper()
	out, err := h.c.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(h.q.DLQURL), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
		MessageAttributeNames: []string{"All"}, MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
	})
	if err != nil {
		h.t.Fatalf("receive from DLQ: %v", err)
	}
	return out.Messages
}

func (h *harness) readFile(name string) string {
	data, _ := os.ReadFile(filepath.Join(h.dir, name))
	return string(data)
}

func TestSuccessDeletes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testenv.QueueOptions{MaxReceiveCount: 3})
	worker := h.script("ok.sh", `echo "$MessageId" >> "`+h.dir+`/ran"; echo processed "$Message"`)
	stop := h.start(h.config(worker))
	for i := range 3 {
		h.send(fmt.Sprintf("job %d", i), nil)
	}
	h.eventually("three runs and an empty queue", 20*time.Second, func() bool {
		return strings.Count(h.readFile("ran"), "\n") == 3 && h.empty(h.q.URL)
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := h.metrics.get(alarms.MessagesProcessed); got != 3 {
		t.Errorf("MessagesProcessed = %v, want 3", got)
	}
	if got := h.metrics.get(alarms.WorkerErrors); got != 0 {
		t.Errorf("WorkerErrors = %v, want 0", got)
	}
	if !testenv.Logged(h.logs.String(), "line", "processed job 0") {
		t.Errorf("worker output not logged with its line:\n%s", h.logs)
	}
}

func TestFailureBacksOffThenRedrivesToDLQ(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testenv.QueueOptions{MaxReceiveCount: 3})
	worker := h.script("fail.sh", `date +%s.%N >> "`+h.dir+`/attempts"; echo "attempt $WATCHBOT_ATTEMPT of $WATCHBOT_MAX_ATTEMPTS" >&2; exit 1`)
	h.start(h.config(worker))
	id := h.send("doomed", map[string]string{"kind": "bad"})

	var dlq []types.Message
	h.eventually("the message in the DLQ", 30*time.Second, func() bool {
		dlq = append(dlq, h.receiveDLQ()...)
		return len(dlq) > 0
	})
	if aws.ToString(dlq[0].MessageId) != id || aws.ToString(dlq[0].Body) != "doomed" {
		t.Fatalf("DLQ holds %v, want message %s", dlq[0], id)
	}
	if got := aws.ToString(dlq[0].MessageAttributes["kind"].StringValue); got != "bad" {
		t.Errorf("attribute kind = %q after redrive, want bad", got)
	}
	var times []float64
	for _, line := range strings.Fields(h.readFile("attempts")) {
		f, _ := strconv.ParseFloat(line, 64)
		times = append(times, f)
	}
	if len(times) != 3 {
		t.Fatalf("worker ran %d times, want 3 (max receive count)", len(times))
	}
	// After attempt n the message is invisible for base·2^(n-1): 1 s, then 2 s.
	for i, want := range []float64{1, 2} {
		if gap := times[i+1] - times[i]; gap < want-0.2 {
			t.Errorf("attempt %d came %.2fs after attempt %d, want at least ≈%.0fs", i+2, gap, i+1, want)
		}
	}
	if got := h.metrics.get(alarms.WorkerErrors); got != 3 {
		t.Errorf("WorkerErrors = %v, want 3", got)
	}
	if got := h.metrics.get(alarms.DeadLetter); got != 1 {
		t.Errorf("DeadLetter = %v, want 1", got)
	}
}

func TestRejectDeadLettersWithReason(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testenv.QueueOptions{MaxReceiveCount: 5})
	worker := h.script("reject.sh", `exit 3`)
	h.start(h.config(worker))
	id := h.send(`{"broken": true}`, map[string]string{"tenant": "acme"})

	var dlq []types.Message
	h.eventually("the rejected message in the DLQ", 20*time.Second, func() bool {
		dlq = append(dlq, h.receiveDLQ()...)
		return len(dlq) > 0
	})
	m := dlq[0]
	if aws.ToString(m.Body) != `{"broken": true}` {
		t.Errorf("DLQ body = %q", aws.ToString(m.Body))
	}
	want := map[string]string{
		"tenant":                  "acme",
		dlqattr.Reason:            "worker rejected the message (exit 3)",
		dlqattr.SourceQueue:       h.q.URL,
		dlqattr.Attempts:          "1",
		dlqattr.OriginalMessageID: id,
	}
	for k, v := range want {
		if got := aws.ToString(m.MessageAttributes[k].StringValue); got != v {
			t.Errorf("DLQ attribute %s = %q, want %q", k, got, v)
		}
	}
	h.eventually("the source queue empty", 10*time.Second, func() bool { return h.empty(h.q.URL) })
	if id == "" || h.metrics.get(alarms.DeadLetter) != 1 || h.metrics.get(alarms.WorkerErrors) != 1 {
		t.Errorf("metrics = %v, want DeadLetter 1 and WorkerErrors 1", h.metrics.snapshot())
	}
	// The WorkerErrors alarm's text sends the reader to these levels.
	logs := h.logs.String()
	for _, record := range [][]string{{"level", "WARN", "exit_code", "3"}, {"level", "ERROR", "dead_letter_queue", "*"}} {
		if !testenv.Logged(logs, record...) {
			t.Errorf("no record with %q in the log:\n%s", record, logs)
		}
	}
}

func TestRejectDeleteMode(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testenv.QueueOptions{MaxReceiveCount: 5})
	worker := h.script("reject.sh", `echo ran >> "`+h.dir+`/ran"; exit 3`)
	cfg := h.config(worker)
	cfg.OnReject = RejectDelete
	h.start(cfg)
	h.send("drop me", nil)
	h.eventually("the message deleted", 20*time.Second, func() bool {
		return h.readFile("ran") != "" && h.empty(h.q.URL)
	})
	if n := testenv.Depth(t, h.c, h.q.DLQURL).Total(); n != 0 {
		t.Errorf("DLQ holds %d messages, want none with --on-reject delete", n)
	}
}

func TestReleaseRetriesWithoutWorkerError(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testenv.QueueOptions{MaxReceiveCount: 5})
	// Exit 4 on the first attempt, succeed on the second.
	worker := h.script("release.sh", `echo "$WATCHBOT_ATTEMPT" >> "`+h.dir+`/attempts"; [ "$WATCHBOT_ATTEMPT" -ge 2 ] && exit 0; exit 4`)
	h.start(h.config(worker))
	h.send("later", nil)
	h.eventually("the second attempt to succeed", 20*time.Second, func() bool {
		return strings.Fields(h.readFile("attempts")) != nil && len(strings.Fields(h.readFile("attempts"))) == 2 && h.empty(h.q.URL)
	})
	if got := h.metrics.get(alarms.WorkerErrors); got != 0 {
		t.Errorf("WorkerErrors = %v after exit 4, want 0", got)
	}
	if got := h.metrics.get(alarms.MessagesProcessed); got != 1 {
		t.Errorf("MessagesProcessed = %v, want 1", got)
	}
	// A release is the worker's decision, not a failure: nothing about it is a warning.
	if warned := recordsAtLeast(h.logs.String(), slog.LevelWarn); len(warned) > 0 {
		t.Errorf("exit 4 logged %d records at WARN or above: %v", len(warned), warned)
	}
}

// recordsAtLeast returns the JSON log records at level or above.
func recordsAtLeast(logs string, level slog.Level) []map[string]any {
	var out []map[string]any
	for line := range strings.Lines(logs) {
		var rec map[string]any
		var l slog.Level
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		if name, _ := rec["level"].(string); l.UnmarshalText([]byte(name)) == nil && l >= level {
			out = append(out, rec)
		}
	}
	return out
}

func TestResultFileDirectives(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testenv.QueueOptions{MaxReceiveCount: 5})
	// The body says which directive to write; the exit code says the opposite.
	worker := h.script("directive.sh", `
echo "$Message $WATCHBOT_ATTEMPT" >> "`+h.dir+`/runs"
case "$Message" in
ack) echo '{"action":"ack"}' > "$WATCHBOT_RESULT_FILE"; exit 1 ;;
dead) echo '{"action":"dead-letter","reason":"tenant deleted"}' > "$WATCHBOT_RESULT_FILE"; exit 0 ;;
retry) if [ "$WATCHBOT_ATTEMPT" = 1 ]; then echo '{"action":"retry","delaySeconds":0}' > "$WATCHBOT_RESULT_FILE"; exit 0; fi; exit 0 ;;
garbage) echo 'not json' > "$WATCHBOT_RESULT_FILE"; exit 0 ;;
esac`)
	h.start(h.config(worker))
	for _, b := range []string{"ack", "dead", "retry", "garbage"} {
		h.send(b, nil)
	}
	var dlq []types.Message
	h.eventually("every directive applied", 20*time.Second, func() bool {
		dlq = append(dlq, h.receiveDLQ()...)
		return len(dlq) == 1 && h.empty(h.q.URL)
	})
	if got := aws.ToString(dlq[0].MessageAttributes[dlqattr.Reason].StringValue); got != "tenant deleted" {
		t.Errorf("dead-letter reason = %q, want the worker's", got)
	}
	runs := h.readFile("runs")
	for _, want := range []string{"ack 1\n", "dead 1\n", "retry 1\n", "retry 2\n", "garbage 1\n"} {
		if !strings.Contains(runs, want) {
			t.Errorf("runs missing %q:\n%s", want, runs)
		}
	}
	if !testenv.Logged(h.logs.String(), "level", "ERROR", "error", "*") {
		t.Errorf("malformed result file was not logged")
	}
}

func TestBodiesReachTheWorkerUntouched(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testenv.QueueOptions{MaxReceiveCount: 3})
	// The worker saves stdin and the message file; the test compares them with what it sent.
	worker := h.script("copy.sh", `cat > "`+h.dir+`/$MessageId.stdin"; cp "$WATCHBOT_MESSAGE_FILE" "`+h.dir+`/$MessageId.file"; printf %s "${Message-UNSET}" > "`+h.dir+`/$MessageId.env"`)
	big := strings.Repeat("0123456789abcdef", 200*1024/16) // 200 KiB
	bodies := map[string]string{
		"large":       big,
		"not json":    `{"truncated": [1, 2`,
		"plain":       `hello, world`,
		"non-ascii":   "héllo wörld — 日本語 ✓", // fauxqs refuses characters above U+FFFF, which SQS allows
		"shell chars": "$(touch " + h.dir + "/pwned); `touch " + h.dir + "/pwned2`; echo > " + h.dir + "/pwned3 | rm -rf / & \"'\\",
	}
	ids := map[string]string{}
	for name, b := range bodies {
		ids[name] = h.send(b, nil)
	}
	h.start(h.config(worker))
	h.eventually("all bodies processed", 30*time.Second, func() bool { return h.empty(h.q.URL) })
	for name, body := range bodies {
		id := ids[name]
		for _, kind := range []string{"stdin", "file"} {
			got := h.readFile(id + "." + kind)
			if got != body {
				t.Errorf("%s: %s has %d bytes (sha %s), want %d (sha %s)", name, kind, len(got), sum(got), len(body), sum(body))
			}
		}
		env := h.readFile(id + ".env")
		if name == "large" {
			if env != "UNSET" {
				t.Errorf("Message env is set for a 200 KiB body, want it omitted above 64 KiB")
			}
		} else if env != body {
			t.Errorf("%s: Message env = %q, want %q", name, env, body)
		}
	}
	for _, f := range []string{"pwned", "pwned2", "pwned3"} {
		if _, err := os.Stat(filepath.Join(h.dir, f)); err == nil {
			t.Errorf("message content was executed: %s exists", f)
		}
	}
}

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:4])
}

func TestMaxMessageAgeDeadLettersWithoutRunning(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testenv.QueueOptions{MaxReceiveCount: 3})
	worker := h.script("never.sh", `touch "`+h.dir+`/ran"`)
	h.send("stale", nil)
	time.Sleep(1100 * time.Millisecond)
	cfg := h.config(worker)
	cfg.MaxMessageAge = time.Second
	h.start(cfg)
	var dlq []types.Message
	h.eventually("the stale message in the DLQ", 20*time.Second, func() bool {
		dlq = append(dlq, h.receiveDLQ()...)
		return len(dlq) == 1
	})
	if fileExists(filepath.Join(h.dir, "ran")) {
		t.Error("worker ran for a message older than --max-message-age")
	}
	if got := aws.ToString(dlq[0].MessageAttributes[dlqattr.Reason].StringValue); !strings.Contains(got, "max-message-age") {
		t.Errorf("reason = %q", got)
	}
}

func TestSNSEnvelopeIsUnwrapped(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testenv.QueueOptions{MaxReceiveCount: 3})
	worker := h.script("sns.sh", `printf '%s|%s|%s' "$Message" "$Subject" "$WATCHBOT_ATTR_COLOR" > "`+h.dir+`/got"`)
	h.start(h.config(worker))
	h.send(`{"Type":"Notification","MessageId":"x","TopicArn":"arn:aws:sns:us-east-1:1:t","Subject":"hi","Message":"inner body","MessageAttributes":{"color":{"Type":"String","Value":"blue"}}}`, nil)
	h.eventually("the worker to run", 20*time.Second, func() bool { return h.readFile("got") != "" })
	if got := h.readFile("got"); got != "inner body|hi|blue" {
		t.Fatalf("worker saw %q, want the unwrapped message", got)
	}
}

func TestSpawnFailureCountsSpawnErrors(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testenv.QueueOptions{MaxReceiveCount: 2})
	worker := h.script("vanish.sh", `exit 0`)
	cfg := h.config(worker)
	h.start(cfg)
	// The command passes the startup check, then disappears.
	h.eventually("the supervisor to start", 10*time.Second, func() bool { return testenv.Logged(h.logs.String(), "max_attempts", "*") })
	if err := os.Remove(worker); err != nil {
		t.Fatal(err)
	}
	h.send("nobody home", nil)
	h.eventually("a spawn error", 20*time.Second, func() bool { return h.metrics.get(alarms.WorkerSpawnErrors) >= 1 })
	if got := h.metrics.get(alarms.WorkerErrors); got != 0 {
		t.Errorf("WorkerErrors = %v for a spawn failure, want 0 (it counts in WorkerSpawnErrors)", got)
	}
}

func TestStartupChecks(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testenv.QueueOptions{MaxReceiveCount: 3})
	noDLQ := h.emu.NewQueue(t, testenv.QueueOptions{})
	tests := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no redrive policy", func(c *Config) { c.QueueURL = noDLQ.URL }, "no redrive policy"},
		{"max attempts above maxReceiveCount", func(c *Config) { c.MaxAttempts = 4 }, "MaxAttempts (4) is above the queue's maxReceiveCount (3)"},
		{"missing command", func(c *Config) { c.Command = []string{"/nonexistent/worker"} }, `worker command "/nonexistent/worker"`},
		{"missing queue", func(c *Config) { c.QueueURL = h.q.URL + "-nope" }, "-nope does not exist: check its name, account and region in the URL"},
		{"volume not a directory", func(c *Config) { c.Volumes = []string{"/etc/hostname"} }, `Volumes ("/etc/hostname") is not a directory`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := h.config("true")
			tt.edit(&cfg)
			err := Run(t.Context(), cfg, Deps{SQS: h.c})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Run() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
	t.Run("allow no dlq", func(t *testing.T) {
		cfg := h.config("true")
		cfg.QueueURL = noDLQ.URL
		cfg.AllowNoDLQ = true
		ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
		defer cancel()
		if err := Run(ctx, cfg, Deps{SQS: h.c}); err != nil {
			t.Fatalf("Run with --allow-no-dlq = %v", err)
		}
	})
}

func TestAllowNoDLQLogsAndDeletes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testenv.QueueOptions{})
	worker := h.script("reject.sh", `exit 3`)
	cfg := h.config(worker)
	cfg.AllowNoDLQ = true
	h.start(cfg)
	h.send("last record", nil)
	h.eventually("the message deleted", 20*time.Second, func() bool { return h.empty(h.q.URL) && h.metrics.get(alarms.DeadLetter) == 1 })
	logs := h.logs.String()
	// The error record of the delete keeps the body, and names no dead-letter queue.
	if !testenv.Logged(logs, "level", "ERROR", "body", "last record") {
		t.Errorf("the deleted body was not logged as a delete:\n%s", logs)
	}
	if testenv.Logged(logs, "level", "ERROR", "dead_letter_queue", "*") {
		t.Errorf("a delete was logged as a dead-letter:\n%s", logs)
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// countingRecorder is an alarms.Recorder that sums what it is given.
type countingRecorder struct {
	mu sync.Mutex
	m  map[alarms.Metric]float64
}

func (r *countingRecorder) Add(m alarms.Metric, v float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[alarms.Metric]float64{}
	}
	if m == alarms.WorkerDuration || m == alarms.MessageAge || slices.Contains(alarms.Diagnostics, m) {
		v = 1 // count samples, not durations
	}
	r.m[m] += v
}

func (r *countingRecorder) get(m alarms.Metric) float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[m]
}

func (r *countingRecorder) snapshot() map[alarms.Metric]float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[alarms.Metric]float64{}
	for k, v := range r.m {
		out[k] = v
	}
	return out
}
