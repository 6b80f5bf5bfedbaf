package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/watchbot/watchbot/supervisor"
)

// TestPlatform checks what listen and try say where they cannot run workers: one line naming
// the command and Linux, and exit 2. The binaries for macOS and Windows come from
// `make cross`; this checks the words and the code they give.
func TestPlatform(t *testing.T) {
	tests := []struct {
		command, goos string
		want          string // "" when the command runs
	}{
		{"listen", "linux", ""},
		{"try", "linux", ""},
		{"listen", "darwin", "watchbot: watchbot listen runs on Linux only; on darwin, run it in a Linux container or VM (send, status, dead-letter, template, progress and alarms run here)\n"},
		{"try", "windows", "watchbot: watchbot try runs on Linux only; on windows, run it in a Linux container or VM (send, status, dead-letter, template, progress and alarms run here)\n"},
	}
	for _, tt := range tests {
		t.Run(tt.command+" on "+tt.goos, func(t *testing.T) {
			err := supervisor.PlatformError(tt.command, tt.goos)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("PlatformError = %v, want nil", err)
				}
				return
			}
			var stderr bytes.Buffer
			if code := exitCode(err, &stderr); code != 2 {
				t.Errorf("exit code %d, want 2", code)
			}
			if got := stderr.String(); got != tt.want || strings.Count(got, "\n") != 1 {
				t.Errorf("stderr = %q, want %q", got, tt.want)
			}
		})
	}
}
