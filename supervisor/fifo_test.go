package supervisor

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/backoff"
	"github.com/watchbot/watchbot/internal/dlqattr"
	"github.com/watchbot/watchbot/internal/testing/fakesqs"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// These tests run the whole supervisor in a testing/synctest bubble against fakesqs, an
// in-memory SQS that delivers FIFO messages as SQS does: several messages of a group per
// receive, in order, and none of a group while any of it is in flight; receive counts raised
// on every receive, redrive at maxReceiveCount, ReceiveRequestAttemptId honoured. fauxqs
// returns at most one message per group per receive, so a supervisor that runs a receive's
// messages side by side passes against it and breaks group order on SQS.
//
// The worker is a stand-in (Deps.spawn) scripted per message body: bodies are "a1", "a2", …,
// the letter the message group and the number its place in the group's send order. Every run
// is recorded; check fails a test when two messages of a group ran at once, when a group's
// messages started out of order (per-message mode), or when they left the queue out of order.

// fifoRig is one test's queue, worker and supervisor.
type fifoRig struct {
	t       *testing.T
	sqs     *recordingSQS
	queue   string
	dlq     string
	cfg     Config
	metrics *countingRecorder
	logs    *testenv.Buffer

	// behave scripts the worker: what one run of a message does.
	behave func(c workerCall) workerAct

	mu      sync.Mutex
	runs    []workerCall   // every run, in start order (one entry per message of a batch)
	active  map[string]int // group -> messages of it in runs under way
	faults  []string       // overlapping runs of a group
	maxBusy int            // most runs under way at once
	busy    int

	stop func() error
}

// workerCall is one message's part in one worker run, as the worker saw it.
type workerCall struct {
	ID           string
	Body         string
	Group        string
	Attempt      int // WATCHBOT_ATTEMPT (per-message) or the batch line's attempt
	ReceiveCount int // ApproximateReceiveCount (per-message mode)
	Run          int // this body's run number, from 1
	At           time.Time
}

// workerAct is what a run does: take Took, then exit with Exit, having written Result (a
// directive, or in batch mode this message's result line) when it is not empty.
type workerAct struct {
	Took   time.Duration
	Exit   int
	Result string
}

type rigOptions struct {
	maxReceiveCount int
	concurrency     int
	batchSize       int
	visibility      time.Duration
}

func newFIFORig(t *testing.T, o rigOptions) *fifoRig {
	t.Helper()
	if o.concurrency == 0 {
		o.concurrency = 4
	}
	if o.batchSize == 0 {
		o.batchSize = 1
	}
	if o.visibility == 0 {
		o.visibility = 30 * time.Second
	}
	srv := fakesqs.New()
	ctx := context.Background()
	dlq, err := srv.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("jobs-dlq.fifo"),
		Attributes: map[string]string{"FifoQueue": "true"}})
	if err != nil {
		t.Fatal(err)
	}
	attrs := map[string]string{"FifoQueue": "true", "VisibilityTimeout": strconv.Itoa(int(o.visibility / time.Second))}
	if o.maxReceiveCount > 0 {
		attrs["RedrivePolicy"] = fmt.Sprintf(`{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:jobs-dlq.fifo","maxReceiveCount":%d}`, o.maxReceiveCount)
	}
	q, err := srv.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("jobs.fifo"), Attributes: attrs})
	if err != nil {
		t.Fatal(err)
	}
	r := &fifoRig{t: t, sqs: newRecordingSQS(srv), queue: aws.ToString(q.QueueUrl), dlq: aws.ToString(dlq.QueueUrl),
		metrics: &countingRecorder{}, logs: &testenv.Buffer{}, active: map[string]int{}}
	cfg := DefaultConfig()
	cfg.QueueURL = r.queue
	cfg.Command = []string{"true"} // never run: the stand-in worker takes its place
	cfg.Concurrency = o.concurrency
	cfg.BatchSize = o.batchSize
	cfg.Backoff = backoff.Exponential{Base: time.Second, Max: time.Minute, Jitter: backoff.None}
	cfg.VisibilityTimeout = o.visibility
	cfg.KillGrace = time.Second
	cfg.TempDir = t.TempDir()
	r.cfg = cfg
	r.behave = func(workerCall) workerAct { return workerAct{Took: time.Second} }
	return r
}

