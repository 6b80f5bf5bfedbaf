package worker

// The Lambda kind: long-lived Lambda runtimes (a bootstrap, a binary built on aws-lambda-go,
// aws-lambda-ric) served the Runtime API on loopback, each job one invocation with the SQS
// event Lambda would build, its answer read as ReportBatchItemFailures.

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/backoff"
	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/internal/setting"
	"github.com/watchbot/watchbot/worker/lambda"
)

// LambdaWorker configures the Lambda kind (listen --lambda, --lambda-*): the command after --
// is a Lambda runtime, served the Runtime API.
type LambdaWorker struct {
	// Enabled runs the command as a Lambda runtime (--lambda).
	Enabled bool
	// FunctionName is the function's name (--lambda-function-name; "": the queue's name).
	FunctionName string
	// Handler is _HANDLER, for runtimes that read it (--lambda-handler).
	Handler string
	// InitTimeout bounds a runtime's init, until its first /next (--lambda-init-timeout).
	InitTimeout time.Duration
}

// DefaultLambdaWorker returns the Lambda kind's defaults: a minute for a runtime's init.
func DefaultLambdaWorker() LambdaWorker { return LambdaWorker{InitTimeout: time.Minute} }

// Check validates the Lambda settings, once --lambda is given.
func (w LambdaWorker) Check() error {
	if w.InitTimeout <= 0 || w.InitTimeout > time.Hour {
		return setting.Refuse(listenspec.SettingLambdaInitTimeout, w.InitTimeout, "must be positive and at most 1h")
	}
	if strings.ContainsAny(w.FunctionName, ":/ ") || len(w.FunctionName) > 64 {
		return setting.Refuse(listenspec.SettingLambdaFunction, w.FunctionName, "must be a function name: up to 64 letters, digits, - and _")
	}
	return nil
}

// LambdaConfig is what the Lambda kind runs, and how (listen --lambda).
type LambdaConfig struct {
	// Command is the runtime, exec'd directly with no shell.
	Command []string
	// Environ is watchbot's own environment, which every runtime inherits.
	Environ []string
	Lambda  LambdaWorker
	// QueueURL is the (first) queue's: its name is the function's when Lambda names none.
	QueueURL string
	// Runtimes is how many run at once (--concurrency), one invocation each.
	Runtimes int
	// MaxDuration is an invocation's deadline (--max-job-duration; 0: SQS's 12 h);
	// KillGrace the wait between a runtime's SIGTERM and SIGKILL.
	MaxDuration, KillGrace time.Duration
	// Restart spaces the restarts of a runtime whose init fails.
	Restart backoff.Exponential
	Log     *slog.Logger
}

// maxInvocation is the deadline of an invocation without --max-job-duration, which a
// handler reads as its remaining time and so needs: SQS's in-flight limit, past which only a
// --max-job-duration with --dedupe-table (which relays the message) lets a job run.
const maxInvocation = 12 * time.Hour

// Lambda runs each job as one invocation (or more, to keep within 6 MB) of a runtime of its
// pool.
type Lambda struct {
	cfg LambdaConfig
	fn  lambda.Function
	// region is the queue URL's, "" when it names none (an emulator's).
	region  string
	command []string
	// idle holds the runtimes waiting for work, at most one per runtime.
	idle chan *runtimeEnv
	// stop ends the keepers, which wg waits for.
	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup

	// mu guards failing: the runtimes whose last init failed, by slot, with its error.
	mu      sync.Mutex
	failing map[int]error
}

var _ Kind = (*Lambda)(nil)

// NewLambda returns the Lambda kind of cfg.
func NewLambda(cfg LambdaConfig) *Lambda {
	name := cfg.Lambda.FunctionName
	if name == "" {
		name = queueattr.NameFromURL(cfg.QueueURL)
	}
	if cfg.MaxDuration <= 0 {
		cfg.MaxDuration = maxInvocation
	}
	return &Lambda{cfg: cfg, fn: lambda.Function{Name: name, Version: "$LATEST", Handler: cfg.Lambda.Handler}, region: queueattr.RegionFromURL(cfg.QueueURL),
		idle: make(chan *runtimeEnv, cfg.Runtimes), stop: make(chan struct{}), failing: map[int]error{}}
}

