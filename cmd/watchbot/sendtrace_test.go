package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/watchbot/watchbot/internal/testing/otlpsink"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

const (
	producerTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	producerSpanID  = "00f067aa0ba902b7"
	producerParent  = "00-" + producerTraceID + "-" + producerSpanID + "-01"
)

// sendBinary runs the built `watchbot send` in a user's environment with the emulator's
// variables and vars, and returns its exit code, stdout and stderr.
func sendBinary(t *testing.T, emu *testenv.Emulator, vars []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := emu.Watchbot(t, append([]string{"send"}, args...)...)
	cmd.Env = append(cmd.Env, vars...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	code := testenv.Spawn(t, cmd).Wait(t, time.Minute)
	return code, stdout.String(), stderr.String()
}

// receiveOne receives the one message of q with its attributes.
func receiveOne(t *testing.T, emu *testenv.Emulator, q string) types.Message {
	t.Helper()
	out, err := emu.Client().ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(q), MessageAttributeNames: []string{"All"}, WaitTimeSeconds: 1})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("receive: %d messages, %v", len(out.Messages), err)
	}
	return out.Messages[0]
}

func attr(m types.Message, name string) string {
	return aws.ToString(m.MessageAttributes[name].StringValue)
}

// TestSendCarriesTheTraceContext runs `watchbot send` as a worker would, with TRACEPARENT
// and TRACESTATE in its environment and no exporter: the message carries them as they are.
func TestSendCarriesTheTraceContext(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	q := emu.NewQueue(t, testenv.QueueOptions{})
	code, _, stderr := sendBinary(t, emu, []string{"TRACEPARENT=" + producerParent, "TRACESTATE=vendor=abc"}, "--queue-url", q.URL, "--body", "next job")
	if code != 0 || stderr != "" {
		t.Fatalf("send exit %d, stderr %q", code, stderr)
	}
	m := receiveOne(t, emu, q.URL)
	if got := attr(m, "traceparent"); got != producerParent {
		t.Errorf("traceparent %q, want %q", got, producerParent)
	}
	if got := attr(m, "tracestate"); got != "vendor=abc" {
		t.Errorf("tracestate %q, want vendor=abc", got)
	}
	if dt := aws.ToString(m.MessageAttributes["traceparent"].DataType); dt != "String" {
		t.Errorf("traceparent's data type %s, want String", dt)
	}

	// Without TRACEPARENT there is nothing to carry; a malformed one is ignored, with a warning.
	for _, c := range []struct {
		name, warning string
		vars          []string
	}{
		{"no context", "", nil},
		{"malformed", `TRACEPARENT "00-nonsense" is not a W3C traceparent`, []string{"TRACEPARENT=00-nonsense"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, stderr := sendBinary(t, emu, c.vars, "--queue-url", q.URL, "--body", "plain")
			if code != 0 || !strings.Contains(stderr, c.warning) || (c.warning == "") != (stderr == "") {
				t.Fatalf("send exit %d, stderr %q; want a warning containing %q", code, stderr, c.warning)
			}
			if m := receiveOne(t, emu, q.URL); len(m.MessageAttributes) != 0 {
				t.Errorf("attributes %v, want none", m.MessageAttributes)
			}
		})
	}
}

// TestSendExportsAProducerSpan runs `watchbot send` with an exporter pointing at a test
// OTLP/HTTP receiver: it exports one PRODUCER span in TRACEPARENT's trace, a child of it,
// and the message names that span as its parent.
func TestSendExportsAProducerSpan(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	q := emu.NewQueue(t, testenv.QueueOptions{})
	sink, err := otlpsink.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	vars := append(sink.Env(), "TRACEPARENT="+producerParent, "OTEL_SERVICE_NAME=thumbnailer")
	code, stdout, stderr := sendBinary(t, emu, vars, "--queue-url", q.URL, "--body", "next job")
	if code != 0 || stderr != "" {
		t.Fatalf("send exit %d, stderr %q", code, stderr)
	}
	// send flushes before it exits: the span is there now.
	spans := sink.Spans()
	if len(spans) != 1 {
		t.Fatalf("%d spans exported, want 1: %v", len(spans), spans)
	}
	sp := spans[0]
	want := map[string]string{
		"name": "send " + q.Name, "kind": tracepb.Span_SPAN_KIND_PRODUCER.String(),
		"trace": producerTraceID, "parent": producerSpanID, "service": "thumbnailer",
		"messaging.system": "aws_sqs", "messaging.operation.type": "send", "messaging.destination.name": q.Name,
		"messaging.message.id": strings.TrimSpace(stdout),
	}
	got := map[string]string{
		"name": sp.Name, "kind": sp.Kind.String(), "trace": sp.TraceID(), "parent": sp.ParentID(), "service": sp.Resource["service.name"],
		"messaging.system": sp.Attr("messaging.system"), "messaging.operation.type": sp.Attr("messaging.operation.type"),
		"messaging.destination.name": sp.Attr("messaging.destination.name"), "messaging.message.id": sp.Attr("messaging.message.id"),
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("span %s = %q, want %q", k, got[k], w)
		}
	}
	m := receiveOne(t, emu, q.URL)
	if want := fmt.Sprintf("00-%s-%s-01", producerTraceID, sp.SpanID()); attr(m, "traceparent") != want {
		t.Errorf("the message's traceparent %q, want the send span's %q", attr(m, "traceparent"), want)
	}
}

// TestSendWithTenAttributes: SQS takes 10 message attributes; a message that has them all is
// sent without the context, with a warning, and exit 0.
func TestSendWithTenAttributes(t *testing.T) {
	emu := testenv.SQS(t)
	q := emu.NewQueue(t, testenv.QueueOptions{})
	args := []string{"--queue-url", q.URL, "--body", "crowded"}
	for i := range 10 {
		args = append(args, "--attr", fmt.Sprintf("a%d=v", i))
	}
	code, stdout, stderr := sendBinary(t, emu, []string{"TRACEPARENT=" + producerParent}, args...)
	if code != 0 || strings.TrimSpace(stdout) == "" {
		t.Fatalf("send exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if want := "warning: --body: sent without its trace context: it already has 10 message attributes"; !strings.Contains(stderr, want) {
		t.Errorf("stderr %q, want %q", stderr, want)
	}
	m := receiveOne(t, emu, q.URL)
	if len(m.MessageAttributes) != 10 || attr(m, "traceparent") != "" || attr(m, "a9") != "v" {
		t.Errorf("attributes %v, want a0..a9 alone", m.MessageAttributes)
	}
}

// TestSendTracingSettingUnusable: tracing never stops a send. An exporter send cannot set up is
// reported as a warning, and the message still carries TRACEPARENT's context as it is.
func TestSendTracingSettingUnusable(t *testing.T) {
	emu := testenv.SQS(t)
	q := emu.NewQueue(t, testenv.QueueOptions{})
	code, stdout, stderr := sendBinary(t, emu, []string{"TRACEPARENT=" + producerParent, "OTEL_TRACES_EXPORTER=zipkin"},
		"--queue-url", q.URL, "--body", "next job")
	if code != 0 || strings.TrimSpace(stdout) == "" {
		t.Fatalf("send exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if want := "warning: tracing off: OTEL_TRACES_EXPORTER=zipkin is not supported"; !strings.Contains(stderr, want) {
		t.Errorf("stderr %q, want %q", stderr, want)
	}
	if got := attr(receiveOne(t, emu, q.URL), "traceparent"); got != producerParent {
		t.Errorf("traceparent %q, want TRACEPARENT's %q", got, producerParent)
	}
}
