package supervisor

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/internal/testing/fakesqs"
	"github.com/watchbot/watchbot/internal/testing/otlpsink"
	"github.com/watchbot/watchbot/internal/testing/testenv"
	"github.com/watchbot/watchbot/internal/tracing"
)

const (
	producerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	producerSpan  = "00f067aa0ba902b7"
	producerTP    = "00-" + producerTrace + "-" + producerSpan + "-01"
)

// traced turns tracing on for h's supervisor, exporting over OTLP/HTTP to a sink inside the
// test, as the OTEL_* variables configure it. flush stops the provider, exporting every span.
func traced(t *testing.T, h *harness) (sink *otlpsink.Sink, flush func()) {
	t.Helper()
	sink, err := otlpsink.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sink.Close)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", sink.URL)
	t.Setenv("OTEL_SERVICE_NAME", "jobs-worker")
	p, shutdown, err := tracing.Setup(t.Context(), "watchbot", slog.New(slog.DiscardHandler))
	if err != nil || !p.Enabled() {
		t.Fatalf("tracing.Setup: enabled %v, %v", p.Enabled(), err)
	}
	h.tracer = p
	return sink, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			t.Errorf("tracing shutdown: %v", err)
		}
	}
}

// processSpans returns the spans named "process <queue>", in start order.
func processSpans(spans []otlpsink.Span, queue string) []otlpsink.Span {
	var out []otlpsink.Span
	for _, s := range spans {
		if s.Span.GetName() == "process "+queue {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b otlpsink.Span) int {
		return cmp.Compare(a.Span.GetStartTimeUnixNano(), b.Span.GetStartTimeUnixNano())
	})
	return out
}

func queueName(h *harness) string { return h.q.URL[strings.LastIndex(h.q.URL, "/")+1:] }

// A message sent with a traceparent runs in a CONSUMER span of the producer's trace, child of
// the producer's span, and the worker's $TRACEPARENT names that span.
func TestTraceContinuesTheProducersTrace(t *testing.T) {
	h := newHarness(t, testenv.QueueOptions{MaxReceiveCount: 3})
	sink, flush := traced(t, h)
	worker := h.script("ok.sh", `printf '%s\n%s\n%s\n' "$TRACEPARENT" "$TRACESTATE" "$BAGGAGE" > "`+h.dir+`/ctx"`)
	stop := h.start(h.config(worker))
	id := h.send("job", map[string]string{"traceparent": producerTP, "tracestate": "vendor=x", "baggage": "tenant=acme"})
	h.eventually("the message done", 20*time.Second, func() bool { return h.readFile("ctx") != "" && h.empty(h.q.URL) })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	flush()
	spans := processSpans(sink.Spans(), queueName(h))
	if len(spans) != 1 {
		t.Fatalf("%d process spans, want 1: %v", len(spans), sink.Spans())
	}
	s := spans[0]
	if s.TraceID() != producerTrace || s.ParentID() != producerSpan || s.Span.GetKind() != tracepb.Span_SPAN_KIND_CONSUMER {
		t.Errorf("span trace %s parent %s kind %v, want the producer's trace and span, CONSUMER", s.TraceID(), s.ParentID(), s.Span.GetKind())
	}
	want := map[string]string{
		"messaging.system": "aws_sqs", "messaging.operation.type": "process", "messaging.destination.name": queueName(h),
		"messaging.message.id": id, "watchbot.attempt": "1", "watchbot.outcome": "delete", "watchbot.exit_code": "0",
	}
	for k, v := range want {
		if got := s.Attr(k); got != v {
			t.Errorf("attribute %s = %q, want %q", k, got, v)
		}
	}
	if s.Attr("watchbot.queue_wait") == "" {
		t.Error("no watchbot.queue_wait")
	}
	if s.Resource["service.name"] != "jobs-worker" {
		t.Errorf("service.name = %q, want OTEL_SERVICE_NAME's", s.Resource["service.name"])
	}
	got := strings.Split(h.readFile("ctx"), "\n")
	if wantTP := "00-" + producerTrace + "-" + s.SpanID() + "-01"; got[0] != wantTP || got[1] != "vendor=x" || got[2] != "tenant=acme" {
		t.Errorf("worker's TRACEPARENT, TRACESTATE, BAGGAGE = %q, want %s, vendor=x, tenant=acme", got, wantTP)
	}
	// The run's lines name watchbot's span; the message's other lines the producer's.
	for _, line := range strings.Split(h.logs.String(), "\n") {
		if !strings.Contains(line, `"message_id":"`+id+`"`) {
			continue
		}
		span := producerSpan
		if strings.Contains(line, `"outcome":`) { // the run's own line: its message's outcome
			span = s.SpanID()
		}
		if !strings.Contains(line, `"trace_id":"`+producerTrace+`","span_id":"`+span+`"`) {
			t.Errorf("log line without trace_id %s and span_id %s: %s", producerTrace, span, line)
		}
	}
	if !testenv.Logged(h.logs.String(), "outcome", "delete") {
		t.Errorf("no message done line:\n%s", h.logs)
	}
}

