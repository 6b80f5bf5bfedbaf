//go:build linux

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// TestDocsLocalExamples runs the "Run it locally" example of each page whose feature needs an
// emulator, as written: the page's first block (make emulator, with its variables) becomes
// scripts/local-sqs with those variables, and the second runs in another shell
// (runLocalBlock). Then the state the example leaves is checked: what its worker wrote, what
// the table holds.
func TestDocsLocalExamples(t *testing.T) {
	t.Parallel()
	pages := docPages(t)
	for _, c := range []struct {
		page  string
		check func(t *testing.T, dir string, run func(args ...string) string)
	}{
		{"queues.md", func(t *testing.T, dir string, _ func(...string) string) {
			lines := fileLines(t, dir, "ran.txt")
			jobs, bulk := 0, 0
			for _, l := range lines {
				switch {
				case strings.HasPrefix(l, "jobs: urgent-"):
					jobs++
				case strings.HasPrefix(l, "bulk: bulk-"):
					bulk++
				}
			}
			if jobs != 2 || bulk != 6 || len(lines) != 8 {
				t.Errorf("the worker ran %d urgent jobs from jobs and %d bulk ones from bulk in %d runs, want 2, 6 and 8:\n%s", jobs, bulk, len(lines), strings.Join(lines, "\n"))
			}
		}},
		{"dedupe.md", func(t *testing.T, dir string, _ func(...string) string) {
			if lines := fileLines(t, dir, "charges.txt"); len(lines) != 1 {
				t.Errorf("the worker charged %d times, want once: %q", len(lines), lines)
			}
		}},
		{"limits.md", func(t *testing.T, dir string, _ func(...string) string) {
			lines := fileLines(t, dir, "starts.txt")
			if len(lines) != 10 {
				t.Fatalf("%d starts, want 10: %q", len(lines), lines)
			}
			// 2/s with a burst of 2: the tenth start comes 4 s after the first at the earliest.
			first, last := clockTime(t, lines[0]), clockTime(t, lines[9])
			if span := (last - first + 24*time.Hour) % (24 * time.Hour); span < 3500*time.Millisecond {
				t.Errorf("ten starts within %v under --rate-limit 2/s, want at least 3.5s: %q", span, lines)
			}
		}},
		{"payloads.md", func(t *testing.T, dir string, _ func(...string) string) {
			lines := fileLines(t, dir, "sizes.txt")
			if len(lines) != 1 || !strings.HasPrefix(lines[0], "2000000 bytes from s3://watchbot-payloads/") {
				t.Errorf("the worker wrote %q, want one line: 2000000 bytes from s3://watchbot-payloads/KEY", lines)
			}
		}},
		{"map-reduce.md", func(t *testing.T, _ string, run func(...string) string) {
			var status struct{ Total, Done int }
			out := run("progress", "status", "job-1", "--table", "watchbot-progress", "--json")
			if err := json.Unmarshal([]byte(out), &status); err != nil || status.Total != 3 || status.Done != 3 {
				t.Errorf("progress status job-1: %s (%v), want 3 of 3 parts done", out, err)
			}
		}},
	} {
		t.Run(c.page, func(t *testing.T) {
			t.Parallel() // each starts its own emulator
			blocks := markedBlocks(t, pages[filepath.Clean("../../docs/"+c.page)], "local")
			if len(blocks) != 2 {
				t.Fatalf("%d blocks between the local markers, want 2: make emulator, then the example", len(blocks))
			}
			words := strings.Fields(blocks[0])
			if len(words) < 2 || words[0] != "make" || words[1] != "emulator" {
				t.Fatalf("the first block is %q, want make emulator [VAR=VALUE…]", blocks[0])
			}
			emu := startLocalEmulator(t, words[2:]...)
			dir, _ := emu.runLocalBlock(t, blocks[1])
			c.check(t, dir, func(args ...string) string {
				cmd := exec.Command(testenv.Binary(t), args...)
				cmd.Env = testenv.CleanEnv(t, "AWS_ACCESS_KEY_ID=local", "AWS_SECRET_ACCESS_KEY=local", "AWS_REGION=us-east-1",
					"AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:"+emu.dynamoPort)
				out, err := cmd.Output()
				if err != nil {
					t.Fatalf("watchbot %s: %v", strings.Join(args, " "), err)
				}
				return string(out)
			})
		})
	}
}

// fileLines returns the lines of the file name in dir.
func fileLines(t *testing.T, dir, name string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// clockTime reads the HH:MM:SS.mmm that starts line as the time since midnight.
func clockTime(t *testing.T, line string) time.Duration {
	t.Helper()
	c, err := time.Parse("15:04:05.000", strings.Fields(line)[0])
	if err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	return c.Sub(time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC))
}