// send sends bodies in order, each to the group its first letter names.
func (r *fifoRig) send(bodies ...string) {
	r.t.Helper()
	for _, b := range bodies {
		_, err := r.sqs.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(r.queue), MessageBody: aws.String(b),
			MessageGroupId: aws.String(b[:1]), MessageDeduplicationId: aws.String(b)})
		if err != nil {
			r.t.Fatalf("send %s: %v", b, err)
		}
	}
}

// start runs the supervisor until stop is called. Time in the bubble is free, so stop may
// wait long: 10 minutes of the bubble's clock.
func (r *fifoRig) start() {
	r.t.Helper()
	r.stop = testenv.Run(r.t, "supervisor", 10*time.Minute, func(ctx context.Context) error {
		return Run(ctx, r.cfg, Deps{SQS: r.sqs, Logger: slog.New(slog.NewJSONHandler(r.logs, nil)), Metrics: r.metrics, spawn: r.spawn})
	}, r.trail)
}

// waitFor sleeps (on the bubble's clock) until cond holds, failing after limit.
func (r *fifoRig) waitFor(what string, limit time.Duration, cond func() bool) {
	r.t.Helper()
	testenv.Eventually(r.t, what, limit, cond, r.trail)
}

// trail is what a failure shows: the runs and the supervisor's log.
func (r *fifoRig) trail() string { return fmt.Sprintf("runs %v\n%s", r.bodies(), r.logs) }

// empty reports that the work queue holds nothing, in flight or not.
func (r *fifoRig) empty() bool { return len(r.sqs.Messages(r.queue)) == 0 }

// bodies lists the runs, as "a1#1" (body, run number), in start order.
func (r *fifoRig) bodies() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, c := range r.runs {
		out = append(out, fmt.Sprintf("%s#%d", c.Body, c.Run))
	}
	return out
}

// callsOf returns the runs of one body.
func (r *fifoRig) callsOf(body string) []workerCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []workerCall
	for _, c := range r.runs {
		if c.Body == body {
			out = append(out, c)
		}
	}
	return out
}

// spawn stands in for runWorker: it reads the message (or the batch) as a worker would, asks
// behave what to do, and ends as runWorker would, stopped by ctx with its cause.
func (r *fifoRig) spawn(ctx context.Context, spec workerSpec, _ *slog.Logger) workerRun {
	if spec.MaxDuration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, spec.MaxDuration, errTimedOut)
		defer cancel()
	}
	env, lines, err := workerInput(r.t, spec)
	if err != nil {
		return workerRun{End: endSpawnError, Err: err}
	}
	var calls []workerCall
	for _, l := range lines {
		calls = append(calls, workerCall{Body: l.Body, Group: l.GroupID, Attempt: l.Attempt, ID: l.ID})
	}
	if _, batch := env["WATCHBOT_BATCH_SIZE"]; !batch {
		count, _ := strconv.Atoi(env["ApproximateReceiveCount"])
		calls[0].ReceiveCount = count
	}
	acts := r.begin(calls)
	var took time.Duration
	exit := 0
	var results []string
	for i, a := range acts {
		took = max(took, a.Took)
		exit = max(exit, a.Exit)
		if a.Result == "" {
			continue
		}
		if len(acts) == 1 && env["WATCHBOT_BATCH_SIZE"] == "" {
			results = append(results, a.Result)
		} else {
			results = append(results, fmt.Sprintf(`{"id":%q,%s`, calls[i].ID, strings.TrimPrefix(a.Result, "{")))
		}
	}
	if len(results) > 0 {
		if err := os.WriteFile(env["WATCHBOT_RESULT_FILE"], []byte(strings.Join(results, "\n")+"\n"), 0o600); err != nil {
			r.t.Errorf("result file: %v", err)
		}
	}
	start := time.Now()
	run := workerRun{}
	select {
	case <-time.After(took):
		run.ExitCode = exit
	case <-ctx.Done():
		run.End, run.Err = endFor(context.Cause(ctx)), context.Cause(ctx)
	}
	run.Duration = time.Since(start)
	r.end(calls)
	return run
}

