package supervisor

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/internal/dlqattr"
	"github.com/watchbot/watchbot/internal/testing/testenv"
	"github.com/watchbot/watchbot/worker"
)

// TestBatchPrecedence is the per-message decision of a batch: the message's own result beats
// the batch's exit code; without one, exit 0 acks and anything else retries with the
// message's own backoff.
func TestBatchPrecedence(t *testing.T) {
	t.Parallel()
	d := func(action string) *worker.Directive { return &worker.Directive{Action: action} }
	base := result{Attempt: 1, MaxAttempts: 5, MaxReceiveCount: 5, OnReject: RejectDeadLetter}
	tests := []struct {
		name      string
		end       runEnd
		exit      int
		directive *worker.Directive
		want      action
	}{
		{"no result, exit 0", endExited, 0, nil, actDelete},
		{"no result, exit 1", endExited, 1, nil, actRetry},
		{"ack beats exit 1", endExited, 1, d("ack"), actDelete},
		{"retry beats exit 0", endExited, 0, d("retry"), actRetry},
		{"dead-letter beats exit 0", endExited, 0, d("dead-letter"), actDeadLetter},
		{"no result, killed at shutdown", endShutdown, 0, nil, actRelease},
		{"ack written before the shutdown stop stands", endShutdown, 0, d("ack"), actDelete},
		{"no result, timed out", endTimedOut, 0, nil, actRetry},
		{"no result, could not start", endSpawnError, 0, nil, actRetry},
		{"lease lost beats an ack", endLeaseLost, 0, d("ack"), actAbandon},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := base
			r.End, r.ExitCode, r.Directive = tt.end, tt.exit, tt.directive
			if got := outcomeFor(r).Action; got != tt.want {
				t.Fatalf("action = %v, want %v", got, tt.want)
			}
		})
	}
}

// batchWorker writes a shell worker that records each run (its message ids, one run per
// line) in runs, then runs body.
func (h *harness) batchWorker(body string) string {
	return h.script("batch.sh", `
ids=$(jq -r .id < "$WATCHBOT_MESSAGE_FILE" | tr '\n' ' ')
echo "$WATCHBOT_BATCH_SIZE $ids" >> "`+h.dir+`/runs"
`+body)
}

func (h *harness) runs() [][]string {
	var out [][]string
	for _, line := range strings.Split(strings.TrimSpace(h.readFile("runs")), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			out = append(out, f)
		}
	}
	return out
}

func (h *harness) sendN(n int, prefix string) []string {
	var ids []string
	for i := range n {
		ids = append(ids, h.send(fmt.Sprintf("%s-%d", prefix, i), nil))
	}
	return ids
}

func batchConfig(h *harness, worker string, size int, window time.Duration) Config {
	cfg := h.config(worker)
	cfg.BatchSize = size
	cfg.BatchWindow = window
	return cfg
}

func requireJQ(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("jq"); err != nil {
		t.Fatalf("batch tests need jq (apt-get install jq): %v", err)
	}
}

func TestBatchFullBatches(t *testing.T) {
	t.Parallel()
	requireJQ(t)
	h := newHarness(t, testenv.QueueOptions{MaxReceiveCount: 3})
	worker := h.batchWorker("exit 0")
	h.sendN(30, "m")
	h.start(batchConfig(h, worker, 10, time.Second))
	h.eventually("30 messages processed", 30*time.Second, func() bool { return h.empty(h.q.URL) })
	runs := h.runs()
	if len(runs) != 3 {
		t.Fatalf("%d runs, want 3 of 10: %v", len(runs), runs)
	}
	seen := map[string]bool{}
	for _, r := range runs {
		if r[0] != "10" || len(r) != 11 {
			t.Errorf("run %v, want WATCHBOT_BATCH_SIZE 10 and 10 ids", r)
		}
		for _, id := range r[1:] {
			if seen[id] {
				t.Errorf("message %s in two runs", id)
			}
			seen[id] = true
		}
	}
	if got := h.metrics.get(alarms.MessagesProcessed); got != 30 {
		t.Errorf("MessagesProcessed = %v, want 30 (per message)", got)
	}
}

