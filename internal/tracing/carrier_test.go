package tracing

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

const (
	producerTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	xrayHeader = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
)

func TestParseXRay(t *testing.T) {
	tests := []struct {
		name, header      string
		traceID, spanID   string
		sampled, wantFail bool
	}{
		{name: "sampled", header: xrayHeader, traceID: "5759e988bd862e3fe1be46a994272793", spanID: "53995c3f42cd8ad8", sampled: true},
		{name: "not sampled, keys reordered, Lineage ignored", header: "Sampled=0;Lineage=a87bd80c:1|68fd508a:5;Parent=53995c3f42cd8ad8;Root=1-5759e988-bd862e3fe1be46a994272793", traceID: "5759e988bd862e3fe1be46a994272793", spanID: "53995c3f42cd8ad8"},
		{name: "deferred", header: "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=?", traceID: "5759e988bd862e3fe1be46a994272793", spanID: "53995c3f42cd8ad8"},
		{name: "no parent", header: "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1", wantFail: true},
		{name: "short root", header: "Root=1-5759e98-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8", wantFail: true},
		{name: "version 2", header: "Root=2-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8", wantFail: true},
		{name: "not hex", header: "Root=1-5759e988-bd862e3fe1be46a99427279z;Parent=53995c3f42cd8ad8", wantFail: true},
		{name: "zero parent", header: "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=0000000000000000", wantFail: true},
		{name: "bad sampled", header: "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=yes", wantFail: true},
		{name: "empty", header: "", wantFail: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc, err := ParseXRay(tt.header)
			if tt.wantFail {
				if err == nil {
					t.Fatalf("ParseXRay(%q) = %v, want an error", tt.header, sc)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if sc.TraceID().String() != tt.traceID || sc.SpanID().String() != tt.spanID || sc.IsSampled() != tt.sampled || !sc.IsRemote() {
				t.Errorf("ParseXRay(%q) = trace %s span %s sampled %v remote %v", tt.header, sc.TraceID(), sc.SpanID(), sc.IsSampled(), sc.IsRemote())
			}
		})
	}
}

func TestExtract(t *testing.T) {
	tests := []struct {
		name      string
		attrs     map[string]string
		xray      string
		source    Source
		traceID   string
		malformed []string
	}{
		{name: "traceparent", attrs: map[string]string{Traceparent: producerTP, Tracestate: "vendor=x"}, source: SourceTraceparent, traceID: "4bf92f3577b34da6a3ce929d0e0e4736"},
		{name: "traceparent wins over X-Ray", attrs: map[string]string{Traceparent: producerTP}, xray: xrayHeader, source: SourceTraceparent, traceID: "4bf92f3577b34da6a3ce929d0e0e4736"},
		{name: "X-Ray alone", xray: xrayHeader, source: SourceXRay, traceID: "5759e988bd862e3fe1be46a994272793"},
		{name: "malformed traceparent falls back to X-Ray", attrs: map[string]string{Traceparent: "00-zz"}, xray: xrayHeader, source: SourceXRay, traceID: "5759e988bd862e3fe1be46a994272793", malformed: []string{Traceparent}},
		{name: "both malformed", attrs: map[string]string{Traceparent: "01-nope"}, xray: "Root=1-x", malformed: []string{Traceparent, AWSTraceHeader}},
		{name: "all-zero trace id", attrs: map[string]string{Traceparent: "00-00000000000000000000000000000000-00f067aa0ba902b7-01"}, malformed: []string{Traceparent}},
		{name: "none", attrs: map[string]string{"other": "x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, src, bad := Extract(tt.attrs, tt.xray)
			sc := trace.SpanContextFromContext(r.Context(context.Background()))
			if src != tt.source {
				t.Errorf("source %q, want %q", src, tt.source)
			}
			if tt.traceID == "" && sc.IsValid() || tt.traceID != "" && sc.TraceID().String() != tt.traceID {
				t.Errorf("trace %s valid %v, want %q", sc.TraceID(), sc.IsValid(), tt.traceID)
			}
			var got []string
			for _, m := range bad {
				got = append(got, m.Carrier)
			}
			if !slices.Equal(got, tt.malformed) {
				t.Errorf("malformed %v, want %v", got, tt.malformed)
			}
		})
	}
}

func TestCarriersRoundTrip(t *testing.T) {
	r, _, _ := Extract(map[string]string{Traceparent: producerTP, Tracestate: "vendor=x", Baggage: "user=42"}, "")
	ctx := r.Context(context.Background())
	env := Env(ctx)
	want := []string{"TRACEPARENT=" + producerTP, "TRACESTATE=vendor=x", "BAGGAGE=user=42"}
	if !slices.Equal(env, want) {
		t.Errorf("Env = %q, want %q", env, want)
	}
	h := http.Header{}
	InjectHeaders(ctx, h)
	if h.Get("traceparent") != producerTP || h.Get("tracestate") != "vendor=x" {
		t.Errorf("headers %v", h)
	}
	back := FromEnv(context.Background(), func(k string) string {
		for _, kv := range env {
			if name, v, _ := strings.Cut(kv, "="); name == k {
				return v
			}
		}
		return ""
	})
	if got := Carrier(back); got[Traceparent] != producerTP || got[Baggage] != "user=42" {
		t.Errorf("FromEnv then Carrier = %v", got)
	}
	if Env(context.Background()) != nil || LogAttrs(context.Background()) != nil {
		t.Error("a context without a span context gives variables or log attributes")
	}
}

func TestReadSetting(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		want    Setting
		wantErr string // a part of the error, "" for none
	}{
		{name: "nothing set", env: nil},
		{name: "endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, want: Setting{Exporter: "otlp", Protocol: "http/protobuf", Endpoint: "http://127.0.0.1:4318"}},
		{name: "traces endpoint and grpc", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, want: Setting{Exporter: "otlp", Protocol: "grpc", Endpoint: "http://127.0.0.1:4317"}},
		{name: "traces protocol wins", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "x", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, want: Setting{Exporter: "otlp", Protocol: "http/protobuf", Endpoint: "x"}},
		{name: "exporter none", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "x", "OTEL_TRACES_EXPORTER": "none"}},
		{name: "SDK disabled", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "x", "OTEL_SDK_DISABLED": "true"}},
		{name: "SDK disabled, any case", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "x", "OTEL_SDK_DISABLED": "TRUE", "OTEL_TRACES_EXPORTER": "console"}},
		{name: "SDK not disabled", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "x", "OTEL_SDK_DISABLED": "false"}, want: Setting{Exporter: "otlp", Protocol: "http/protobuf", Endpoint: "x"}},
		{name: "exporter console", env: map[string]string{"OTEL_TRACES_EXPORTER": "console"}, wantErr: "OTEL_TRACES_EXPORTER=console"},
		{name: "http/json", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "x", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, wantErr: "OTEL_EXPORTER_OTLP_PROTOCOL=http/json"},
		{name: "traces http/json", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "x", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"}, wantErr: "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadSetting(func(k string) string { return tt.env[k] })
			if (err != nil) != (tt.wantErr != "") || err != nil && !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want one naming %q", err, tt.wantErr)
			}
			if tt.wantErr == "" && got != tt.want {
				t.Errorf("ReadSetting = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestDisabledProviderStartsNothing(t *testing.T) {
	r, _, _ := Extract(map[string]string{Traceparent: producerTP}, "")
	ctx := r.Context(context.Background())
	var p Provider
	out, span := p.Start(ctx, "process q")
	if span.IsRecording() || span.SpanContext().SpanID().String() != "00f067aa0ba902b7" || out != ctx {
		t.Errorf("a disabled provider started a span: %v", span.SpanContext())
	}
}

// FuzzExtract checks that no carrier, however malformed, panics, and that whatever context
// comes out is valid and reported by its source.
func FuzzExtract(f *testing.F) {
	f.Add(producerTP, "vendor=x", xrayHeader)
	f.Add("00-zz", "", "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=;Sampled=1")
	f.Add("", ",,=", "Root=;;;=")
	f.Fuzz(func(t *testing.T, tp, ts, xray string) {
		r, src, bad := Extract(map[string]string{Traceparent: tp, Tracestate: ts}, xray)
		sc := r.Span
		if (src != SourceNone) != sc.IsValid() {
			t.Fatalf("source %q but span context valid %v", src, sc.IsValid())
		}
		if src == SourceNone && len(bad) == 0 && xray != "" {
			t.Fatalf("X-Ray header %q neither used nor reported", xray)
		}
		if src == SourceXRay {
			if _, err := ParseXRay(xray); err != nil {
				t.Fatal(err)
			}
		}
		Env(r.Context(context.Background()))
	})
}
