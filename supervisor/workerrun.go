package supervisor

// Running a worker: the run's job handed to the worker kind, and how the run ended read
// back as outcomeFor's input.

import (
	"context"
	"log/slog"
	"time"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/internal/tracing"
	"github.com/watchbot/watchbot/worker"
)

// workerRun is how a worker run ended, as outcomeFor reads it.
type workerRun struct {
	End      runEnd
	ExitCode int // exit status, HTTP status, or the signal number when End is endSignaled
	Duration time.Duration
	// Answer is the worker's answer, for try to print.
	Answer string
}

// runWorker runs the worker once for jobs, and returns how the run ended with the worker's
// directives, by message id.
func (r *runner) runWorker(ctx context.Context, jobs []*job) (workerRun, map[string]*worker.Directive) {
	job := worker.Job{QueueURL: r.cfg.QueueURL, QueueARN: r.queueARN, FIFO: r.fifo, MaxAttempts: r.maxAttempts, Messages: make([]worker.Message, len(jobs)),
		Batch: r.cfg.BatchSize > 1, Log: r.workerLog(ctx, jobs),
		Started: func(kill func()) {
			for _, j := range jobs {
				j.setKill(kill)
			}
		}}
	for i, j := range jobs {
		job.Messages[i] = workerMessage(j)
	}
	r.starting(jobs)
	res := r.kind.Run(ctx, job)
	if res.End != worker.NotStarted {
		r.metrics.Add(alarms.WorkerDuration, float64(res.Duration.Milliseconds()))
	}
	run := workerRun{End: runEndOf(res), ExitCode: res.Code, Duration: res.Duration, Answer: res.Answer}
	if run.End == endSpawnError || run.End == endLeaseLost {
		// The message is no longer watchbot's, or the worker never saw it.
		return run, nil
	}
	return run, res.Directives
}

// workerLog is the logger of a run: its message's, with its attempt, or the batch's.
func (r *runner) workerLog(ctx context.Context, jobs []*job) *slog.Logger {
	if r.cfg.BatchSize > 1 {
		return r.log.With(append([]any{"batch_size", len(jobs), "first_message_id", jobs[0].msg.ID}, tracing.LogAttrs(ctx)...)...)
	}
	return r.runLog(ctx, jobs[0]).With("attempt", jobs[0].attempt)
}

// workerMessage is j's message as its worker sees it.
func workerMessage(j *job) worker.Message {
	m := j.msg
	return worker.Message{ID: m.ID, Raw: m.Raw, Body: m.Body, Subject: m.Subject, Attributes: m.Attributes, SQSAttributes: m.SQSAttributes,
		Receives: m.Attempt, Attempt: j.attempt, SentAt: m.SentAt, FirstReceive: m.FirstReceive, SenderID: m.SenderID, GroupID: m.GroupID,
		ReceiptHandle: m.ReceiptHandle, TraceHeader: m.TraceHeader, System: m.System, Payload: j.fetched}
}

// starting measures the messages' age, per tenant too, and logs their bodies when asked, as
// their run starts.
func (r *runner) starting(jobs []*job) {
	for _, j := range jobs {
		if !j.msg.SentAt.IsZero() {
			age := time.Since(j.msg.SentAt)
			r.metrics.Add(alarms.MessageAge, float64(age.Milliseconds()))
			r.tenants.Record(r.queueName, j.msg.GroupID, age)
		}
		switch {
		case r.cfg.LogBodies && j.payload != nil:
			j.log.Info("starting worker", "body", j.msg.Body, "payload", j.payload.URI())
		case r.cfg.LogBodies:
			j.log.Info("starting worker", "body", j.msg.Body)
		}
	}
}

// runEndOf is how a run ended, as the outcome table reads it, from what the worker kind
// reported: a success without an exit status is exit 0; a stop is read from its cause.
func runEndOf(res worker.Result) runEnd {
	switch res.End {
	case worker.Exited, worker.Succeeded:
		return endExited
	case worker.Failed:
		return endHTTPStatus
	case worker.FunctionFailed:
		return endFunctionFailed
	case worker.Signaled:
		return endSignaled
	case worker.TimedOut:
		return endTimedOut
	case worker.NotStarted:
		return endSpawnError
	}
	return endFor(res.Err)
}
