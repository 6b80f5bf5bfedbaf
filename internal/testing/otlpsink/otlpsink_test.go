package otlpsink

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

func str(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}

// TestSinkDecodesExports posts an export as an OTLP/HTTP exporter does, plain and gzipped,
// and a body that is not one.
func TestSinkDecodesExports(t *testing.T) {
	s, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	req := &collectortrace.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{
		Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{str("service.name", "watchbot")}},
		ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{{
			TraceId: bytes.Repeat([]byte{0xab}, 16), SpanId: bytes.Repeat([]byte{1}, 8), ParentSpanId: bytes.Repeat([]byte{2}, 8),
			Name: "send q", Kind: tracepb.Span_SPAN_KIND_PRODUCER,
			Attributes: []*commonpb.KeyValue{str("messaging.system", "aws_sqs"),
				{Key: "n", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: 3}}}},
		}}}},
	}}}
	data, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	_, _ = zw.Write(data)
	_ = zw.Close()
	for _, c := range []struct {
		name, encoding, contentType string
		body                        []byte
		want                        int
	}{
		{"plain", "", "application/x-protobuf", data, http.StatusOK},
		{"gzip", "gzip", "application/x-protobuf", zipped.Bytes(), http.StatusOK},
		{"json", "", "application/json", []byte("{}"), http.StatusBadRequest},
		{"garbage", "", "application/x-protobuf", []byte{0xff, 0xff}, http.StatusBadRequest},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/traces", bytes.NewReader(c.body))
			r.Header.Set("Content-Type", c.contentType)
			if c.encoding != "" {
				r.Header.Set("Content-Encoding", c.encoding)
			}
			resp, err := http.DefaultClient.Do(r)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != c.want {
				t.Errorf("status %d, want %d", resp.StatusCode, c.want)
			}
		})
	}
	spans, ok := s.Wait(5*time.Second, func(sp []Span) bool { return len(sp) == 2 })
	if !ok {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	sp := spans[0]
	if sp.Name != "send q" || sp.Kind != tracepb.Span_SPAN_KIND_PRODUCER || sp.TraceID() != "abababababababababababababababab" ||
		sp.SpanID() != "0101010101010101" || sp.ParentID() != "0202020202020202" ||
		sp.Attr("messaging.system") != "aws_sqs" || sp.Attr("n") != "3" || sp.Resource["service.name"] != "watchbot" {
		t.Errorf("decoded span %v, resource %v", sp.Span, sp.Resource)
	}
	if n, bad := s.Exports(); n != 2 || len(bad) != 2 {
		t.Errorf("exports %d, refused %v; want 2 and 2", n, bad)
	}
}
