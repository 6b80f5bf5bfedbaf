package alarms

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestDocumentedMetrics keeps the metrics table of docs/metrics.md equal to Metrics.
func TestDocumentedMetrics(t *testing.T) {
	t.Parallel()
	text, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range Metrics {
		row := fmt.Sprintf("| `%s` | %s | %s |", m.Name, m.Unit, m.Meaning)
		if !strings.Contains(string(text), row) {
			t.Errorf("docs/metrics.md lacks the row\n%s", row)
		}
	}
}

// TestDocumentedPrometheusMetrics keeps docs/metrics.md's Prometheus table equal to
// PrometheusMetrics.
func TestDocumentedPrometheusMetrics(t *testing.T) {
	t.Parallel()
	text, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range slices.Concat(PrometheusMetrics, TenantPrometheusMetrics) {
		cw := "—"
		if _, published := Lookup(m.Metric); published {
			cw = "`" + string(m.Metric) + "`"
		}
		row := fmt.Sprintf("| `%s` | %s | %s | %s |", m.Name, m.Type, cw, m.Help)
		if !strings.Contains(string(text), row) {
			t.Errorf("docs/metrics.md lacks the row\n%s", row)
		}
	}
}