// begin records the start of a run and returns what each message of it does.
func (r *fifoRig) begin(calls []workerCall) []workerAct {
	r.mu.Lock()
	defer r.mu.Unlock()
	acts := make([]workerAct, len(calls))
	groups := map[string]bool{}
	for i := range calls {
		c := &calls[i]
		for _, p := range r.runs {
			if p.Body == c.Body {
				c.Run++
			}
		}
		c.Run++
		c.At = time.Now()
		if !groups[c.Group] && r.active[c.Group] > 0 {
			r.faults = append(r.faults, fmt.Sprintf("%s started at %v while group %s ran", c.Body, c.At.Sub(t0Bubble), c.Group))
		}
		groups[c.Group] = true
		r.active[c.Group]++
		r.runs = append(r.runs, *c)
		acts[i] = r.behave(*c)
	}
	r.busy++
	r.maxBusy = max(r.maxBusy, r.busy)
	return acts
}

func (r *fifoRig) end(calls []workerCall) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range calls {
		r.active[c.Group]--
	}
	r.busy--
}

// t0Bubble is the bubble's clock origin (synctest starts every bubble at the same time).
var t0Bubble = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// check fails the test when a group's messages ran at once, started out of order (in
// per-message mode), or left the queue (deleted, or dead-lettered) out of order.
func (r *fifoRig) check() {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range r.faults {
		r.t.Errorf("concurrent run in a group: %s", f)
	}
	if r.cfg.BatchSize == 1 {
		last := map[string]int{}
		for _, c := range r.runs {
			n := place(c.Body)
			if n < last[c.Group] {
				r.t.Errorf("%s (run %d) started after a later message of its group had run: runs %v", c.Body, c.Run, r.runs)
			}
			last[c.Group] = n
		}
	}
	left := map[string]int{}
	for _, b := range r.sqs.left() {
		if n := place(b); n < left[b[:1]] {
			r.t.Errorf("%s left the queue after a later message of its group: %v", b, r.sqs.left())
		} else {
			left[b[:1]] = n
		}
	}
}

// place is a body's position in its group ("a12" -> 12).
func place(body string) int {
	n, _ := strconv.Atoi(body[1:])
	return n
}

// recordingSQS is fakesqs with a record of the order in which messages left the work queue
// (a delete that succeeded) and of the last visibility each was given.
type recordingSQS struct {
	*fakesqs.Server
	mu      sync.Mutex
	bodies  map[string]string // receipt handle -> body
	deleted []string
	vis     map[string]int32 // body -> last visibility timeout set
}

func newRecordingSQS(s *fakesqs.Server) *recordingSQS {
	return &recordingSQS{Server: s, bodies: map[string]string{}, vis: map[string]int32{}}
}

func (q *recordingSQS) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	out, err := q.Server.ChangeMessageVisibility(ctx, in, opts...)
	if err == nil {
		q.mu.Lock()
		q.vis[q.bodies[aws.ToString(in.ReceiptHandle)]] = in.VisibilityTimeout
		q.mu.Unlock()
	}
	return out, err
}

