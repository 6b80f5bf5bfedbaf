package supervisor

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/watchbot/watchbot/internal/sqsspec"
	"github.com/watchbot/watchbot/internal/testing/fakesqs"
	"github.com/watchbot/watchbot/internal/testing/testenv"
	"github.com/watchbot/watchbot/worker"
)

// This file is the rig of the tests that put the whole supervisor (Run) in a testing/synctest
// bubble against fakesqs behind faultySQS, which can delay, hang or lose the answer of any
// call, with a stand-in worker that records which messages run at once. The deadlock
// reproductions and the randomized interleaving suite use it.

// fault is what faultySQS does to one call: wait delay first, then hang until the call's
// context ends, or make the call and lose its answer.
type fault struct {
	delay time.Duration
	hang  bool
	lost  bool
}

// faultySQS is fakesqs with faults planned per call by plan (nil plans none), which is told
// the operation and the bodies of the messages whose receipt handles the call carries.
type faultySQS struct {
	*fakesqs.Server
	mu        sync.Mutex
	plan      func(op string, bodies []string) fault
	byReceipt map[string]string // receipt handle -> body
	// hangs and lostAnswers count the faults injected, hungSends the dead-letter sends among
	// the hangs; hungRenewals the renewals hanging now.
	hangs, hungSends, lostAnswers, hungRenewals int
	// lastReceipt is each body's latest receipt handle, settling the handles a delete or a
	// visibility change other than a renewal was sent for; lapsed counts the deliveries of a
	// message whose previous receipt was never settled (its lease lapsed while watchbot held
	// it), together those that came while a renewal hung.
	lastReceipt      map[string]string
	settling         map[string]bool
	lapsed, together int
}

func (f *faultySQS) setPlan(plan func(op string, bodies []string) fault) {
	f.mu.Lock()
	f.setPlanLocked(plan)
	f.mu.Unlock()
}

func (f *faultySQS) setPlanLocked(plan func(op string, bodies []string) fault) { f.plan = plan }

// delivered records the messages a receive handed to watchbot.
func (f *faultySQS) delivered(out *sqs.ReceiveMessageOutput) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range out.Messages {
		body, h := aws.ToString(m.Body), aws.ToString(m.ReceiptHandle)
		if prev := f.lastReceipt[body]; prev != "" && !f.settling[prev] {
			f.lapsed++
			if f.hungRenewals > 0 {
				f.together++
			}
		}
		f.lastReceipt[body] = h
	}
}

