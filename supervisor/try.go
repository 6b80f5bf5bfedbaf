package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/internal/setting"
)

// TryMessage is a message for Try: what a sender would have put on the queue.
type TryMessage struct {
	Body       string
	Attributes map[string]string
	// GroupID is the MessageGroupId: a FIFO group, or a fair queue's tenant ("" for none).
	GroupID string
}

// Decision is what listen would do with a message after a worker run, as Try found it.
type Decision struct {
	MessageID string `json:"messageId"`
	// Action is delete, retry, release, dead-letter, redrive (left to the redrive policy) or
	// pause (the worker asked for one: the message waits in place and runs again after it).
	Action string `json:"action"`
	Reason string `json:"reason,omitempty"`
	// Delay is a retry's delay, or a pause's length (capped by --max-pause).
	Delay time.Duration `json:"-"`
	// DelaySeconds is Delay in seconds, for JSON.
	DelaySeconds float64 `json:"delaySeconds,omitempty"`
	Attempt      int     `json:"attempt"`
	MaxAttempts  int     `json:"maxAttempts"`
	// DecidedBy is what decided: "exit code N", "signal N", "--max-job-duration", "result
	// file: {...}", "the worker could not start".
	DecidedBy string `json:"decidedBy"`
	// Answer is what the worker answered the run, when it answers: a Lambda function's
	// response, or the error it posted.
	Answer string `json:"answer,omitempty"`
}

// String is the decision in one line a person reads at a glance.
func (d Decision) String() string {
	var what string
	switch d.Action {
	case actRetry.String():
		what = fmt.Sprintf("retry in %s (attempt %d of %d)", d.Delay.Round(time.Millisecond), d.Attempt, d.MaxAttempts)
	case actRedrive.String():
		what = fmt.Sprintf("left to the redrive policy (attempt %d of %d): %s", d.Attempt, d.MaxAttempts, d.Reason)
	case actDeadLetter.String():
		what = "dead-letter: " + d.Reason
	case tryPause:
		what = fmt.Sprintf("pause %s: no job starts until it ends, then the message runs again, not as an attempt", d.Delay.Round(time.Millisecond))
	default:
		what = d.Action
	}
	return what + " [" + d.DecidedBy + "]"
}

// tryPause is the Decision of a run whose worker asked for a pause without an action.
const tryPause = "pause"

// tryQueueURL is the queue a tried worker is told it reads from.
const tryQueueURL = "https://sqs.us-east-1.amazonaws.com/000000000000/watchbot-try"

// Try runs cfg.Command once for msgs (one message, or a batch with cfg.BatchSize > 1) exactly
// as listen would run it, at the given attempt of cfg.MaxAttempts, and returns what listen
// would then do with each message: the same environment, files, stdin, process group,
// deadline, kill escalation and output logging, and the same outcome table. No queue is
// involved; the queue is taken to have a redrive policy at cfg.MaxAttempts, as the stack's
// does. Worker output goes to log. With cfg.Payload's buckets, a pointer message's body is
// fetched with payloads exactly as listen fetches it (nil: pointers pass through, as in listen
// without a bucket); no object is deleted, as no message is.
func Try(ctx context.Context, cfg Config, msgs []TryMessage, attempt int, payloads PayloadAPI, log *slog.Logger) ([]Decision, error) {
	cfg, err := tryConfig(cfg, msgs, attempt)
	if err != nil {
		return nil, err
	}
	var s3 PayloadAPI
	if cfg.Payload.enabled() {
		if payloads == nil {
			return nil, errors.New("try: --payload-bucket needs an S3 client")
		}
		s3 = payloads
	}
	w, err := openWorkers(cfg, nil, log)
	if err != nil {
		return nil, err
	}
	defer w.close()
	if err := w.kind.Start(ctx); err != nil {
		return nil, err
	}
	// The queue is taken to have a redrive policy at cfg.MaxAttempts, as the stack's does.
	q := queueInfo{maxAttempts: cfg.MaxAttempts, maxReceiveCount: cfg.MaxAttempts, arn: tryQueueARN(cfg.QueueURL)}
	r := newRunner(cfg, q, runnerParts{metrics: alarms.Discard, log: log, random: rand.Float64, s3: s3, workers: w})
	jobs := tryJobs(msgs, attempt, log)
	// try records no span; the worker still gets the message's context (a traceparent --attr).
	traceCtx, _ := r.startSpan(ctx, jobs)
	runCtx, cancel := context.WithCancelCause(traceCtx)
	defer cancel(nil)
	tried := r.attempt(runCtx, cancel, jobs)
	if errors.Is(ctx.Err(), context.Canceled) {
		return nil, ctx.Err()
	}
	out := make([]Decision, len(jobs))
	for i, j := range jobs {
		res := tried.results[i]
		o := outcomeFor(res)
		d := Decision{MessageID: j.msg.ID, Action: o.Action.String(), Reason: o.Reason, Attempt: attempt, MaxAttempts: cfg.MaxAttempts,
			DecidedBy: decidedBy(res, cfg.Lambda.Enabled), Answer: tried.answer}
		switch {
		case o.Action == actRetry:
			d.Delay = r.delay(o, attempt)
			d.DelaySeconds = d.Delay.Seconds()
		case o.Paused:
			d.Action, d.Delay = tryPause, min(res.Directive.PauseFor, cfg.Limits.Fleet.MaxPause)
			d.DelaySeconds = d.Delay.Seconds()
		}
		out[i] = d
	}
	return out, nil
}