// A message that fails every attempt runs in one span per attempt, each in the producer's
// trace with watchbot.attempt 1, 2, 3 and status Error, and its dead-letter copy keeps the
// context.
func TestTraceOneSpanPerAttempt(t *testing.T) {
	h := newHarness(t, testenv.QueueOptions{MaxReceiveCount: 3})
	sink, flush := traced(t, h)
	worker := h.script("fail.sh", `exit 1`)
	stop := h.start(h.config(worker))
	h.send("doomed", map[string]string{"traceparent": producerTP})
	var dlq []types.Message
	h.eventually("the message in the DLQ", 30*time.Second, func() bool {
		dlq = append(dlq, h.receiveDLQ()...)
		return len(dlq) > 0
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	flush()
	if got := aws.ToString(dlq[0].MessageAttributes["traceparent"].StringValue); got != producerTP {
		t.Errorf("DLQ copy's traceparent = %q, want %q", got, producerTP)
	}
	spans := processSpans(sink.Spans(), queueName(h))
	var attempts, outcomes []string
	for _, s := range spans {
		attempts, outcomes = append(attempts, s.Attr("watchbot.attempt")), append(outcomes, s.Attr("watchbot.outcome"))
		if s.TraceID() != producerTrace || s.ParentID() != producerSpan || s.Span.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_ERROR {
			t.Errorf("span of attempt %s: trace %s parent %s status %v", s.Attr("watchbot.attempt"), s.TraceID(), s.ParentID(), s.Span.GetStatus())
		}
	}
	if !slices.Equal(attempts, []string{"1", "2", "3"}) || !slices.Equal(outcomes, []string{"retry", "retry", "redrive"}) {
		t.Fatalf("attempts %v outcomes %v, want 1 2 3 and retry retry redrive", attempts, outcomes)
	}
	if spans[0].Attr("watchbot.retry_delay") != "1" || spans[0].Attr("watchbot.exit_code") != "1" {
		t.Errorf("first attempt: retry delay %q exit code %q, want 1 and 1", spans[0].Attr("watchbot.retry_delay"), spans[0].Attr("watchbot.exit_code"))
	}
	if !hasEvent(spans[2], "dead-letter") {
		t.Errorf("the last attempt's span has no dead-letter event: %v", spans[2].Span.GetEvents())
	}
}

func hasEvent(s otlpsink.Span, name string) bool {
	return slices.ContainsFunc(s.Span.GetEvents(), func(e *tracepb.Span_Event) bool { return e.GetName() == name })
}

// A batch runs in one span that links every message's context.
func TestTraceBatchLinksEveryMessage(t *testing.T) {
	requireJQ(t)
	h := newHarness(t, testenv.QueueOptions{MaxReceiveCount: 3})
	sink, flush := traced(t, h)
	worker := h.batchWorker("exit 0")
	var traces []string
	for i := range 3 {
		trace := fmt.Sprintf("%032x", 0xabc0+i)
		traces = append(traces, trace)
		h.send(fmt.Sprintf("m-%d", i), map[string]string{"traceparent": "00-" + trace + "-" + producerSpan + "-01"})
	}
	stop := h.start(batchConfig(h, worker, 3, 2*time.Second))
	h.eventually("3 messages processed", 30*time.Second, func() bool { return h.empty(h.q.URL) })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	flush()
	var linked []string
	count := 0
	for _, s := range processSpans(sink.Spans(), queueName(h)) {
		n := 0
		fmt.Sscan(s.Attr("messaging.batch.message_count"), &n)
		count += n
		for _, l := range s.Span.GetLinks() {
			linked = append(linked, fmt.Sprintf("%x", l.GetTraceId()))
		}
	}
	slices.Sort(linked)
	if count != 3 || !slices.Equal(linked, traces) {
		t.Errorf("batch spans count %d messages and link traces %v, want 3 and %v", count, linked, traces)
	}
}

// Without OTEL_* variables nothing is exported, and the worker still receives the message's
// context as it came; a malformed traceparent is ignored and counted, and the message runs.
func TestTraceOffStillHandsTheContextOn(t *testing.T) {
	h := newHarness(t, testenv.QueueOptions{MaxReceiveCount: 3})
	sink, err := otlpsink.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER"} {
		t.Setenv(k, "")
	}
	p, shutdown, err := tracing.Setup(t.Context(), "watchbot", slog.New(slog.DiscardHandler))
	if err != nil || p.Enabled() {
		t.Fatalf("Setup with no OTEL_* variables: enabled %v, %v", p.Enabled(), err)
	}
	h.tracer = p
	worker := h.script("ok.sh", `echo "$MessageId ${TRACEPARENT:-none}" >> "`+h.dir+`/ctx"`)
	stop := h.start(h.config(worker))
	good := h.send("job", map[string]string{"traceparent": producerTP})
	bad := h.send("job", map[string]string{"traceparent": "00-not-a-context"})
	h.eventually("both messages done", 20*time.Second, func() bool {
		return strings.Count(h.readFile("ctx"), "\n") == 2 && h.empty(h.q.URL)
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	_ = shutdown(t.Context())
	ctx := h.readFile("ctx")
	for _, line := range []string{good + " " + producerTP, bad + " none"} {
		if !strings.Contains(ctx, line+"\n") {
			t.Errorf("worker runs %q, want the line %q", ctx, line)
		}
	}
	if n, _ := sink.Exports(); n != 0 {
		t.Errorf("%d exports with tracing off", n)
	}
	if got := h.metrics.get(alarms.TraceContextMalformed); got != 1 {
		t.Errorf("TraceContextMalformed = %v, want 1", got)
	}
}

// An AWSTraceHeader-only message (X-Ray's context, which the emulator does not set; the fake
// follows "Amazon SQS message system attributes" in the SQS Developer Guide) runs in a span of
// the converted trace, and its dead-letter copy keeps the header.
func TestTraceFromAWSTraceHeader(t *testing.T) {
	srv := fakesqs.New()
	endpoint, closeFn, err := srv.Listen()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = closeFn() })
	c := testenv.ClientFor(endpoint)
	q, err := testenv.CreateQueue(t.Context(), c, "xray-jobs", testenv.QueueOptions{MaxReceiveCount: 3})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, q: q, c: c, metrics: &countingRecorder{}, logs: &testenv.Buffer{}, dir: t.TempDir()}
	sink, flush := traced(t, h)
	worker := h.script("reject.sh", `echo "$TRACEPARENT" > "`+h.dir+`/ctx"; exit 3`)
	stop := h.start(h.config(worker))
	header := "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
	_, err = c.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(q.URL), MessageBody: aws.String("x"),
		MessageSystemAttributes: map[string]types.MessageSystemAttributeValue{
			"AWSTraceHeader": {DataType: aws.String("String"), StringValue: aws.String(header)}}})
	if err != nil {
		t.Fatal(err)
	}
	var dlq []types.Message
	h.eventually("the rejected message in the DLQ", 20*time.Second, func() bool {
		dlq = append(dlq, h.receiveDLQ()...)
		return len(dlq) > 0
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	flush()
	spans := processSpans(sink.Spans(), "xray-jobs")
	if len(spans) != 1 || spans[0].TraceID() != "5759e988bd862e3fe1be46a994272793" || spans[0].ParentID() != "53995c3f42cd8ad8" {
		t.Fatalf("spans %v, want one in trace 5759e988bd862e3fe1be46a994272793 under 53995c3f42cd8ad8", spans)
	}
	if got, want := strings.TrimSpace(h.readFile("ctx")), "00-5759e988bd862e3fe1be46a994272793-"+spans[0].SpanID()+"-01"; got != want {
		t.Errorf("worker's TRACEPARENT = %q, want %q", got, want)
	}
	if got := dlq[0].Attributes["AWSTraceHeader"]; got != header {
		t.Errorf("DLQ copy's AWSTraceHeader = %q, want %q", got, header)
	}
}

// An SNS notification's context is inside its envelope's MessageAttributes.
func TestParseMessageTraceInsideSNSEnvelope(t *testing.T) {
	t.Parallel()
	env, _ := json.Marshal(map[string]any{"Type": "Notification", "TopicArn": "arn:aws:sns:us-east-1:1:t", "Message": "hi",
		"MessageAttributes": map[string]any{"traceparent": map[string]string{"Type": "String", "Value": producerTP}}})
	m := parseMessage(types.Message{MessageId: aws.String("1"), Body: aws.String(string(env))})
	if m.Trace.Span.TraceID().String() != producerTrace || len(m.TraceMalformed) != 0 {
		t.Errorf("trace %s malformed %v, want %s", m.Trace.Span.TraceID(), m.TraceMalformed, producerTrace)
	}
}