func TestBatchWindowFlushesPartialBatch(t *testing.T) {
	t.Parallel()
	requireJQ(t)
	h := newHarness(t, testenv.QueueOptions{MaxReceiveCount: 3})
	worker := h.batchWorker(`date +%s.%N >> "` + h.dir + `/ran-at"`)
	h.start(batchConfig(h, worker, 10, time.Second))
	h.eventually("the supervisor to start", 10*time.Second, func() bool { return testenv.Logged(h.logs.String(), "max_attempts", "*") })
	sent := time.Now()
	h.sendN(3, "m")
	h.eventually("one run", 20*time.Second, func() bool { return h.empty(h.q.URL) })
	runs := h.runs()
	if len(runs) != 1 || runs[0][0] != "3" {
		t.Fatalf("runs = %v, want one run of 3", runs)
	}
	var at float64
	fmt.Sscan(h.readFile("ran-at"), &at)
	if waited := time.Unix(0, int64(at*1e9)).Sub(sent); waited < 900*time.Millisecond {
		t.Errorf("the batch ran %v after the send, want about the 1 s window", waited)
	}
}

func TestBatchPerMessageResults(t *testing.T) {
	t.Parallel()
	requireJQ(t)
	h := newHarness(t, testenv.QueueOptions{MaxReceiveCount: 5})
	// Ack bodies m-1, m-3, m-5 and exit 1 on the first attempt; later attempts succeed.
	worker := h.batchWorker(`
jq -c 'select(.attempt == 1 and (.body | test("^m-[135]$"))) | {id: .id, action: "ack"}' < "$WATCHBOT_MESSAGE_FILE" >> "$WATCHBOT_RESULT_FILE"
jq -r '"\(.body) \(.attempt)"' < "$WATCHBOT_MESSAGE_FILE" >> "` + h.dir + `/attempts"
first=$(jq -s 'map(.attempt) | min' < "$WATCHBOT_MESSAGE_FILE")
[ "$first" -gt 1 ] && exit 0
exit 1`)
	h.sendN(6, "m")
	h.start(batchConfig(h, worker, 10, time.Second))
	h.eventually("all messages done", 30*time.Second, func() bool { return h.empty(h.q.URL) })
	attempts := h.readFile("attempts")
	for _, want := range []string{"m-0 2", "m-2 2", "m-4 2"} {
		if !strings.Contains(attempts, want) {
			t.Errorf("%s: the failed messages were not retried:\n%s", want, attempts)
		}
	}
	for _, acked := range []string{"m-1 2", "m-3 2", "m-5 2"} {
		if strings.Contains(attempts, acked) {
			t.Errorf("%s: an acked message ran again:\n%s", acked, attempts)
		}
	}
	if got := h.metrics.get(alarms.WorkerErrors); got != 3 {
		t.Errorf("WorkerErrors = %v, want 3 (one per retried message)", got)
	}
}

func TestBatchFirstResultWinsAndRetryAtOnce(t *testing.T) {
	t.Parallel()
	requireJQ(t)
	h := newHarness(t, testenv.QueueOptions{MaxReceiveCount: 5})
	// First attempt: retry at once then (ignored) ack, plus a malformed line. Later: exit 0.
	worker := h.batchWorker(`
jq -r '"\(.body) \(.attempt)"' < "$WATCHBOT_MESSAGE_FILE" >> "` + h.dir + `/attempts"
jq -c 'select(.attempt == 1) | {id: .id, action: "retry", delaySeconds: 0}, {id: .id, action: "ack"}' < "$WATCHBOT_MESSAGE_FILE" >> "$WATCHBOT_RESULT_FILE"
echo '{this is not json' >> "$WATCHBOT_RESULT_FILE"
exit 0`)
	h.send("only", nil)
	cfg := batchConfig(h, worker, 10, time.Second)
	cfg.Backoff.Base = time.Minute // a retry that used the backoff would not come back in time
	h.start(cfg)
	h.eventually("the retry to run and succeed", 20*time.Second, func() bool { return strings.Contains(h.readFile("attempts"), "only 2") && h.empty(h.q.URL) })
	// Lines ignored: the retried message's second result, and each run's line that is not JSON.
	if testenv.LogCount(h.logs.String(), "level", "WARN", "problem", "*") < 2 {
		t.Errorf("ignored result lines were not logged:\n%s", h.logs)
	}
}