// Start starts the runtimes and waits until each has asked for work once, so that no
// message is received for a runtime that cannot take it. A runtime whose init fails is
// restarted with a capped backoff meanwhile; ending ctx gives up.
func (l *Lambda) Start(ctx context.Context) error {
	command, err := resolve(l.cfg.Command)
	if err != nil {
		return err
	}
	l.command = command
	up := make(chan struct{}, l.cfg.Runtimes)
	for slot := range l.cfg.Runtimes {
		l.wg.Go(func() { l.keep(slot, up) })
	}
	for range l.cfg.Runtimes {
		select {
		case <-up:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return nil
}

// Stop drains the runtimes: SHUTDOWN to their extensions, SIGTERM, and SIGKILL after
// KillGrace; it returns once every runtime has exited.
func (l *Lambda) Stop() {
	l.stopOnce.Do(func() { close(l.stop) })
	l.wg.Wait()
}

// Ready reports whether every runtime is up, or coming up again after it ended: not while
// one of them fails its init, as each restart of a broken image does.
func (l *Lambda) Ready() (bool, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.failing) == 0 {
		return true, ""
	}
	slot := slices.Min(slices.Collect(maps.Keys(l.failing)))
	return false, fmt.Sprintf("%d of %d lambda runtimes ready: runtime %d failed its init: %v", l.cfg.Runtimes-len(l.failing), l.cfg.Runtimes, slot, l.failing[slot])
}

// initEnded records how runtime slot's init ended: err nil once it asked for work.
func (l *Lambda) initEnded(slot int, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil {
		delete(l.failing, slot)
		return
	}
	l.failing[slot] = err
}

// Run invokes a runtime with job's records and reads its answer: the records it reported
// failed, or all of them when it failed as a whole, follow the run's failure; the others are
// done. A runtime that outlives the deadline, or ends during the invocation, is replaced.
func (l *Lambda) Run(ctx context.Context, job Job) Result {
	start := time.Now()
	records, directives := l.records(job)
	res := Result{End: Succeeded, Directives: directives}
	order, groups := recordOrder(records, job.FIFO)
	failed, heldGroups := map[string]bool{}, map[string]bool{}
	for len(records) > 0 && res.End == Succeeded {
		// A group with a failed record runs no more of its records in this job.
		var runnable []lambda.Record
		for _, r := range records {
			if !heldGroups[groups[r.MessageID]] {
				runnable = append(runnable, r)
			}
		}
		events, in, _ := lambda.Events(runnable, lambda.MaxResponse)
		if len(events) == 0 {
			break
		}
		records = slices.DeleteFunc(records, func(r lambda.Record) bool {
			return slices.ContainsFunc(in[0], func(x lambda.Record) bool { return x.MessageID == r.MessageID })
		})
		end, batchFailed := l.invoke(ctx, job, events[0], in[0])
		res.Answer = end.Answer
		for id := range batchFailed {
			failed[id] = true
			if g := groups[id]; g != "" {
				heldGroups[g] = true
			}
		}
		if end.End != Succeeded {
			res.End, res.Code, res.Err = end.End, end.Code, end.Err
		}
	}
	if res.End == Succeeded && len(failed)+len(records) > 0 {
		res.End, res.Err = FunctionFailed, errors.New("the function reported failed records")
	}
	failed = lambda.HoldSuccessors(failed, order, groups)
	for _, r := range records {
		failed[r.MessageID] = true // not invoked: they follow the run's end
	}
	for _, id := range order {
		if res.End != Succeeded && !failed[id] && res.Directives[id] == nil {
			res.Directives[id] = &Directive{Action: "ack"}
		}
	}
	res.Duration = time.Since(start)
	logEnd(job.Log, res, l.cfg.MaxDuration)
	return res
}

// recordOrder is the records' message ids in order, and on a FIFO queue their groups.
func recordOrder(records []lambda.Record, fifo bool) ([]string, map[string]string) {
	order := make([]string, len(records))
	groups := map[string]string{}
	for i, r := range records {
		order[i] = r.MessageID
		if fifo {
			groups[r.MessageID] = r.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]
		}
	}
	return order, groups
}