// settles records receipt handles a settle was sent for: a delete, or a visibility change
// other than a renewal's (which is the whole visibility timeout).
func (f *faultySQS) settles(vis int32, handles ...*string) {
	if vis == sqsspec.Seconds(DefaultConfig().VisibilityTimeout) {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, h := range handles {
		f.settling[aws.ToString(h)] = true
	}
}

// around runs call as the plan says for op on the messages of handles.
func (f *faultySQS) around(ctx context.Context, op string, handles []*string, call func() error) error {
	f.mu.Lock()
	var ft fault
	if f.plan != nil {
		bodies := make([]string, len(handles))
		for i, h := range handles {
			bodies[i] = f.byReceipt[aws.ToString(h)]
		}
		ft = f.plan(op, bodies)
	}
	if ft.hang {
		f.hangs++
		if op == "SendMessage" {
			f.hungSends++
		}
	}
	if ft.lost {
		f.lostAnswers++
	}
	f.mu.Unlock()
	if ft.delay > 0 {
		select {
		case <-time.After(ft.delay):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if ft.hang {
		renewal := strings.HasPrefix(op, "ChangeMessageVisibility")
		f.mu.Lock()
		if renewal {
			f.hungRenewals++
		}
		f.mu.Unlock()
		<-ctx.Done()
		f.mu.Lock()
		if renewal {
			f.hungRenewals--
		}
		f.mu.Unlock()
		return ctx.Err()
	}
	err := call()
	if err == nil && ft.lost {
		return &smithy.GenericAPIError{Code: "InternalFailure", Message: "answer lost (injected)"}
	}
	return err
}

func (f *faultySQS) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (out *sqs.ReceiveMessageOutput, err error) {
	err = f.around(ctx, "ReceiveMessage", nil, func() (err error) {
		out, err = f.Server.ReceiveMessage(ctx, in, opts...)
		if out != nil {
			f.mu.Lock()
			for _, m := range out.Messages {
				f.byReceipt[aws.ToString(m.ReceiptHandle)] = aws.ToString(m.Body)
			}
			f.mu.Unlock()
		}
		return err
	})
	if err == nil {
		f.delivered(out)
	}
	return out, err
}

func (f *faultySQS) DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, opts ...func(*sqs.Options)) (out *sqs.DeleteMessageOutput, err error) {
	f.settles(-1, in.ReceiptHandle)
	err = f.around(ctx, "DeleteMessage", []*string{in.ReceiptHandle}, func() (err error) { out, err = f.Server.DeleteMessage(ctx, in, opts...); return err })
	return out, err
}

func (f *faultySQS) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (out *sqs.DeleteMessageBatchOutput, err error) {
	handles := make([]*string, len(in.Entries))
	for i, e := range in.Entries {
		handles[i] = e.ReceiptHandle
	}
	f.settles(-1, handles...)
	err = f.around(ctx, "DeleteMessageBatch", handles, func() (err error) { out, err = f.Server.DeleteMessageBatch(ctx, in, opts...); return err })
	return out, err
}

func (f *faultySQS) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, opts ...func(*sqs.Options)) (out *sqs.ChangeMessageVisibilityOutput, err error) {
	f.settles(in.VisibilityTimeout, in.ReceiptHandle)
	err = f.around(ctx, "ChangeMessageVisibility", []*string{in.ReceiptHandle}, func() (err error) {
		out, err = f.Server.ChangeMessageVisibility(ctx, in, opts...)
		return err
	})
	return out, err
}

func (f *faultySQS) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (out *sqs.ChangeMessageVisibilityBatchOutput, err error) {
	handles := make([]*string, len(in.Entries))
	for i, e := range in.Entries {
		handles[i] = e.ReceiptHandle
		f.settles(e.VisibilityTimeout, e.ReceiptHandle)
	}
	err = f.around(ctx, "ChangeMessageVisibilityBatch", handles, func() (err error) {
		out, err = f.Server.ChangeMessageVisibilityBatch(ctx, in, opts...)
		return err
	})
	return out, err
}

func (f *faultySQS) SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (out *sqs.SendMessageOutput, err error) {
	err = f.around(ctx, "SendMessage", nil, func() (err error) { out, err = f.Server.SendMessage(ctx, in, opts...); return err })
	return out, err
}

// chaosRig is one test's queue (standard or FIFO, with a dead-letter queue), faulty SQS,
// stand-in worker and supervisor.
type chaosRig struct {
	t          *testing.T
	sqs        *faultySQS
	srv        *fakesqs.Server
	queue, dlq string
	cfg        Config
	logs       *testenv.Buffer

	// took says how long a run of a body takes, and exit how it exits.
	took func(body string) time.Duration
	exit func(body string) int

	mu      sync.Mutex
	running map[string]int // message id -> runs of it under way
	twice   []string       // messages that ran twice at once
	runs    map[string]int // message id -> runs started
	bodies  map[string]string
}

func newChaosRig(t *testing.T, fifo bool, maxReceiveCount int) *chaosRig {
	t.Helper()
	srv := fakesqs.New()
	ctx := context.Background()
	suffix, attrs := "", map[string]string{}
	if fifo {
		suffix, attrs = ".fifo", map[string]string{"FifoQueue": "true"}
	}
	dlq, err := srv.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("jobs-dlq" + suffix), Attributes: attrs})
	if err != nil {
		t.Fatal(err)
	}
	qattrs := map[string]string{"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:jobs-dlq%s","maxReceiveCount":%d}`,
		suffix, maxReceiveCount)}
	if fifo {
		qattrs["FifoQueue"] = "true"
	}
	q, err := srv.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("jobs" + suffix), Attributes: qattrs})
	if err != nil {
		t.Fatal(err)
	}
	r := &chaosRig{t: t, srv: srv, sqs: &faultySQS{Server: srv, byReceipt: map[string]string{}, lastReceipt: map[string]string{}, settling: map[string]bool{}}, queue: aws.ToString(q.QueueUrl), dlq: aws.ToString(dlq.QueueUrl),
		logs: &testenv.Buffer{}, running: map[string]int{}, runs: map[string]int{}, bodies: map[string]string{},
		took: func(string) time.Duration { return time.Second }, exit: func(string) int { return 0 }}
	cfg := DefaultConfig()
	cfg.QueueURL = r.queue
	cfg.Command = []string{"true"} // never run: the stand-in worker takes its place
	cfg.TempDir = t.TempDir()
	r.cfg = cfg
	return r
}

// send sends bodies; on a FIFO queue each to the group its first letter names.
func (r *chaosRig) send(bodies ...string) {
	r.t.Helper()
	for _, b := range bodies {
		in := &sqs.SendMessageInput{QueueUrl: aws.String(r.queue), MessageBody: aws.String(b)}
		if strings.HasSuffix(r.queue, ".fifo") {
			in.MessageGroupId, in.MessageDeduplicationId = aws.String(b[:1]), aws.String(strings.ReplaceAll(b, " ", "-"))
		}
		if _, err := r.srv.SendMessage(context.Background(), in); err != nil {
			r.t.Fatalf("send %s: %v", b, err)
		}
	}
}

// start runs the supervisor until the returned stop is called; stop returns Run's error and
// how long Run took to return after the stop request.
func (r *chaosRig) start(deps Deps) (stop func() (time.Duration, error)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	deps.SQS, deps.spawn = r.sqs, r.spawn
	deps.Logger = slog.New(slog.NewJSONHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	go func() { done <- Run(ctx, r.cfg, deps) }()
	var once sync.Once
	var took time.Duration
	var err error
	stop = func() (time.Duration, error) {
		once.Do(func() {
			asked := time.Now()
			cancel()
			err = <-done
			took = time.Since(asked)
		})
		return took, err
	}
	// A test that fails early still stops the supervisor, so that the bubble can end.
	r.t.Cleanup(func() { _, _ = stop() })
	return stop
}

// spawn stands in for runWorker: it reads the message (or the batch) as a worker would,
// records the run, and ends after took, or as runWorker would when ctx ends.
func (r *chaosRig) spawn(ctx context.Context, spec worker.Spec, _ *slog.Logger) worker.Result {
	_, msgs, err := workerInput(r.t, spec)
	if err != nil {
		return worker.Result{End: worker.NotStarted, Err: err}
	}
	var took time.Duration
	exit := 0
	r.mu.Lock()
	for _, m := range msgs {
		r.runs[m.ID]++
		r.bodies[m.ID] = m.Body
		if r.running[m.ID]++; r.running[m.ID] > 1 {
			r.twice = append(r.twice, fmt.Sprintf("%s (%s) at %v", m.Body, m.ID, time.Since(t0Bubble)))
		}
		took, exit = max(took, r.took(m.Body)), max(exit, r.exit(m.Body))
	}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		for _, m := range msgs {
			r.running[m.ID]--
		}
		r.mu.Unlock()
	}()
	if spec.MaxDuration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, spec.MaxDuration, worker.ErrTimedOut)
		defer cancel()
	}
	if spec.Started != nil {
		spec.Started(func() {})
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
	return run
}

// batchLine is a message of a batch as a stand-in worker reads it: the fields it uses.
type batchLine struct {
	ID      string `json:"id"`
	Body    string `json:"body"`
	Attempt int    `json:"attempt"`
	GroupID string `json:"groupId,omitempty"`
}

// workerInput reads what a stand-in worker is given: its environment, and the messages of
// its run as batch lines (one, built from the environment, in per-message mode).
func workerInput(t *testing.T, spec worker.Spec) (map[string]string, []batchLine, error) {
	env := map[string]string{}
	for _, kv := range spec.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	data, err := os.ReadFile(spec.StdinPath)
	if err != nil {
		return nil, nil, err
	}
	if _, batch := env["WATCHBOT_BATCH_SIZE"]; !batch {
		attempt, _ := strconv.Atoi(env["WATCHBOT_ATTEMPT"])
		return env, []batchLine{{ID: env["MessageId"], Body: string(data), GroupID: env["WATCHBOT_GROUP_ID"], Attempt: attempt}}, nil
	}
	var lines []batchLine
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for sc.Scan() {
		var l batchLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Errorf("batch line %q: %v", sc.Text(), err)
		}
		lines = append(lines, l)
	}
	return env, lines, nil
}

// ranTwice returns the messages that ran twice at the same time.
func (r *chaosRig) ranTwice() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.twice
}

// ran reports whether a message with body has run.
func (r *chaosRig) ran(body string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, b := range r.bodies {
		if b == body && r.runs[id] > 0 {
			return true
		}
	}
	return false
}

// inBubble runs f in a testing/synctest bubble and fails loudly when the bubble freezes:
// when f has not returned after limit of real time, every goroutine's stack is printed and
// the test binary panics (a goroutine stuck in the bubble cannot be ended otherwise). A
// bubble freezes when a goroutine in it waits on a mutex that another holds while it waits
// in turn: synctest does not count a mutex wait as durably blocked, so the bubble's clock
// stops. A deadlock through channels alone is synctest's own "deadlock" panic, which prints
// every goroutine's stack too (traceback "all").
func inBubble(t *testing.T, what string, limit time.Duration, f func(t *testing.T)) {
	t.Helper()
	debug.SetTraceback("all")
	done := make(chan struct{})
	go func() {
		select {
		case <-done:
		case <-time.After(limit):
			fmt.Fprintf(os.Stderr, "FROZEN BUBBLE: %s has not ended after %v of real time; its goroutines:\n%s\n", what, limit, allStacks())
			panic("frozen bubble: " + what)
		}
	}()
	synctest.Test(t, f)
	close(done)
}

// allStacks returns every goroutine's stack.
func allStacks() string {
	buf := make([]byte, 16<<20)
	return string(buf[:runtime.Stack(buf, true)])
}

// seedRand returns a source for one seed's choices.
func seedRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }

// itoa is strconv.Itoa, short.
func itoa(n int) string { return strconv.Itoa(n) }
