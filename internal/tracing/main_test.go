package tracing

import (
	"testing"

	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// TestMain clears this machine's OTEL_* variables and trace context first: Setup reads them
// from the process's environment, and a developer's own (a collector's endpoint, a sampler,
// OTEL_TRACES_EXPORTER=none) would change what the tests see.
func TestMain(m *testing.M) { testenv.Main(m) }