func TestBatchHeldMessagesStayLeased(t *testing.T) {
	t.Parallel()
	requireJQ(t)
	h := newHarness(t, testenv.QueueOptions{MaxReceiveCount: 5, VisibilityTimeout: 2 * time.Second})
	worker := h.batchWorker("exit 0")
	cfg := batchConfig(h, worker, 10, 5*time.Second)
	cfg.VisibilityTimeout = 2 * time.Second
	cfg.HeartbeatInterval = 500 * time.Millisecond
	h.sendN(3, "m")
	h.start(cfg)
	h.eventually("the batch to run", 30*time.Second, func() bool { return h.empty(h.q.URL) && len(h.runs()) > 0 })
	// Held for 5 s under a 2 s visibility timeout: without the heartbeat the messages would
	// have been received again during the window and run twice.
	runs := h.runs()
	if len(runs) != 1 || runs[0][0] != "3" {
		t.Fatalf("runs = %v, want one run of the 3 held messages", runs)
	}
}

func TestBatchDeadLetterResult(t *testing.T) {
	t.Parallel()
	requireJQ(t)
	h := newHarness(t, testenv.QueueOptions{MaxReceiveCount: 5})
	worker := h.batchWorker(`jq -c '{id: .id, action: "dead-letter", reason: "bad \(.body)"}' < "$WATCHBOT_MESSAGE_FILE" > "$WATCHBOT_RESULT_FILE"`)
	h.send("apple", map[string]string{"kind": "fruit"})
	h.start(batchConfig(h, worker, 5, time.Second))
	var dlq []types.Message
	h.eventually("the message in the DLQ", 20*time.Second, func() bool {
		dlq = append(dlq, h.receiveDLQ()...)
		return len(dlq) == 1
	})
	if got := aws.ToString(dlq[0].MessageAttributes[dlqattr.Reason].StringValue); got != "bad apple" {
		t.Errorf("reason = %q", got)
	}
	if got := aws.ToString(dlq[0].MessageAttributes["kind"].StringValue); got != "fruit" {
		t.Errorf("attribute kind = %q", got)
	}
}

func TestBatchShutdownReleasesHeldMessages(t *testing.T) {
	t.Parallel()
	requireJQ(t)
	h := newHarness(t, testenv.QueueOptions{MaxReceiveCount: 5})
	worker := h.batchWorker("exit 0")
	stop := h.start(batchConfig(h, worker, 10, 20*time.Second))
	h.sendN(2, "m")
	// Held by watchbot, not only in flight: a receive SQS has answered but whose answer has
	// not reached the loop yet is cancelled by the stop, and its messages stay out of reach
	// for --receive-visibility.
	h.eventually("two held messages", 10*time.Second, func() bool {
		return h.metrics.get(alarms.MessageReceives) == 2
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// Released: both can be received again at once, long before their 30 s lease ends.
	got := 0
	deadline := time.Now().Add(5 * time.Second)
	for got < 2 && time.Now().Before(deadline) {
		out, err := h.c.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(h.q.URL), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		if err != nil {
			t.Fatal(err)
		}
		got += len(out.Messages)
	}
	if got != 2 || len(h.runs()) != 0 {
		t.Fatalf("%d messages visible after stop, %d runs; want both released unrun; logs:\n%s", got, len(h.runs()), h.logs)
	}
}

func TestRetryDelayOverridesBackoff(t *testing.T) {
	t.Parallel()
	requireJQ(t)
	h := newHarness(t, testenv.QueueOptions{MaxReceiveCount: 5})
	worker := h.batchWorker(`jq -r '"\(.body) \(.attempt)"' < "$WATCHBOT_MESSAGE_FILE" >> "` + h.dir + `/attempts"
[ "$(jq -s 'map(.attempt) | min' < "$WATCHBOT_MESSAGE_FILE")" -gt 1 ] && exit 0
exit 1`)
	h.sendN(2, "m")
	cfg := batchConfig(h, worker, 10, time.Second)
	cfg.Backoff.Base = time.Hour // the backoff would hide the messages for an hour
	cfg.RetryDelay = time.Second
	h.start(cfg)
	h.eventually("both retried after --retry-delay", 20*time.Second, func() bool {
		a := h.readFile("attempts")
		return strings.Contains(a, "m-0 2") && strings.Contains(a, "m-1 2") && h.empty(h.q.URL)
	})
}