// invoke runs one event on an idle runtime, and returns how it ended with the records that
// follow that end: those the response names, or all of them when the invocation failed or
// stopped as a whole.
func (l *Lambda) invoke(ctx context.Context, job Job, event []byte, records []lambda.Record) (Result, map[string]bool) {
	all := map[string]bool{}
	for _, r := range records {
		all[r.MessageID] = true
	}
	ctx, cancel := context.WithTimeoutCause(ctx, l.cfg.MaxDuration, ErrTimedOut)
	defer cancel()
	deadline, _ := ctx.Deadline()
	inv := lambda.Invocation{RequestID: requestID(), Deadline: deadline, FunctionARN: lambda.FunctionARN(job.QueueARN, l.fn.Name), Payload: event,
		TraceID: lambda.TraceID(job.Messages[0].TraceHeader, job.Messages[0].Attributes["traceparent"])}
	for {
		var rt *runtimeEnv
		select {
		case rt = <-l.idle:
		case <-ctx.Done():
			return Result{End: stoppedBy(context.Cause(ctx)), Err: context.Cause(ctx)}, all
		}
		if job.Started != nil {
			job.Started(rt.kill)
		}
		answer, err := rt.srv.Invoke(ctx, inv)
		switch {
		case errors.Is(err, lambda.ErrClosed):
			continue // it ended while idle: another takes the invocation
		case errors.Is(err, lambda.ErrGone):
			return Result{End: FunctionFailed, Err: fmt.Errorf("runtime %d ended during the invocation", rt.slot)}, all
		case err != nil:
			// The deadline, or a stop: the runtime is replaced, as Lambda resets a
			// timed-out sandbox.
			rt.kill()
			return Result{End: stoppedBy(err), Err: err}, all
		}
		l.idle <- rt
		if answer.Error != nil {
			job.Log.Warn("the function failed", "error_type", answer.Error.Type, "error_message", answer.Error.Message)
			posted, _ := json.Marshal(answer.Error)
			return Result{End: FunctionFailed, Err: answer.Error, Answer: string(posted)}, all
		}
		failed, perr := lambda.Failures(answer.Response, all)
		if perr != nil {
			job.Log.Warn("the function's response fails the whole batch", "error", perr)
			return Result{End: FunctionFailed, Err: perr, Answer: string(answer.Response)}, all
		}
		return Result{End: Succeeded, Answer: string(answer.Response)}, failed
	}
}

// records are job's messages as an SQS event's records, with the decisions for those that
// cannot be invoked: a payload larger than any invocation carries, or one that cannot be read.
func (l *Lambda) records(job Job) ([]lambda.Record, map[string]*Directive) {
	var records []lambda.Record
	directives := map[string]*Directive{}
	arn, _ := queueattr.ParseARN(job.QueueARN)
	src := lambda.Source{QueueARN: job.QueueARN, Region: arn.Region}
	for _, m := range job.Messages {
		body := m.Raw
		if m.Payload != nil {
			b, err := readPayload(m.Payload)
			switch {
			case errors.Is(err, errTooLarge):
				directives[m.ID] = &Directive{Action: "dead-letter", Reason: err.Error()}
				continue
			case err != nil:
				job.Log.Error("could not read the payload; the message is retried", "message_id", m.ID, "error", err)
				directives[m.ID] = &Directive{Action: "retry", Reason: err.Error()}
				continue
			}
			body = string(b)
		}
		records = append(records, lambda.NewRecord(sqsMessage(m), body, src))
	}
	return records, directives
}

var errTooLarge = fmt.Errorf("the payload is larger than Lambda's invocation limit (%d bytes)", lambda.MaxResponse)

// readPayload reads a fetched payload, the record's body, and removes its file.
func readPayload(p *Payload) ([]byte, error) {
	files := p.take()
	defer files.remove()
	if files.size > lambda.MaxResponse {
		return nil, errTooLarge
	}
	return io.ReadAll(io.NewSectionReader(files.stdin, 0, files.size))
}

// sqsMessage is m as SQS delivered it, for its record. Its ApproximateReceiveCount is the
// attempt: a FIFO message retried in place is not received again, but Lambda would have
// received it again, and a handler counts its attempts by it.
func sqsMessage(m Message) types.Message {
	sys := maps.Clone(m.System)
	if sys == nil {
		sys = map[string]string{}
	}
	sys[string(types.MessageSystemAttributeNameApproximateReceiveCount)] = strconv.Itoa(m.Attempt)
	return types.Message{MessageId: aws.String(m.ID), ReceiptHandle: aws.String(m.ReceiptHandle), Body: aws.String(m.Raw),
		Attributes: sys, MessageAttributes: m.SQSAttributes}
}

// requestID is a new invocation's id, in the UUID form Lambda's have.
func requestID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	h := fmt.Sprintf("%x", b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// restartDelay is the wait before a runtime's init is tried again after failures failed
// inits in a row.
func (l *Lambda) restartDelay(failures int) time.Duration {
	return l.cfg.Restart.Delay(failures, func() float64 { return 1 })
}
