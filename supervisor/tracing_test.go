package supervisor

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/watchbot/watchbot/internal/tracing"
	"github.com/watchbot/watchbot/worker"
)

func tracedJob(attrs map[string]string) *job {
	in := types.Message{MessageId: aws.String("m-1"), Body: aws.String("x"), MessageAttributes: map[string]types.MessageAttributeValue{},
		Attributes: map[string]string{"ApproximateReceiveCount": "2", "SentTimestamp": "1", "MessageGroupId": "g"}}
	for k, v := range attrs {
		in.MessageAttributes[k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	m := parseMessage(in)
	return &job{msg: m, attempt: m.Attempt}
}

// How a run ends shows on its span: the outcome and the attempt, status Error for a failed
// run, an event for a stop at --max-job-duration and one for each lease renewal that failed
// while it ran.
func TestRunSpanRecordsHowTheRunEnded(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	r := &runner{cfg: Config{BatchSize: 1, MaxJobDuration: time.Minute}, queueName: "jobs",
		tracer: tracing.NewProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))}
	j := tracedJob(map[string]string{"traceparent": producerTP})
	ctx, span := r.startSpan(context.Background(), []*job{j})
	if env := tracing.Env(ctx); len(env) != 1 || env[0] != "TRACEPARENT=00-"+producerTrace+"-"+span.SpanContext().SpanID().String()+"-01" {
		t.Errorf("worker's context %q does not name the run's span", env)
	}
	j.spanEvent("lease renewal failed")
	j.attempt = 1 // a dedupe claim counted the run after the span began: its run, not the receive
	res := result{End: endTimedOut}
	out := outcome{Action: actRetry, WorkerError: true, Reason: "worker ran longer than --max-job-duration"}
	r.endSpan(span, []*job{j}, []result{res}, []outcome{out})
	j.spanEvent("after the run") // no span any more: dropped

	ended := rec.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans ended, want 1", len(ended))
	}
	s := ended[0]
	if s.Name() != "process jobs" || s.Parent().SpanID().String() != producerSpan || s.Status().Code != codes.Error {
		t.Errorf("span %q parent %s status %v", s.Name(), s.Parent().SpanID(), s.Status())
	}
	var events []string
	for _, e := range s.Events() {
		events = append(events, e.Name)
	}
	if want := []string{"lease renewal failed", "stopped at --max-job-duration"}; !slices.Equal(events, want) {
		t.Errorf("events %v, want %v", events, want)
	}
	attrs := map[string]string{}
	for _, kv := range s.Attributes() {
		attrs[string(kv.Key)] = kv.Value.Emit()
	}
	for k, v := range map[string]string{"watchbot.outcome": "retry", "watchbot.attempt": "1", "messaging.message.conversation_id": "g"} {
		if attrs[k] != v {
			t.Errorf("%s = %q, want %q", k, attrs[k], v)
		}
	}
}

// With tracing off the run's span is the message's own context: nothing is started, and the
// worker gets the producer's traceparent as it came.
func TestRunSpanOffHandsTheMessagesContext(t *testing.T) {
	t.Parallel()
	r := &runner{cfg: Config{BatchSize: 1}, queueName: "jobs"}
	j := tracedJob(map[string]string{"traceparent": producerTP})
	ctx, span := r.startSpan(context.Background(), []*job{j})
	r.endSpan(span, []*job{j}, []result{{End: endExited}}, []outcome{{Action: actDelete}})
	if env := tracing.Env(ctx); len(env) != 1 || env[0] != "TRACEPARENT="+producerTP || span.IsRecording() {
		t.Errorf("env %q recording %v, want the producer's traceparent and no span", env, span.IsRecording())
	}
	if bad := tracedJob(map[string]string{"traceparent": "junk"}); bad.msg.Trace.Valid() || len(bad.msg.TraceMalformed) != 1 {
		t.Errorf("a malformed traceparent: %+v", bad.msg.TraceMalformed)
	}
}

// BenchmarkRunSpan measures the tracing work of one message run: with tracing off (no
// exporter) it must stay near nothing; "on" records into an SDK without exporting.
func BenchmarkRunSpan(b *testing.B) {
	j := tracedJob(map[string]string{"traceparent": producerTP})
	for _, bc := range []struct {
		name   string
		tracer *tracing.Provider
	}{
		{"off", nil},
		{"on", tracing.NewProvider(sdktrace.NewTracerProvider())},
	} {
		b.Run(bc.name, func(b *testing.B) {
			r := &runner{cfg: Config{BatchSize: 1}, queueName: "jobs", tracer: bc.tracer}
			b.ReportAllocs()
			for b.Loop() {
				ctx, span := r.startSpan(context.Background(), []*job{j})
				_ = tracing.Env(ctx)
				r.endSpan(span, []*job{j}, []result{{End: endExited}}, []outcome{{Action: actDelete}})
			}
		})
	}
}

// An HTTP worker gets the run's context in the traceparent, tracestate and baggage headers,
// tracing on or off.
func TestHTTPWorkerGetsTheTraceHeaders(t *testing.T) {
	t.Parallel()
	var header http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { header = r.Header.Clone() }))
	defer srv.Close()
	cfg := worker.DefaultHTTPWorker()
	cfg.URL = srv.URL
	w := worker.NewHTTP(cfg, 1, 0, nil, slog.New(slog.DiscardHandler))
	j := tracedJob(map[string]string{"traceparent": producerTP, "tracestate": "vendor=x", "baggage": "tenant=acme"})
	for _, tc := range []struct {
		name   string
		tracer *tracing.Provider
	}{{"off", nil}, {"on", tracing.NewProvider(sdktrace.NewTracerProvider())}} {
		t.Run(tc.name, func(t *testing.T) {
			r := &runner{cfg: Config{BatchSize: 1}, queueName: "jobs", tracer: tc.tracer}
			ctx, span := r.startSpan(t.Context(), []*job{j})
			job := worker.Job{QueueURL: "http://127.0.0.1:1/000000000000/jobs", Messages: []worker.Message{workerMessage(j)}, Log: slog.New(slog.DiscardHandler)}
			if run := w.Run(ctx, job); run.End != worker.Succeeded {
				t.Fatalf("run %+v", run)
			}
			want := "00-" + producerTrace + "-" + span.SpanContext().SpanID().String() + "-01"
			if header.Get("traceparent") != want || header.Get("tracestate") != "vendor=x" || header.Get("baggage") != "tenant=acme" {
				t.Errorf("headers traceparent %q tracestate %q baggage %q, want %s", header.Get("traceparent"), header.Get("tracestate"), header.Get("baggage"), want)
			}
		})
	}
}
