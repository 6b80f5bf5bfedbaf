package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/setting"
	"github.com/watchbot/watchbot/supervisor"
)

func TestExitCode(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"success", nil, 0},
		{"aborted", fmt.Errorf("listen: %w", supervisor.ErrAborted), 130},
		{"usage", usagef("--rate must be positive"), 2},
		{"config", setting.Refuse(listenspec.SettingConcurrency, 0, "bad"), 2},
		{"runtime", errors.New("receive messages: boom"), 1},
		{"progress, bad input", progressFailure{errors.New("part 0 is outside 1..10")}, 1},
		{"interrupted", interrupted{"replay stopped"}, 130},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			if got := exitCode(tt.err, &stderr); got != tt.want {
				t.Fatalf("exitCode(%v) = %d, want %d", tt.err, got, tt.want)
			}
			if (tt.err == nil) != (stderr.Len() == 0) {
				t.Fatalf("stderr = %q", stderr.String())
			}
		})
	}
}

// TestDocumentedExitCodes keeps the exit-code table of docs/operator-tools.md equal to exitCodes.
func TestDocumentedExitCodes(t *testing.T) {
	page, err := os.ReadFile("../../docs/operator-tools.md")
	if err != nil {
		t.Fatal(err)
	}
	codes := map[int]bool{}
	for _, row := range exitCodes {
		if row.meaning == "" {
			continue
		}
		if codes[row.code] {
			t.Errorf("exit code %d is documented twice", row.code)
		}
		codes[row.code] = true
		line := fmt.Sprintf("| %d | %s |", row.code, row.meaning)
		if !strings.Contains(string(page), line) {
			t.Errorf("docs/operator-tools.md lacks the exit-code row %q", line)
		}
	}
}
