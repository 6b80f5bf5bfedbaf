// Package worker runs the supervisor's jobs. What differs between kinds of worker (a process
// per run, an HTTP application POSTed to, long-lived Lambda runtimes) lives here, behind Kind;
// the supervisor decides what a run's result means for each message (its outcome table) and
// names no kind.
//
// A kind keeps its own contract with the worker: the process kind writes the message file,
// builds the WATCHBOT_* environment, runs the command in its own process group (stopped
// with SIGTERM, then SIGKILL), logs its output and reads its result file; the HTTP kind
// POSTs the message with Elastic Beanstalk's worker daemon headers and reads its answer; the
// Lambda kind invokes a runtime with the SQS event Lambda would build (worker/lambda) and
// reads its partial batch response.
//
// # Locks
//
// A kind's Run is called for many jobs at once, and what they share is guarded by a lock of
// its own, held only to read or change it, never across a log line, a channel send or a
// network call:
//
//   - slotFiles.mu: the free job-file slots of the work directory.
//   - Dirs.mu: the spill directory and the directories' owner files. Making the spill
//     directory (once, so two runs that spill at once make one) and removing the
//     directories at the end are file I/O under it.
//   - stopper.mu: whether a process's worker was signalled and has exited. The group is
//     signalled under it, so that no signal follows the exit (a process group id may be
//     reused).
//   - lambda.Server.mu (worker/lambda): the invocation given out and the extensions.
package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Kind is a kind of worker, as the supervisor drives it: one for a listen, whichever queues
// it serves. Start readies it before any message is received; Run is called from many run
// goroutines at once, one job each, up to the listen's --concurrency; Stop ends it once no
// job runs.
type Kind interface {
	// Start readies the kind: its command found, or its application answering. An error
	// stops the listen before any message is received.
	Start(ctx context.Context) error
	// Run runs job once and reports how it ended. Ending ctx stops the worker: its cause
	// (context.Cause) comes back in the Result of a Stopped run.
	Run(ctx context.Context, job Job) Result
	// Ready reports whether the kind takes work once started, and if not why: Lambda
	// runtimes are not while one of them fails its init.
	Ready() (ok bool, reason string)
	// Stop releases what the kind holds, once no job runs.
	Stop()
}

// Job is one run of a worker: one message, or a batch, of one queue.
type Job struct {
	// QueueURL is the messages' queue; MaxAttempts its effective --max-attempts.
	QueueURL    string
	MaxAttempts int
	// QueueARN is the queue's ARN ("" when unknown); FIFO says it is a FIFO queue, whose
	// groups keep their order.
	QueueARN string
	FIFO     bool
	Messages []Message
	// Batch: the batch contract (--batch-size above 1), even for one message.
	Batch bool
	// Log is the run's logger; the worker's output and how the run ended go to it.
	Log *slog.Logger
	// Started, when set, is called once the worker runs, with the way to kill it at once
	// (the second stop request). A kind with nothing to kill never calls it.
	Started func(kill func())
}

// Message is a message of a job, as a worker sees it.
type Message struct {
	ID string
	// Raw is the body exactly as received; Body is what a worker gets: Raw, or the inner
	// Message of an SNS notification, with its Subject.
	Raw, Body, Subject string
	// Attributes are the String and Number message attributes (SNS's when unwrapped);
	// SQSAttributes are those SQS delivered.
	Attributes    map[string]string
	SQSAttributes map[string]types.MessageAttributeValue
	// Receives is SQS's ApproximateReceiveCount; Attempt is watchbot's attempt number: the
	// receive count, plus the runs watchbot gave the message in place on a FIFO queue.
	Receives, Attempt    int
	SentAt, FirstReceive time.Time
	SenderID             string
	// GroupID is the MessageGroupId: a FIFO group, or a fair queue's tenant.
	GroupID string
	// ReceiptHandle is this receive's; System the SQS system attributes as received
	// (ApproximateReceiveCount, SentTimestamp, MessageGroupId, …), and TraceHeader their
	// AWSTraceHeader: a Lambda record carries them as they are.
	ReceiptHandle, TraceHeader string
	System                     map[string]string
	// Payload, when the body was an S3 pointer, is its object, fetched; nil otherwise.
	Payload *Payload
}

// End is how a run ended.
type End int

const (
	// Exited: the process exited on its own; Code is its exit status.
	Exited End = iota
	// Succeeded: a worker without an exit status (an application) answered success.
	Succeeded
	// Failed: an application answered a failure; Code is its HTTP status.
	Failed
	// Signaled: the process was killed by a signal watchbot did not send; Code is its number.
	Signaled
	// TimedOut: the run outlived its limit (--max-job-duration, --http-timeout).
	TimedOut
	// NotStarted: the worker could not be started or reached; Err says why.
	NotStarted
	// Stopped: ending the run's context stopped it; Err is the context's cause.
	Stopped
	// FunctionFailed: a Lambda function failed the records without a directive: it posted
	// an error, answered what is no batch response, named them in batchItemFailures, or its
	// runtime ended during the invocation; Err says which.
	FunctionFailed
)

// Result is how a run ended, and what the worker said of each message.
type Result struct {
	End      End
	Code     int
	Err      error
	Duration time.Duration
	// Directives are the worker's decisions, by message id: a message without one follows
	// End and Code.
	Directives map[string]*Directive
	// Answer is what the worker answered, for a person to read (try): a Lambda function's
	// response, or the error it posted.
	Answer string
}