func (q *recordingSQS) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	out, err := q.Server.ChangeMessageVisibilityBatch(ctx, in, opts...)
	if out != nil {
		q.mu.Lock()
		for _, ok := range out.Successful {
			for _, e := range in.Entries {
				if aws.ToString(e.Id) == aws.ToString(ok.Id) {
					q.vis[q.bodies[aws.ToString(e.ReceiptHandle)]] = e.VisibilityTimeout
				}
			}
		}
		q.mu.Unlock()
	}
	return out, err
}

// visibilityChanges returns the last visibility timeout set on each body.
func (q *recordingSQS) visibilityChanges() map[string]int32 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return maps.Clone(q.vis)
}

func (q *recordingSQS) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	out, err := q.Server.ReceiveMessage(ctx, in, opts...)
	if out != nil {
		q.mu.Lock()
		for _, m := range out.Messages {
			q.bodies[aws.ToString(m.ReceiptHandle)] = aws.ToString(m.Body)
		}
		q.mu.Unlock()
	}
	return out, err
}

func (q *recordingSQS) DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	out, err := q.Server.DeleteMessage(ctx, in, opts...)
	if err == nil {
		q.record(aws.ToString(in.ReceiptHandle))
	}
	return out, err
}

func (q *recordingSQS) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	out, err := q.Server.DeleteMessageBatch(ctx, in, opts...)
	if out != nil {
		for _, ok := range out.Successful {
			for _, e := range in.Entries {
				if aws.ToString(e.Id) == aws.ToString(ok.Id) {
					q.record(aws.ToString(e.ReceiptHandle))
				}
			}
		}
	}
	return out, err
}

func (q *recordingSQS) record(handle string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.deleted = append(q.deleted, q.bodies[handle])
}

// left returns the bodies deleted from the work queue, in order.
func (q *recordingSQS) left() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return slices.Clone(q.deleted)
}

// dlqBodies returns the bodies in the dead-letter queue and their group ids.
func (r *fifoRig) dlqBodies() []string {
	var out []string
	for _, m := range r.sqs.Messages(r.dlq) {
		out = append(out, m.Body+"@"+m.GroupID)
	}
	return out
}

func TestFIFOGroupsInOrderSideBySide(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFIFORig(t, rigOptions{maxReceiveCount: 5, concurrency: 4})
		r.send("a1", "a2", "a3", "a4", "b1", "b2", "b3", "c1", "c2", "d1")
		r.start()
		r.waitFor("an empty queue", time.Minute, r.empty)
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		r.check()
		if len(r.runs) != 10 {
			t.Errorf("runs %v, want each message once", r.bodies())
		}
		// Four groups, four slots: they ran side by side, one message of each at a time.
		if r.maxBusy != 4 {
			t.Errorf("at most %d runs at once, want 4 (one per group)", r.maxBusy)
		}
		for _, c := range r.runs {
			if c.ReceiveCount != 1 || c.Attempt != 1 {
				t.Errorf("%s ran with receive count %d, attempt %d; want 1 and 1", c.Body, c.ReceiveCount, c.Attempt)
			}
		}
		if got := r.metrics.get(alarms.MessagesProcessed); got != 10 {
			t.Errorf("MessagesProcessed = %v, want 10", got)
		}
	})
}

func TestFIFOFailureRetriesInPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFIFORig(t, rigOptions{maxReceiveCount: 5, concurrency: 2})
		// a1 fails twice; a worker asks for a2's retry in 5 s once.
		r.behave = func(c workerCall) workerAct {
			switch {
			case c.Body == "a1" && c.Run <= 2:
				return workerAct{Took: 100 * time.Millisecond, Exit: 1}
			case c.Body == "a2" && c.Run == 1:
				return workerAct{Took: 100 * time.Millisecond, Result: `{"action":"retry","delaySeconds":5}`}
			}
			return workerAct{Took: 100 * time.Millisecond}
		}
		r.send("a1", "a2", "a3")
		r.start()
		r.waitFor("an empty queue", time.Minute, r.empty)
		r.check()
		a1 := r.callsOf("a1")
		if len(a1) != 3 {
			t.Fatalf("a1 ran %d times, want 3: %v", len(a1), r.bodies())
		}
		// Backoff base 1 s: the second run 1 s after the first ended, the third 2 s after
		// the second. The receive count stays 1: the retries happened in place.
		for i, c := range a1 {
			if c.Attempt != i+1 || c.ReceiveCount != 1 {
				t.Errorf("a1 run %d: attempt %d, receive count %d; want %d and 1", i+1, c.Attempt, c.ReceiveCount, i+1)
			}
		}
		if gap := a1[1].At.Sub(a1[0].At); gap < 1100*time.Millisecond || gap > 1500*time.Millisecond {
			t.Errorf("a1's second run came %v after its first, want 100 ms of work + 1 s", gap)
		}
		if gap := a1[2].At.Sub(a1[1].At); gap < 2100*time.Millisecond || gap > 2500*time.Millisecond {
			t.Errorf("a1's third run came %v after its second, want 100 ms + 2 s", gap)
		}
		a2 := r.callsOf("a2")
		if len(a2) != 2 || a2[1].At.Sub(a2[0].At) < 5*time.Second || a2[1].ReceiveCount != 1 {
			t.Errorf("a2 runs %+v, want a second run 5 s after the first, in place", a2)
		}
		for _, c := range r.callsOf("a3") {
			if c.ReceiveCount != 1 {
				t.Errorf("a3 ran with receive count %d: a predecessor's retry raised it", c.ReceiveCount)
			}
		}
		if got := r.metrics.get(alarms.WorkerErrors); got != 2 {
			t.Errorf("WorkerErrors = %v, want 2", got)
		}
	})
}

func TestFIFOPoisonHeadLeavesItsGroupAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFIFORig(t, rigOptions{maxReceiveCount: 3, concurrency: 2})
		r.behave = func(c workerCall) workerAct {
			if c.Body == "a1" {
				return workerAct{Took: 100 * time.Millisecond, Exit: 1}
			}
			return workerAct{Took: 100 * time.Millisecond}
		}
		r.send("a1", "a2", "a3", "a4", "a5")
		r.start()
		r.waitFor("an empty queue", time.Minute, r.empty)
		r.check()
		if got := len(r.callsOf("a1")); got != 3 {
			t.Errorf("the poison head ran %d times, want exactly 3 (maxReceiveCount)", got)
		}
		want := []string{"a1#1", "a1#2", "a1#3", "a2#1", "a3#1", "a4#1", "a5#1"}
		if got := r.bodies(); !slices.Equal(got, want) {
			t.Errorf("runs %v, want %v", got, want)
		}
		if got := r.dlqBodies(); !slices.Equal(got, []string{"a1@a"}) {
			t.Fatalf("DLQ holds %v, want only a1, with its group id", got)
		}
		dlq := r.sqs.Messages(r.dlq)[0]
		if dlq.DedupID == "" {
			t.Error("the dead-lettered message has no deduplication id")
		}
		for _, b := range []string{"a2", "a3", "a4", "a5"} {
			if c := r.callsOf(b); len(c) != 1 || c[0].ReceiveCount != 1 {
				t.Errorf("%s: runs %+v, want one run at receive count 1", b, c)
			}
		}
		if got := r.sqs.left(); !slices.Equal(got, []string{"a1", "a2", "a3", "a4", "a5"}) {
			t.Errorf("left the queue in order %v", got)
		}
		if r.metrics.get(alarms.DeadLetter) != 1 || r.metrics.get(alarms.WorkerErrors) != 3 {
			t.Errorf("metrics %v, want DeadLetter 1, WorkerErrors 3", r.metrics.snapshot())
		}
	})
}

func TestFIFORejectLetsTheGroupGoOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFIFORig(t, rigOptions{maxReceiveCount: 5, concurrency: 1})
		r.behave = func(c workerCall) workerAct {
			switch c.Body {
			case "a1":
				return workerAct{Exit: 3}
			case "a2":
				return workerAct{Result: `{"action":"dead-letter","reason":"tenant gone"}`}
			}
			return workerAct{}
		}
		r.send("a1", "a2", "a3")
		r.start()
		r.waitFor("an empty queue", time.Minute, r.empty)
		r.check()
		if got := r.bodies(); !slices.Equal(got, []string{"a1#1", "a2#1", "a3#1"}) {
			t.Errorf("runs %v, want each once, in order", got)
		}
		var reasons []string
		out, err := r.sqs.Server.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(r.dlq), MaxNumberOfMessages: 10, MessageAttributeNames: []string{"All"}})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range out.Messages {
			reasons = append(reasons, aws.ToString(m.Body)+": "+aws.ToString(m.MessageAttributes[dlqattr.Reason].StringValue))
		}
		if want := []string{"a1: worker rejected the message (exit 3)", "a2: tenant gone"}; !slices.Equal(reasons, want) {
			t.Errorf("DLQ %v, want %v", reasons, want)
		}
	})
}

func TestFIFOExit4HandsTheGroupBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFIFORig(t, rigOptions{maxReceiveCount: 5, concurrency: 2})
		r.behave = func(c workerCall) workerAct {
			if c.Body == "a1" && c.Run == 1 {
				return workerAct{Took: 100 * time.Millisecond, Exit: 4}
			}
			return workerAct{Took: 100 * time.Millisecond}
		}
		r.send("a1", "a2", "a3")
		r.start()
		r.waitFor("an empty queue", time.Minute, r.empty)
		r.check()
		if got := r.bodies(); !slices.Equal(got, []string{"a1#1", "a1#2", "a2#1", "a3#1"}) {
			t.Fatalf("runs %v", got)
		}
		// Handed back: a1 after its 1 s backoff, a2 and a3 at once (the group stays locked
		// behind a1 in SQS). Each came back through a receive: SQS raised their counts.
		a1 := r.callsOf("a1")
		if gap := a1[1].At.Sub(a1[0].At); gap < 1100*time.Millisecond {
			t.Errorf("a1 came back after %v, want its 1 s backoff", gap)
		}
		// Concurrency 2: the first receive took a1 and a2 (one group, as much as it could);
		// a3 was never held.
		for b, want := range map[string]int{"a1": 2, "a2": 2, "a3": 1} {
			c := r.callsOf(b)
			if last := c[len(c)-1]; last.ReceiveCount != want || last.Attempt != want {
				t.Errorf("%s last ran with receive count %d, attempt %d; want %d", b, last.ReceiveCount, last.Attempt, want)
			}
		}
		if got := r.metrics.get(alarms.WorkerErrors); got != 0 {
			t.Errorf("WorkerErrors = %v after exit 4, want 0", got)
		}
	})
}

func TestFIFOMaxJobDurationRetriesInPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFIFORig(t, rigOptions{maxReceiveCount: 5, concurrency: 2})
		r.cfg.MaxJobDuration = 10 * time.Second
		r.behave = func(c workerCall) workerAct {
			if c.Body == "a1" && c.Run == 1 {
				return workerAct{Took: time.Hour}
			}
			return workerAct{Took: time.Second}
		}
		r.send("a1", "a2")
		r.start()
		r.waitFor("an empty queue", time.Minute, r.empty)
		r.check()
		if got := r.bodies(); !slices.Equal(got, []string{"a1#1", "a1#2", "a2#1"}) {
			t.Fatalf("runs %v, want a1 stopped, retried in place, then a2", got)
		}
		if c := r.callsOf("a1")[1]; c.Attempt != 2 || c.ReceiveCount != 1 {
			t.Errorf("a1's retry: attempt %d, receive count %d; want 2 and 1", c.Attempt, c.ReceiveCount)
		}
		if !strings.Contains(r.logs.String(), "--max-job-duration") {
			t.Error("the timeout was not logged")
		}
	})
}

