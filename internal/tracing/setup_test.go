package tracing

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/watchbot/watchbot/internal/testing/otlpsink"
)

// grpcSink is an OTLP/gRPC trace receiver: it keeps the names of the spans exported to it.
type grpcSink struct {
	collectorpb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	names []string
}

func (s *grpcSink) Export(_ context.Context, req *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				s.names = append(s.names, sp.GetName())
			}
		}
	}
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

// Setup exports over the protocol the variables name, and its shutdown flushes the spans.
func TestSetupExportsOverEachProtocol(t *testing.T) {
	t.Run("http/protobuf", func(t *testing.T) {
		sink, err := otlpsink.Start()
		if err != nil {
			t.Fatal(err)
		}
		defer sink.Close()
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", sink.URL)
		exportOne(t)
		if spans := sink.Spans(); len(spans) != 1 || spans[0].Span.GetName() != "process q" || spans[0].Resource["service.name"] != "watchbot" {
			t.Errorf("received %v", spans)
		}
	})
	t.Run("grpc", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv, sink := grpc.NewServer(), &grpcSink{}
		collectorpb.RegisterTraceServiceServer(srv, sink)
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ln) }()
		defer func() { srv.Stop(); <-served }()
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://"+ln.Addr().String())
		t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
		exportOne(t)
		sink.mu.Lock()
		defer sink.mu.Unlock()
		if len(sink.names) != 1 || sink.names[0] != "process q" {
			t.Errorf("received %v", sink.names)
		}
	})
}

func exportOne(t *testing.T) {
	t.Helper()
	p, shutdown, err := Setup(t.Context(), "watchbot", slog.New(slog.DiscardHandler))
	if err != nil || !p.Enabled() {
		t.Fatalf("Setup: enabled %v, %v", p.Enabled(), err)
	}
	_, span := p.Start(t.Context(), "process q")
	span.End()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}
