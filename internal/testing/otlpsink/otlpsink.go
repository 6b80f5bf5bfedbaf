// Package otlpsink is an OTLP/HTTP trace receiver for tests and the benchmark: it serves
// POST /v1/traces on loopback, decodes each export with the official OTLP protobuf types
// (go.opentelemetry.io/proto/otlp), gzip-compressed or not, and keeps the spans, so a test
// checks what watchbot exported exactly as a collector would receive it.
package otlpsink

import (
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one received span with its resource's attributes.
type Span struct {
	*tracepb.Span
	Resource map[string]string
}

// TraceID and SpanID and ParentID are the ids in the lower-case hex of traceparent.
func (s Span) TraceID() string  { return hex.EncodeToString(s.Span.GetTraceId()) }
func (s Span) SpanID() string   { return hex.EncodeToString(s.Span.GetSpanId()) }
func (s Span) ParentID() string { return hex.EncodeToString(s.Span.GetParentSpanId()) }

// Attr returns the span attribute key as a string ("" when absent): strings as they are,
// integers, doubles and booleans formatted.
func (s Span) Attr(key string) string {
	for _, kv := range s.Span.GetAttributes() {
		if kv.GetKey() == key {
			return valueString(kv.GetValue())
		}
	}
	return ""
}

func valueString(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	}
	return ""
}

// Sink receives exports. Start one with Start; Close stops it.
type Sink struct {
	srv    *http.Server
	served chan struct{}
	// URL is the base endpoint, for OTEL_EXPORTER_OTLP_ENDPOINT (the exporter appends /v1/traces).
	URL string

	mu      sync.Mutex
	spans   []Span
	exports int
	bad     []string
	changed chan struct{} // closed and replaced whenever spans arrive
}

// Start serves a Sink on 127.0.0.1 at a free port.
func Start() (*Sink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("otlp sink: %w", err)
	}
	s := &Sink{served: make(chan struct{}), URL: "http://" + ln.Addr().String(), changed: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", s.traces)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(s.served)
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

// Close stops the server and waits for it.
func (s *Sink) Close() {
	_ = s.srv.Close()
	<-s.served
}

// Env returns the variables that make an OpenTelemetry SDK export to s over OTLP/HTTP.
func (s *Sink) Env() []string {
	return []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + s.URL, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf"}
}

func (s *Sink) traces(w http.ResponseWriter, r *http.Request) {
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			s.refuse(w, fmt.Sprintf("gzip: %v", err))
			return
		}
		defer zr.Close()
		body = zr
	}
	data, err := io.ReadAll(body)
	if err != nil {
		s.refuse(w, fmt.Sprintf("read: %v", err))
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		s.refuse(w, fmt.Sprintf("Content-Type %q, want application/x-protobuf", ct))
		return
	}
	var req collectortrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(data, &req); err != nil {
		s.refuse(w, fmt.Sprintf("decode: %v", err))
		return
	}
	var got []Span
	for _, rs := range req.GetResourceSpans() {
		res := map[string]string{}
		for _, kv := range rs.GetResource().GetAttributes() {
			res[kv.GetKey()] = valueString(kv.GetValue())
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				got = append(got, Span{Span: sp, Resource: res})
			}
		}
	}
	s.mu.Lock()
	s.spans = append(s.spans, got...)
	s.exports++
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (s *Sink) refuse(w http.ResponseWriter, why string) {
	s.mu.Lock()
	s.bad = append(s.bad, why)
	s.mu.Unlock()
	http.Error(w, why, http.StatusBadRequest)
}

// Spans returns the spans received so far, in arrival order.
func (s *Sink) Spans() []Span {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Span(nil), s.spans...)
}

// Exports returns how many export requests were decoded, and the reasons of those refused.
func (s *Sink) Exports() (int, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exports, append([]string(nil), s.bad...)
}

// Wait waits until match holds for the spans received, or limit passes, and returns the
// spans match last saw and whether it held.
func (s *Sink) Wait(limit time.Duration, match func([]Span) bool) ([]Span, bool) {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		spans, changed := append([]Span(nil), s.spans...), s.changed
		s.mu.Unlock()
		if match(spans) {
			return spans, true
		}
		select {
		case <-changed:
		case <-deadline.C:
			return spans, false
		}
	}
}
