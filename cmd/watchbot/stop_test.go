package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// TestListenStopStrandsNothing: an idle listen stopped by SIGTERM turns unready at once and
// leaves its last long poll to answer. A message sent right after the signal, and one a few
// seconds later, are each worked at attempt 1: by the stopping listen's drain, or by the next
// listen within a second of its start. Neither waits out --receive-visibility unseen (a poll
// cancelled under way would leave SQS's answer to it invisible for that long, and its receive
// counted).
func TestListenStopStrandsNothing(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	c := emu.Client()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	dir := t.TempDir()
	worker := filepath.Join(dir, "worker.sh")
	script := "#!/bin/sh\necho \"$Message $WATCHBOT_ATTEMPT $(date +%s.%N)\" >> \"" + dir + "/ran\"\n"
	if err := os.WriteFile(worker, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	args := []string{"--queue-url", q.URL, "--receive-visibility", "60s", "--visibility-timeout", "90s", "--wait-time", "20s"}

	addr := freeAddr(t)
	first, logs := listenBinary(t, emu, append(args, "--http-addr", addr, "--", worker)...)
	testenv.Eventually(t, "the first listen to be ready", 30*time.Second, func() bool { code, _ := probe(addr, "/readyz"); return code == 200 }, logs.String)
	time.Sleep(500 * time.Millisecond) // its long poll is under way
	_ = first.Cmd.Process.Signal(syscall.SIGTERM)
	testenv.Eventually(t, "the stopping listen to turn unready", 5*time.Second, func() bool { code, _ := probe(addr, "/readyz"); return code == 503 }, logs.String)
	send(t, c, q.URL, "at-once")
	time.Sleep(3 * time.Second)
	send(t, c, q.URL, "later")
	if code := first.Wait(t, 30*time.Second, logs.String); code != 0 {
		t.Fatalf("exit %d after SIGTERM; logs:\n%s", code, logs)
	}
	stopped := time.Now()

	second, logs2 := listenBinary(t, emu, append(args, "--", worker)...)
	testenv.Eventually(t, "the second listen to listen", 30*time.Second, func() bool { return listening(logs2.String()) }, logs2.String)
	started := time.Now()
	testenv.Eventually(t, "both messages to run", 10*time.Second, func() bool { return len(ranAt(t, dir)) == 2 }, logs2.String)
	// A second signal does not wait for the long poll: the listen exits at once.
	_ = second.Cmd.Process.Signal(syscall.SIGTERM)
	time.Sleep(200 * time.Millisecond)
	_ = second.Cmd.Process.Signal(syscall.SIGTERM)
	if code := second.Wait(t, 5*time.Second, logs2.String); code != 130 {
		t.Errorf("exit %d after a second SIGTERM, want 130", code)
	}

	for body, r := range ranAt(t, dir) {
		if r.attempt != 1 {
			t.Errorf("%s ran at attempt %d, want 1: a receive was spent on it unseen\n%s\n%s", body, r.attempt, logs, logs2)
		}
		if r.at.After(stopped) && r.at.After(started.Add(time.Second)) {
			t.Errorf("%s ran %v after the second listen started, want within 1s\n%s", body, r.at.Sub(started), logs2)
		}
	}
	if n := testenv.Depth(t, c, q.URL).Total(); n != 0 {
		t.Errorf("%d messages left in the queue", n)
	}
}

// workerRecord is one worker run the stop test's worker recorded.
type workerRecord struct {
	attempt int
	at      time.Time
}

// ranAt reads the stop test's worker's record: each message's first run.
func ranAt(t *testing.T, dir string) map[string]workerRecord {
	t.Helper()
	data, _ := os.ReadFile(filepath.Join(dir, "ran"))
	runs := map[string]workerRecord{}
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		attempt, _ := strconv.Atoi(f[1])
		secs, _ := strconv.ParseFloat(f[2], 64)
		if _, seen := runs[f[0]]; !seen {
			runs[f[0]] = workerRecord{attempt: attempt, at: time.Unix(0, int64(secs*float64(time.Second)))}
		}
	}
	return runs
}
