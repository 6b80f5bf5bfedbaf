package tracing

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// The W3C carrier keys, as message attributes and HTTP headers (lower case) and as a
// process's environment variables (upper case, per OpenTelemetry's "Environment Variables
// as Context Propagation Carriers").
const (
	Traceparent = "traceparent"
	Tracestate  = "tracestate"
	Baggage     = "baggage"
)

// AWSTraceHeader is the SQS system attribute that carries X-Ray's trace header.
const AWSTraceHeader = "AWSTraceHeader"

var w3c = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// Source names where a message's context came from, for logs.
type Source string

// The sources, in the order Extract tries them.
const (
	SourceNone        Source = ""
	SourceTraceparent Source = "traceparent"
	SourceXRay        Source = "AWSTraceHeader"
)

// Malformed is a carrier that was present but could not be read. It is reported, never fatal.
type Malformed struct {
	Carrier string // "traceparent" or "AWSTraceHeader"
	Value   string
	Err     error
}

// Remote is a message's context, kept with the message until its run: the producer's span
// context and baggage. The zero Remote is no context.
type Remote struct {
	Span    trace.SpanContext
	Baggage baggage.Baggage
}

// Valid reports whether r has a span context to continue.
func (r Remote) Valid() bool { return r.Span.IsValid() }

// Context returns ctx carrying r as its remote parent and its baggage.
func (r Remote) Context(ctx context.Context) context.Context {
	if r.Baggage.Len() > 0 {
		ctx = baggage.ContextWithBaggage(ctx, r.Baggage)
	}
	if r.Span.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, r.Span)
	}
	return ctx
}

// LogAttrs returns r's trace_id and span_id as slog arguments for Logger.With, or nil.
func (r Remote) LogAttrs() []any { return spanLogAttrs(r.Span) }

// Extract returns a message's context: the first valid of the W3C traceparent / tracestate
// (and baggage) message attributes, and X-Ray's AWSTraceHeader system attribute converted to
// W3C. attrs are the message's String attributes (an SNS envelope's included);
// awsTraceHeader is the system attribute, "" if absent. The carriers that were present but
// malformed are returned so that the caller can log and count them; they never fail the
// message.
func Extract(attrs map[string]string, awsTraceHeader string) (Remote, Source, []Malformed) {
	var bad []Malformed
	if tp, ok := attrs[Traceparent]; ok {
		ctx := w3c.Extract(context.Background(), propagation.MapCarrier(attrs))
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
			return Remote{Span: sc, Baggage: baggage.FromContext(ctx)}, SourceTraceparent, nil
		}
		bad = append(bad, Malformed{Carrier: Traceparent, Value: tp, Err: errors.New("not a W3C traceparent")})
	}
	if awsTraceHeader != "" {
		sc, err := ParseXRay(awsTraceHeader)
		if err == nil {
			return Remote{Span: sc}, SourceXRay, bad
		}
		bad = append(bad, Malformed{Carrier: AWSTraceHeader, Value: awsTraceHeader, Err: err})
	}
	return Remote{}, SourceNone, bad
}

// ParseXRay converts X-Ray's trace header, "Root=1-5759e988-bd862e3fe1be46a994272793;
// Parent=53995c3f42cd8ad8;Sampled=1", to a remote W3C span context: the trace ID is the
// root's epoch and unique parts joined, the span ID is Parent, and Sampled=1 sets the sampled
// flag (0 and the deferred "?" leave it clear). Other keys (Self, Lineage) are ignored.
// Without a Root and a Parent there is no context to continue.
func ParseXRay(h string) (trace.SpanContext, error) {
	var root, parent, sampled string
	for part := range strings.SplitSeq(h, ";") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "Root":
			root = v
		case "Parent":
			parent = v
		case "Sampled":
			sampled = v
		}
	}
	var cfg trace.SpanContextConfig
	ver, rest, ok := strings.Cut(root, "-")
	epoch, unique, ok2 := strings.Cut(rest, "-")
	if !ok || !ok2 || ver != "1" || len(epoch) != 8 || len(unique) != 24 {
		return trace.SpanContext{}, fmt.Errorf("root %q is not 1-<8 hex>-<24 hex>", root)
	}
	if _, err := hex.Decode(cfg.TraceID[:], []byte(epoch+unique)); err != nil {
		return trace.SpanContext{}, fmt.Errorf("root %q is not hexadecimal", root)
	}
	if len(parent) != 16 {
		return trace.SpanContext{}, fmt.Errorf("parent %q is not 16 hex digits", parent)
	}
	if _, err := hex.Decode(cfg.SpanID[:], []byte(parent)); err != nil {
		return trace.SpanContext{}, fmt.Errorf("parent %q is not hexadecimal", parent)
	}
	switch sampled {
	case "1":
		cfg.TraceFlags = trace.FlagsSampled
	case "0", "?", "":
	default:
		return trace.SpanContext{}, fmt.Errorf("sampled %q is not 0, 1 or ?", sampled)
	}
	cfg.Remote = true
	sc := trace.NewSpanContext(cfg)
	if !sc.IsValid() {
		return trace.SpanContext{}, errors.New("trace or parent ID is all zeros")
	}
	return sc, nil
}

// Carrier returns ctx's context as W3C keys (traceparent, tracestate, baggage), each only
// when it has a value. It is empty when ctx has no valid span context and no baggage.
func Carrier(ctx context.Context) map[string]string {
	m := propagation.MapCarrier{}
	w3c.Inject(ctx, m)
	return m
}

// Env returns ctx's context as the worker's TRACEPARENT, TRACESTATE and BAGGAGE variables,
// each only when it has a value.
func Env(ctx context.Context) []string {
	m := Carrier(ctx)
	var env []string
	for _, k := range [...]string{Traceparent, Tracestate, Baggage} {
		if v := m[k]; v != "" {
			env = append(env, strings.ToUpper(k)+"="+v)
		}
	}
	return env
}

// InjectHeaders sets ctx's traceparent, tracestate and baggage headers on h.
func InjectHeaders(ctx context.Context, h http.Header) {
	w3c.Inject(ctx, propagation.HeaderCarrier(h))
}

// FromEnv returns ctx with the context in TRACEPARENT, TRACESTATE and BAGGAGE, as a worker
// (or `watchbot send` run inside one) finds them. A malformed TRACEPARENT leaves ctx as it is.
func FromEnv(ctx context.Context, getenv func(string) string) context.Context {
	m := propagation.MapCarrier{}
	for _, k := range [...]string{Traceparent, Tracestate, Baggage} {
		if v := getenv(strings.ToUpper(k)); v != "" {
			m[k] = v
		}
	}
	return w3c.Extract(ctx, m)
}

// LogAttrs returns the trace_id and span_id of ctx's span context as slog arguments for
// Logger.With, or nil when it has none.
func LogAttrs(ctx context.Context) []any { return spanLogAttrs(trace.SpanContextFromContext(ctx)) }

func spanLogAttrs(sc trace.SpanContext) []any {
	if !sc.IsValid() {
		return nil
	}
	return []any{slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String())}
}