func TestFIFOShutdownHandsBackHeldMessages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFIFORig(t, rigOptions{maxReceiveCount: 5, concurrency: 2})
		r.cfg.WaitTime = time.Second
		r.behave = func(c workerCall) workerAct {
			switch {
			case c.Body == "a1":
				return workerAct{Took: 3 * time.Second}
			case c.Body == "b1" && c.Run == 1:
				return workerAct{Took: 100 * time.Millisecond, Result: `{"action":"retry","delaySeconds":10}`}
			}
			return workerAct{Took: time.Second}
		}
		r.send("a1", "a2", "a3", "b1", "b2")
		r.start()
		r.waitFor("b1's retry", 10*time.Second, func() bool { return len(r.callsOf("b1")) == 1 })
		time.Sleep(500 * time.Millisecond)
		stopAt := time.Now()
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		r.check()
		// a1 finished within the drain and was deleted. The held messages went back: a2 at
		// once, b1 with what was left of its 10 s retry delay.
		if got := r.sqs.left(); !slices.Equal(got, []string{"a1"}) {
			t.Errorf("deleted %v, want a1 only", got)
		}
		vis := r.sqs.visibilityChanges()
		if v, ok := vis["a2"]; !ok || v != 0 {
			t.Errorf("a2's visibility set to %v (%v), want 0", v, ok)
		}
		if v := vis["b1"]; v < 8 || v > 10 {
			t.Errorf("b1's visibility set to %v s, want what was left of its 10 s delay (~9 s)", v)
		}
		// Nothing was taken back by watchbot's own last receive: the next receive sees every
		// group in order, each held message received once more, no more.
		time.Sleep(time.Until(stopAt.Add(15 * time.Second)))
		out, err := r.sqs.Server.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(r.queue),
			MaxNumberOfMessages: 10, MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, m := range out.Messages {
			got = append(got, aws.ToString(m.Body)+":"+m.Attributes["ApproximateReceiveCount"])
		}
		if want := []string{"a2:2", "a3:1", "b1:2", "b2:1"}; !slices.Equal(got, want) {
			t.Errorf("next receive %v, want %v", got, want)
		}
	})
}

func TestFIFOLeaseLostHandsBackTheRest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFIFORig(t, rigOptions{maxReceiveCount: 5, concurrency: 1, visibility: 10 * time.Second})
		r.cfg.HeartbeatInterval = 4 * time.Second
		r.behave = func(c workerCall) workerAct {
			if c.Body == "a1" && c.Run == 1 {
				return workerAct{Took: time.Hour}
			}
			return workerAct{Took: 100 * time.Millisecond}
		}
		r.send("a1", "a2", "a3")
		r.start()
		r.waitFor("a1's first run", 10*time.Second, func() bool { return len(r.callsOf("a1")) == 1 })
		// SQS cannot be reached for renewals: a1's lease is about to lapse; watchbot stops it
		// and leaves the group to SQS, which redelivers it, in order, when the leases lapse.
		r.sqs.Fail("ChangeMessageVisibility", 100, fakesqs.Before)
		r.sqs.Fail("ChangeMessageVisibilityBatch", 100, fakesqs.Before)
		r.waitFor("a1 stopped with its lease lost", time.Minute, func() bool { return strings.Contains(r.logs.String(), "lease lost") })
		r.sqs.Fail("ChangeMessageVisibility", 0, fakesqs.Before)
		r.sqs.Fail("ChangeMessageVisibilityBatch", 0, fakesqs.Before)
		r.waitFor("an empty queue", time.Minute, r.empty)
		r.check()
		if got := r.bodies(); !slices.Equal(got, []string{"a1#1", "a1#2", "a2#1", "a3#1"}) {
			t.Fatalf("runs %v, want a1 stopped, then the group again in order", got)
		}
	})
}

