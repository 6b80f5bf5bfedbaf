package alarms

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestDocumentedMetrics keeps the README's metrics table equal to Metrics. The section is
// written in docs/metrics.md and merged into README.md; every copy that holds the table
// is checked.
func TestDocumentedMetrics(t *testing.T) {
	checked := 0
	for _, path := range []string{"../docs/metrics.md", "../README.md"} {
		text, err := os.ReadFile(path)
		if err != nil || !strings.Contains(string(text), "| `WorkerErrors` |") {
			continue
		}
		checked++
		for _, m := range Metrics {
			row := fmt.Sprintf("| `%s` | %s | %s |", m.Name, m.Unit, m.Meaning)
			if !strings.Contains(string(text), row) {
				t.Errorf("%s lacks the row\n%s", path, row)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no document holds the metrics table")
	}
}

// TestDocumentedPrometheusMetrics keeps docs/metrics.md's Prometheus table equal to
// PrometheusMetrics.
func TestDocumentedPrometheusMetrics(t *testing.T) {
	text, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range PrometheusMetrics {
		cw := "—"
		if m.Metric != "" {
			cw = "`" + string(m.Metric) + "`"
		}
		row := fmt.Sprintf("| `%s` | %s | %s | %s |", m.Name, m.Type, cw, m.Help)
		if !strings.Contains(string(text), row) {
			t.Errorf("docs/metrics.md lacks the row\n%s", row)
		}
	}
}
