//go:build linux

package main

import (
	"os"
	"strings"
	"testing"
)

// TestPerformancePageHasTheTable checks that docs/performance.md holds the markers make
// bench-docs rewrites between, in order, so a run's figures have somewhere to go.
func TestPerformancePageHasTheTable(t *testing.T) {
	b, err := os.ReadFile("../../../docs/performance.md")
	if err != nil {
		t.Fatal(err)
	}
	i, j := strings.Index(string(b), pageStart), strings.Index(string(b), pageEnd)
	if i < 0 || j < i {
		t.Fatalf("docs/performance.md has no %q … %q section for make bench-docs", pageStart, pageEnd)
	}
}