func TestFIFOBatchHoldsAGroupBehindItsFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFIFORig(t, rigOptions{maxReceiveCount: 5, concurrency: 1, batchSize: 10})
		r.behave = func(c workerCall) workerAct {
			if c.Body == "a2" && c.Run == 1 {
				return workerAct{Result: `{"action":"retry"}`}
			}
			return workerAct{Took: 100 * time.Millisecond, Result: `{"action":"ack"}`}
		}
		r.send("a1", "a2", "a3", "a4", "b1", "b2")
		r.start()
		r.waitFor("an empty queue", time.Minute, r.empty)
		r.check()
		// One batch of all six; a2 fails: a3 and a4, although acked, stay held with it and
		// run again after it, in order; group b goes on.
		want := []string{"a1#1", "a2#1", "a3#1", "a4#1", "b1#1", "b2#1", "a2#2", "a3#2", "a4#2"}
		if got := r.bodies(); !slices.Equal(got, want) {
			t.Errorf("runs %v, want %v", got, want)
		}
		if got := r.sqs.left(); len(got) != 6 {
			t.Errorf("deleted %v, want all six (check holds each group to its order)", got)
		}
		for _, c := range r.callsOf("a3") {
			if c.Attempt != 1 {
				t.Errorf("a3 (acked, held behind a2) ran at attempt %d, want 1 both times", c.Attempt)
			}
		}
		if c := r.callsOf("a2"); c[1].Attempt != 2 {
			t.Errorf("a2's retry at attempt %d, want 2", c[1].Attempt)
		}
		for _, m := range r.sqs.Messages(r.dlq) {
			t.Errorf("%s dead-lettered", m.Body)
		}
	})
}

func TestFIFOLostReceiveAnswerCostsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFIFORig(t, rigOptions{maxReceiveCount: 5, concurrency: 2, visibility: 5 * time.Minute})
		r.send("a1", "a2", "b1")
		// The first receive takes the messages, then its answer is lost (a 500). Retried with
		// the same ReceiveRequestAttemptId, it gets them back at once, instead of leaving
		// them, and their groups, locked for the 5-minute visibility timeout.
		r.sqs.Fail("ReceiveMessage", 1, fakesqs.After)
		r.start()
		r.waitFor("an empty queue", 30*time.Second, r.empty)
		r.check()
		for _, b := range []string{"a1", "a2", "b1"} {
			if c := r.callsOf(b); len(c) != 1 || c[0].ReceiveCount != 1 {
				t.Errorf("%s: runs %+v, want one run at receive count 1", b, c)
			}
		}
		if !strings.Contains(r.logs.String(), "receive failed") {
			t.Error("the failed receive was not logged")
		}
		// Every receive is timed; the failed one also as a receive the loop waited out.
		if n := r.metrics.get(alarms.ReceiveDuration); n < 2 {
			t.Errorf("%v receives timed, want the failed one and those after it", n)
		}
		if n := r.metrics.get(alarms.RetriedReceiveDuration); n != 1 {
			t.Errorf("%v retried or failed receives timed, want 1", n)
		}
	})
}

// TestFIFOStopInReceiveBackoffIsPrompt: a stop during the backoff after a failed receive
// makes one more receive with the failed one's ReceiveRequestAttemptId, to release what a
// lost answer took. That receive does not long-poll: SQS answers a retried attempt id from
// what it kept, so on an empty queue the stop does not wait out a 20 s poll.
func TestFIFOStopInReceiveBackoffIsPrompt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFIFORig(t, rigOptions{maxReceiveCount: 5})
		r.cfg.WaitTime = 20 * time.Second
		r.sqs.Fail("ReceiveMessage", 1, fakesqs.Before)
		r.start()
		r.waitFor("a failed receive", time.Minute, func() bool { return strings.Contains(r.logs.String(), "receive failed") })
		began := time.Now()
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(began); took >= time.Second {
			t.Errorf("the stop took %v of the bubble's clock: its last receive long-polled", took)
		}
	})
}