// tryConfig is cfg as Try runs it, with the queue and the attempts it takes when they are not
// given, once it and the messages to try are found valid.
func tryConfig(cfg Config, msgs []TryMessage, attempt int) (Config, error) {
	if err := PlatformError("try", runtime.GOOS); err != nil {
		return cfg, err
	}
	if cfg.QueueURL == "" {
		cfg.QueueURL = tryQueueURL
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = 10
	}
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	switch {
	case len(msgs) == 0:
		return cfg, setting.Refuse("", nil, "no message to try")
	case len(msgs) > 1 && len(msgs) > cfg.BatchSize:
		return cfg, setting.Refuse(listenspec.SettingBatchSize, cfg.BatchSize, fmt.Sprintf("is smaller than the %d messages given", len(msgs)))
	case attempt < 1 || attempt > cfg.MaxAttempts:
		return cfg, setting.Refuse(listenspec.SettingAttempt, attempt, fmt.Sprintf("must be between 1 and %s (%d)", setting.Ref(listenspec.SettingMaxAttempts), cfg.MaxAttempts))
	case cfg.HTTP.URL != "":
		return cfg, setting.Refuse(listenspec.SettingHTTPWorker, nil, "try runs a worker command")
	}
	cfg.Concurrency = 1 // one run, and with --lambda one runtime
	return cfg, nil
}

// tryQueueARN is the ARN of the queue a queue URL names (the try queue's, or --queue-url),
// as SQS would give it: arn:aws:sqs:REGION:ACCOUNT:NAME.
func tryQueueARN(queueURL string) string {
	u, err := url.Parse(queueURL)
	if err != nil {
		return ""
	}
	account, name, _ := strings.Cut(strings.TrimPrefix(u.Path, "/"), "/")
	return "arn:aws:sqs:" + queueattr.RegionFromURL(queueURL) + ":" + account + ":" + name
}

// tryJobs are the jobs of msgs, as listen would hold them had SQS just delivered them at
// attempt.
func tryJobs(msgs []TryMessage, attempt int, log *slog.Logger) []*job {
	now := time.Now()
	jobs := make([]*job, len(msgs))
	for i, m := range msgs {
		id := fmt.Sprintf("try-%d-%08x", i+1, rand.Uint32())
		sm := types.Message{
			MessageId: aws.String(id), ReceiptHandle: aws.String("try-" + id), Body: aws.String(m.Body),
			Attributes: map[string]string{
				string(types.MessageSystemAttributeNameApproximateReceiveCount):          strconv.Itoa(attempt),
				string(types.MessageSystemAttributeNameSentTimestamp):                    strconv.FormatInt(now.UnixMilli(), 10),
				string(types.MessageSystemAttributeNameApproximateFirstReceiveTimestamp): strconv.FormatInt(now.UnixMilli(), 10),
			},
			MessageAttributes: map[string]types.MessageAttributeValue{},
		}
		if m.GroupID != "" {
			sm.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)] = m.GroupID
		}
		for k, v := range m.Attributes {
			sm.MessageAttributes[k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
		}
		msg := parseMessage(sm)
		noteTrace(msg, log, alarms.Discard)
		jobs[i] = &job{msg: msg, attempt: attempt, log: log.With(append([]any{"message_id", id}, msg.Trace.LogAttrs()...)...)}
	}
	return jobs
}

// decidedBy names what decided a run's outcome.
func decidedBy(res result, lambda bool) string {
	if lambda && (res.End == endExited || res.End == endFunctionFailed) {
		if res.Directive != nil && res.Directive.Action != "ack" {
			return "the record could not be invoked"
		}
		return "the function's answer"
	}
	if d := res.Directive; d != nil {
		if d.Action == "" {
			return fmt.Sprintf("result file: pause %q", d.Pause)
		}
		return fmt.Sprintf("result file: %q", d.Action)
	}
	switch res.End {
	case endPayloadRejected, endPayloadError:
		return "the S3 payload; the worker did not run"
	case endSpawnError:
		return "the worker could not start"
	case endTimedOut:
		return "--max-job-duration"
	case endSignaled:
		return fmt.Sprintf("signal %d", res.ExitCode)
	}
	return fmt.Sprintf("exit code %d", res.ExitCode)
}
