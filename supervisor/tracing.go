package supervisor

// Tracing a run: the message's context read at receive, a CONSUMER span per run when an
// exporter is configured (docs/tracing.md lists its attributes), and the context handed to
// the worker whether or not watchbot records spans.

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/internal/tracing"
)

// watchbot's own span attributes.
const (
	attrAttempt    = attribute.Key("watchbot.attempt")
	attrOutcome    = attribute.Key("watchbot.outcome")
	attrReason     = attribute.Key("watchbot.reason")
	attrRetryDelay = attribute.Key("watchbot.retry_delay") // seconds
	attrQueueWait  = attribute.Key("watchbot.queue_wait")  // seconds
)

// noteTrace logs at debug and counts the trace context carriers of a received message that
// were present but malformed; the message runs without them.
func noteTrace(m message, log *slog.Logger, metrics alarms.Recorder) {
	for _, bad := range m.TraceMalformed {
		metrics.Add(alarms.TraceContextMalformed, 1)
		log.Debug("ignoring a malformed trace context", "message_id", m.ID, "carrier", bad.Carrier, "value", bad.Value, "error", bad.Err)
	}
}

// startSpan returns ctx carrying the run's trace context, and the run's span. A single
// message's run continues the message's context; with tracing on it is a child span
// "process <queue>", and the worker is handed that span. A batch's run starts a trace of its
// own linking every message's context (with tracing off a batch has no context to hand on).
// With tracing off the returned span records nothing and nothing is built for it.
func (r *runner) startSpan(ctx context.Context, jobs []*job) (context.Context, trace.Span) {
	batch := r.cfg.BatchSize > 1
	if !batch {
		ctx = jobs[0].msg.Trace.Context(ctx)
	}
	if !r.tracer.Enabled() {
		return ctx, trace.SpanFromContext(ctx)
	}
	attrs := []attribute.KeyValue{
		semconv.MessagingSystemAWSSQS,
		semconv.MessagingOperationTypeProcess,
		semconv.MessagingDestinationName(r.queueName),
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}
	if batch {
		attrs = append(attrs, semconv.MessagingBatchMessageCount(len(jobs)))
		links := make([]trace.Link, 0, len(jobs))
		for _, j := range jobs {
			if j.msg.Trace.Valid() {
				links = append(links, trace.Link{SpanContext: j.msg.Trace.Span,
					Attributes: []attribute.KeyValue{semconv.MessagingMessageID(j.msg.ID)}})
			}
		}
		opts = append(opts, trace.WithLinks(links...), trace.WithNewRoot())
	} else {
		m := jobs[0].msg
		attrs = append(attrs, semconv.MessagingMessageID(m.ID), attrAttempt.Int(jobs[0].attempt))
		if m.GroupID != "" {
			attrs = append(attrs, semconv.MessagingMessageConversationID(m.GroupID))
		}
		if !m.SentAt.IsZero() {
			attrs = append(attrs, attrQueueWait.Float64(time.Since(m.SentAt).Seconds()))
		}
	}
	ctx, span := r.tracer.Start(ctx, "process "+r.queueName, append(opts, trace.WithAttributes(attrs...))...)
	if span.IsRecording() {
		for _, j := range jobs {
			j.setSpan(span)
		}
	}
	return ctx, span
}

// endSpan records how the run went on its span and ends it: each message's outcome, and
// status Error when the run failed. The worker kind notes its own details (an exit code, an
// HTTP status) on the span as the run ends.
func (r *runner) endSpan(span trace.Span, jobs []*job, results []result, outs []outcome) {
	if !span.IsRecording() {
		return
	}
	for _, j := range jobs {
		j.setSpan(nil)
	}
	batch := len(jobs) > 1 || r.cfg.BatchSize > 1
	failed := ""
	for i, j := range jobs {
		o := outs[i]
		if o.WorkerError || o.SpawnError {
			failed = o.Reason
		}
		if batch {
			span.AddEvent("settled", trace.WithAttributes(semconv.MessagingMessageID(j.msg.ID), attrAttempt.Int(j.attempt),
				attrOutcome.String(o.Action.String()), attrReason.String(o.Reason)))
			continue
		}
		// The attempt again: with a dedupe table the claim, after the span began, counted it.
		span.SetAttributes(attrAttempt.Int(j.attempt), attrOutcome.String(o.Action.String()), attrReason.String(o.Reason))
	}
	for _, res := range results {
		if res.End == endTimedOut {
			span.AddEvent("stopped at --max-job-duration", trace.WithAttributes(attribute.String("watchbot.max_job_duration", r.cfg.MaxJobDuration.String())))
			break
		}
	}
	if failed != "" {
		span.SetStatus(codes.Error, failed)
	}
	span.End()
}

// spanEvent adds an event to the span of the run ctx belongs to, when it records.
func spanEvent(ctx context.Context, name string, attrs ...attribute.KeyValue) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent(name, trace.WithAttributes(attrs...))
	}
}

// recordRetryDelay notes on the run's span how long a retry of message j waits.
func recordRetryDelay(ctx context.Context, j *job, delay time.Duration) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent("retry", trace.WithAttributes(semconv.MessagingMessageID(j.msg.ID), attrRetryDelay.Float64(delay.Seconds())))
		span.SetAttributes(attrRetryDelay.Float64(delay.Seconds()))
	}
}

// runLog returns the logger for message j's lines during a run: j's own (with the context the
// message came with), or, when the run of this one message records a span, one that names
// that span, so the run's lines join watchbot's span. A batch's messages keep their own, as
// each has its own trace.
func (r *runner) runLog(ctx context.Context, j *job) *slog.Logger {
	if r.cfg.BatchSize > 1 || !trace.SpanFromContext(ctx).IsRecording() {
		return j.log
	}
	return r.log.With(append([]any{"message_id", j.msg.ID}, tracing.LogAttrs(ctx)...)...)
}

// setSpan records the span of the run j is part of, nil when none records, so the heartbeat
// can note on it the renewals that failed.
func (j *job) setSpan(span trace.Span) {
	j.stopMu.Lock()
	j.span = span
	j.stopMu.Unlock()
}

// spanEvent adds an event about j to the span of its run, if one records.
func (j *job) spanEvent(name string, attrs ...attribute.KeyValue) {
	j.stopMu.Lock()
	span := j.span
	j.stopMu.Unlock()
	if span != nil {
		span.AddEvent(name, trace.WithAttributes(append(attrs, semconv.MessagingMessageID(j.msg.ID))...))
	}
}
