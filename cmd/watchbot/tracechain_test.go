package main

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/watchbot/watchbot/internal/testing/otlpsink"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// TestTraceChainAcrossJobs: a producer's `watchbot send` starts a message in a trace; its
// worker calls `watchbot send` for the next job; that job's run is in the same trace. Every
// span is checked against the one it must descend from:
//
//	producer (TRACEPARENT) → send → process(first) → send → process(second)
func TestTraceChainAcrossJobs(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	sink, err := otlpsink.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	code, _, stderr := sendBinary(t, emu, append(sink.Env(), "TRACEPARENT="+producerParent), "--queue-url", q.URL, "--body", "first")
	if code != 0 {
		t.Fatalf("send exit %d: %s", code, stderr)
	}
	// The worker of "first" sends "second" from inside its run, as a chain of jobs does.
	worker := fmt.Sprintf(`if [ "$Message" = first ]; then exec %s send --queue-url "$WATCHBOT_QUEUE_URL" --body second; fi`, testenv.Binary(t))
	listen := emu.Watchbot(t, "listen", "--queue-url", q.URL, "--metrics", "none", "--", "sh", "-c", worker)
	listen.Env = append(listen.Env, sink.Env()...)
	var logs testenv.Buffer
	listen.Stdout, listen.Stderr = &logs, &logs
	p := testenv.Spawn(t, listen)
	processes := func(spans []otlpsink.Span) []otlpsink.Span {
		var out []otlpsink.Span
		for _, s := range spans {
			if s.Name == "process "+q.Name {
				out = append(out, s)
			}
		}
		return out
	}
	// Spans are exported in batches; the last ones when listen stops.
	// "first" stays in flight until its worker, which sends "second", has exited.
	testenv.Eventually(t, "both messages done", time.Minute, func() bool { return testenv.Depth(t, emu.Client(), q.URL).Total() == 0 }, logs.String)
	_ = listen.Process.Signal(syscall.SIGTERM)
	if code := p.Wait(t, 30*time.Second, logs.String); code != 0 {
		t.Fatalf("listen exit %d", code)
	}
	spans, ok := sink.Wait(10*time.Second, func(s []otlpsink.Span) bool { return len(processes(s)) == 2 })
	if !ok {
		t.Fatalf("%d process spans exported, want 2; all: %v", len(processes(spans)), spans)
	}
	byParent := map[string][]otlpsink.Span{}
	for _, s := range spans {
		byParent[s.ParentID()] = append(byParent[s.ParentID()], s)
	}
	parent := producerSpanID
	for _, want := range []struct {
		name string
		kind tracepb.Span_SpanKind
	}{
		{"send " + q.Name, tracepb.Span_SPAN_KIND_PRODUCER},
		{"process " + q.Name, tracepb.Span_SPAN_KIND_CONSUMER},
		{"send " + q.Name, tracepb.Span_SPAN_KIND_PRODUCER},
		{"process " + q.Name, tracepb.Span_SPAN_KIND_CONSUMER},
	} {
		children := byParent[parent]
		if len(children) != 1 || children[0].Name != want.name || children[0].Kind != want.kind || children[0].TraceID() != producerTraceID {
			t.Fatalf("the child of span %s: %v; want one %s span %q in trace %s", parent, children, want.kind, want.name, producerTraceID)
		}
		parent = children[0].SpanID()
	}
}
