// Package tracing connects watchbot to OpenTelemetry: it builds the tracer provider from the
// standard OTEL_* variables, and reads and writes the W3C trace context on the carriers a
// job passes through (SQS message attributes, X-Ray's AWSTraceHeader, a worker's environment,
// HTTP headers). With no exporter configured the provider is a no-op and the carriers still
// carry the message's own context, so a worker can continue the trace either way.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
)

// Provider starts watchbot's spans. The zero Provider, and the one Setup returns when no
// exporter is configured, records nothing: Start hands back the context it was given, so
// the message's own context is what the carriers pass on.
type Provider struct {
	tracer trace.Tracer // nil: tracing off
}

// Enabled reports whether spans are recorded and exported.
func (p *Provider) Enabled() bool { return p != nil && p.tracer != nil }

// Start starts a span as a child of ctx's span context. With tracing off it starts nothing
// and returns ctx with the span already in it (the remote parent, or none), at no cost.
func (p *Provider) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !p.Enabled() {
		return ctx, trace.SpanFromContext(ctx)
	}
	return p.tracer.Start(ctx, name, opts...)
}

// Setting is the exporter configuration Setup reads from the OTEL_* variables.
type Setting struct {
	// Exporter is "otlp" when an endpoint is set, "" when tracing is off.
	Exporter string
	// Protocol is "http/protobuf" or "grpc".
	Protocol string
	// Endpoint is the traces endpoint or the base endpoint, as set.
	Endpoint string
}

// ReadSetting reads which exporter the OTEL_* variables ask for: none unless
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, and never when
// OTEL_TRACES_EXPORTER=none or OTEL_SDK_DISABLED=true (the OpenTelemetry switch for every
// SDK, which an operator sets to turn telemetry off without unsetting the rest). It refuses
// values watchbot cannot honour.
func ReadSetting(getenv func(string) string) (Setting, error) {
	var s Setting
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return s, nil
	}
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return s, nil
	case "", "otlp":
	default:
		return s, fmt.Errorf("OTEL_TRACES_EXPORTER=%s is not supported (otlp or none)", exp)
	}
	s.Endpoint = getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if s.Endpoint == "" {
		s.Endpoint = getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	if s.Endpoint == "" {
		return s, nil
	}
	s.Exporter = "otlp"
	// The error names the variable the value came from, the traces one winning.
	protocolVar := "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	s.Protocol = getenv(protocolVar)
	if s.Protocol == "" {
		protocolVar = "OTEL_EXPORTER_OTLP_PROTOCOL"
		s.Protocol = getenv(protocolVar)
	}
	switch s.Protocol {
	case "":
		s.Protocol = "http/protobuf"
	case "http/protobuf", "grpc":
	default:
		return s, fmt.Errorf("%s=%s is not supported (http/protobuf or grpc)", protocolVar, s.Protocol)
	}
	return s, nil
}

// Setup builds the provider from the process's OTEL_* variables (see ReadSetting).
// serviceDefault names the service when OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES do
// not. The exporters read their endpoint, headers, timeout and TLS variables themselves,
// and the SDK reads OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG. shutdown flushes the
// spans still queued and stops the exporter; it returns when its context ends, so a caller
// bounds it by its own deadline. Setup makes no network call.
func Setup(ctx context.Context, serviceDefault string, log *slog.Logger) (*Provider, func(context.Context) error, error) {
	noShutdown := func(context.Context) error { return nil }
	s, err := ReadSetting(os.Getenv)
	if err != nil || s.Exporter == "" {
		return &Provider{}, noShutdown, err
	}
	var exp *otlptrace.Exporter
	if s.Protocol == "grpc" {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return &Provider{}, noShutdown, fmt.Errorf("otlp trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(serviceDefault)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		// The exporter is already started (a gRPC one holds a connection): stop it, so that
		// a caller that reports the error and goes on leaks nothing.
		_ = exp.Shutdown(ctx)
		return &Provider{}, noShutdown, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	log.Info("tracing on", "protocol", s.Protocol, "endpoint", s.Endpoint)
	return &Provider{tracer: tp.Tracer("github.com/watchbot/watchbot")}, tp.Shutdown, nil
}

// NewProvider returns a Provider that starts its spans from tp: for tests, which record spans
// in memory, and callers that build their own SDK. A nil tp records nothing.
func NewProvider(tp trace.TracerProvider) *Provider {
	if tp == nil {
		return &Provider{}
	}
	return &Provider{tracer: tp.Tracer("github.com/watchbot/watchbot")}
}
