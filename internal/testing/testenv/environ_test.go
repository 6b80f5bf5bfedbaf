package testenv

import (
	"os"
	"slices"
	"strings"
	"testing"
)

func TestUserEnv(t *testing.T) {
	t.Setenv("AWS_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt")
	t.Setenv("HTTPS_PROXY", "http://127.0.0.1:9")
	env := UserEnv("/home/u", "AWS_REGION=eu-west-1", "HOME=/home/v", "AWS_REGION=us-east-1", "EMPTY=")
	want := []string{"PATH=" + userPath, "HOME=/home/v", "AWS_REGION=us-east-1", "EMPTY="}
	if !strings.HasPrefix(env[0], want[0]) || !slices.Equal(env[1:], want[1:]) {
		t.Errorf("UserEnv = %q, want %q (PATH possibly followed by go's and node's directories)", env, want)
	}
}

func TestClearAWS(t *testing.T) {
	t.Setenv("AWS_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt")
	t.Setenv("AWS_PROFILE", "work")
	t.Setenv("SSL_CERT_FILE", "/etc/ssl/certs/ca-certificates.crt")
	t.Setenv("AWS_CONFIG_FILE", "/root/.aws/config")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/root/.aws/credentials")
	ClearAWS()
	for _, name := range []string{"AWS_CA_BUNDLE", "AWS_PROFILE"} {
		if v, ok := os.LookupEnv(name); ok {
			t.Errorf("%s=%s after ClearAWS", name, v)
		}
	}
	if os.Getenv("AWS_CONFIG_FILE") != os.DevNull || os.Getenv("AWS_SHARED_CREDENTIALS_FILE") != os.DevNull {
		t.Errorf("the shared config files are still %q and %q", os.Getenv("AWS_CONFIG_FILE"), os.Getenv("AWS_SHARED_CREDENTIALS_FILE"))
	}
	if os.Getenv("SSL_CERT_FILE") == "" {
		t.Error("ClearAWS removed SSL_CERT_FILE: only AWS_ variables are the SDK's")
	}
}

func TestClearTracing(t *testing.T) {
	for _, name := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_TRACES_SAMPLER", "TRACEPARENT", "TRACESTATE", "BAGGAGE", "PATH_OTEL"} {
		t.Setenv(name, "set")
	}
	ClearTracing()
	for _, name := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_TRACES_SAMPLER", "TRACEPARENT", "TRACESTATE", "BAGGAGE"} {
		if v, ok := os.LookupEnv(name); ok {
			t.Errorf("%s=%s after ClearTracing", name, v)
		}
	}
	if os.Getenv("PATH_OTEL") == "" {
		t.Error("ClearTracing removed PATH_OTEL: only OTEL_ variables and the trace carriers are tracing's")
	}
}
