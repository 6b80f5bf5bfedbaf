package worker

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// resolve is the one check of the worker command, for listen and try alike.
func TestResolveCommand(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		command []string
		wantErr string // how the error ends
	}{
		{"on PATH", []string{"sh", "-c", "exit 0"}, ""},
		{"missing", []string{filepath.Join(dir, "worker")}, "no such file or directory"},
		{"not on PATH", []string{"watchbot-no-such-worker"}, "executable file not found in $PATH"},
		{"a directory", []string{dir}, "is a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := resolve(tt.command)
			if tt.wantErr != "" {
				if prefix := `worker command "` + tt.command[0] + `": `; err == nil || !strings.HasPrefix(err.Error(), prefix) || !strings.HasSuffix(err.Error(), tt.wantErr) {
					t.Fatalf("resolve(%q) = %q, %v; want an error naming the command, ending %q", tt.command, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || !filepath.IsAbs(got[0]) || filepath.Base(got[0]) != tt.command[0] || !slices.Equal(got[1:], tt.command[1:]) {
				t.Fatalf("resolve(%q) = %q, %v; want the program's path and its arguments", tt.command, got, err)
			}
		})
	}
}
