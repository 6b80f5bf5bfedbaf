package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/watchbot/watchbot/backoff"
	"github.com/watchbot/watchbot/internal/testing/fakesqs"
	"github.com/watchbot/watchbot/internal/testing/testenv"
	"github.com/watchbot/watchbot/worker"
)

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
	// inFlight scales SQS's 12 h in-flight limit down, in fakesqs and in the Config.
	inFlight time.Duration
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
	var opts []fakesqs.Option
	if o.inFlight > 0 {
		opts = append(opts, fakesqs.InFlightLimit(o.inFlight))
	}
	srv := fakesqs.New(opts...)
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
	if o.inFlight > 0 {
		cfg.InFlightLimit = o.inFlight
	}
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
func (r *fifoRig) spawn(ctx context.Context, spec worker.Spec, _ *slog.Logger) worker.Result {
	if spec.MaxDuration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, spec.MaxDuration, worker.ErrTimedOut)
		defer cancel()
	}
	env, lines, err := workerInput(r.t, spec)
	if err != nil {
		return worker.Result{End: worker.NotStarted, Err: err}
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
	run := worker.Result{}
	select {
	case <-time.After(took):
		run.Code = exit
	case <-ctx.Done():
		run.End, run.Err = worker.Stopped, context.Cause(ctx)
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
	// slowNext delays the answer of the next ChangeMessageVisibilityBatch by that much (the
	// change itself lands first, as when the answer is slow to come back).
	slowNext time.Duration
	// failDLQSends makes that many sends to a dead-letter queue (a queue whose name has
	// "dlq") fail, as when SQS cannot be reached; visibilityErr, when set, is what every
	// visibility change fails with.
	failDLQSends  int
	visibilityErr error
}

// errUnreachable is what a call to an SQS that cannot be reached fails with.
var errUnreachable = errors.New("dial tcp 127.0.0.1:9324: connect: connection refused")

// visibilityFails returns what a visibility change fails with now, nil when it does not.
func (q *recordingSQS) visibilityFails() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.visibilityErr
}

// failVisibility makes every visibility change fail with err from now on; nil: none.
func (q *recordingSQS) failVisibility(err error) {
	q.mu.Lock()
	q.visibilityErr = err
	q.mu.Unlock()
}

func (q *recordingSQS) SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	q.mu.Lock()
	fail := q.failDLQSends > 0 && strings.Contains(aws.ToString(in.QueueUrl), "dlq")
	if fail {
		q.failDLQSends--
	}
	q.mu.Unlock()
	if fail {
		return nil, errUnreachable
	}
	return q.Server.SendMessage(ctx, in, opts...)
}

func newRecordingSQS(s *fakesqs.Server) *recordingSQS {
	return &recordingSQS{Server: s, bodies: map[string]string{}, vis: map[string]int32{}}
}

func (q *recordingSQS) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	if err := q.visibilityFails(); err != nil {
		return nil, err
	}
	out, err := q.Server.ChangeMessageVisibility(ctx, in, opts...)
	if err := q.slow(ctx); err != nil {
		return nil, err
	}
	if err == nil {
		q.mu.Lock()
		q.vis[q.bodies[aws.ToString(in.ReceiptHandle)]] = in.VisibilityTimeout
		q.mu.Unlock()
	}
	return out, err
}

func (q *recordingSQS) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	if err := q.visibilityFails(); err != nil {
		return nil, err
	}
	out, err := q.Server.ChangeMessageVisibilityBatch(ctx, in, opts...)
	if err := q.slow(ctx); err != nil {
		return nil, err
	}
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

// slow waits out slowNext, once, unless ctx ends first.
func (q *recordingSQS) slow(ctx context.Context) error {
	q.mu.Lock()
	d := q.slowNext
	q.slowNext = 0
	q.mu.Unlock()
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
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
