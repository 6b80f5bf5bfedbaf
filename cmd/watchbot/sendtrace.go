package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/internal/tracing"
	"github.com/watchbot/watchbot/producer"
)

// sendFlushTimeout bounds how long `watchbot send` waits, after sending, for its span to reach
// the collector: a collector that is down must not hold up the job that called send.
const sendFlushTimeout = 5 * time.Second

// sendTrace is the trace `watchbot send` continues: the context of TRACEPARENT, TRACESTATE
// (as a worker receives them) and, with an exporter configured, the PRODUCER span
// "send <queue name>" that the messages name as their parent.
type sendTrace struct {
	span     trace.Span
	context  producer.TraceContext
	shutdown func(context.Context) error
	stderr   io.Writer
}

// startSendTrace starts send's trace for n messages to queueURL. A tracing configuration it
// cannot use is reported on stderr and the messages are sent with the context alone: tracing
// never stops a send.
func startSendTrace(ctx context.Context, stderr io.Writer, queueURL string, n int) *sendTrace {
	ctx = tracing.FromEnv(ctx, os.Getenv)
	if v := os.Getenv("TRACEPARENT"); v != "" && !trace.SpanContextFromContext(ctx).IsValid() {
		fmt.Fprintf(stderr, "watchbot: warning: TRACEPARENT %q is not a W3C traceparent: ignored\n", v)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	p, shutdown, err := tracing.Setup(ctx, "watchbot", log)
	if err != nil {
		fmt.Fprintf(stderr, "watchbot: warning: tracing off: %v\n", err)
	}
	name := queueattr.NameFromURL(queueURL)
	ctx, span := p.Start(ctx, "send "+name, trace.WithSpanKind(trace.SpanKindProducer))
	if span.IsRecording() {
		span.SetAttributes(semconv.MessagingSystemAWSSQS, semconv.MessagingOperationTypeSend,
			semconv.MessagingOperationName("send"), semconv.MessagingDestinationName(name))
		if n > 1 {
			span.SetAttributes(semconv.MessagingBatchMessageCount(n))
		}
	}
	carrier := tracing.Carrier(ctx)
	return &sendTrace{
		span:     span,
		context:  producer.TraceContext{TraceParent: carrier[tracing.Traceparent], TraceState: carrier[tracing.Tracestate]},
		shutdown: shutdown,
		stderr:   stderr,
	}
}

// end records what was sent (an error that sent nothing, or each message's result) on the
// span, ends it and flushes it within sendFlushTimeout.
func (t *sendTrace) end(results []producer.Result, err error) {
	if t.span.IsRecording() {
		failed := 0
		for _, r := range results {
			if r.Err != nil {
				failed++
			}
		}
		switch {
		case err != nil:
			t.span.SetStatus(codes.Error, err.Error())
		case failed > 0:
			t.span.SetStatus(codes.Error, fmt.Sprintf("%d of %d messages not sent", failed, len(results)))
		case len(results) == 1:
			t.span.SetAttributes(semconv.MessagingMessageID(results[0].MessageID))
		}
		t.span.End()
	}
	ctx, cancel := context.WithTimeout(context.Background(), sendFlushTimeout)
	defer cancel()
	if err := t.shutdown(ctx); err != nil {
		fmt.Fprintf(t.stderr, "watchbot: warning: the send span was not exported: %v\n", err)
	}
}
