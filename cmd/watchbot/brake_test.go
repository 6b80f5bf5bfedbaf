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

// TestListenBrakesThroughAnOutage runs the binary against fauxqs with 60 messages and a
// worker whose dependency is down (a file the test creates after 15 s), --max-attempts 3:
// with the brake, a handful of messages at most reach the dead-letter queue and every other
// one is processed once the dependency is back; with --brake off most are dead-lettered.
// Under `make soak` the outage lasts 60 s, with 200 messages and probes up to 10 s apart.
func TestListenBrakesThroughAnOutage(t *testing.T) {
	t.Parallel()
	messages, outage, probeMax := 60, 15*time.Second, "4s"
	if testenv.Soak() {
		messages, outage, probeMax = 200, 60*time.Second, "10s"
	}
	emu := testenv.SQS(t)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{name: "brake on"},
		{name: "brake off", args: []string{"--brake", "off"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := emu.Client()
			q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
			dir := t.TempDir()
			worker := filepath.Join(dir, "worker.sh")
			script := "#!/bin/sh\nif [ -f " + dir + "/up ]; then echo up >> " + dir + "/runs; exit 0; fi\necho down >> " + dir + "/runs\nexit 1\n"
			if err := os.WriteFile(worker, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			bodies := make([]string, messages)
			for i := range bodies {
				bodies[i] = "job-" + strconv.Itoa(i)
			}
			send(t, c, q.URL, bodies...)
			args := append([]string{"--queue-url", q.URL, "--concurrency", "8", "--backoff-base", "1s",
				"--brake-probe-max", probeMax}, tc.args...)
			p, stderr := listenBinary(t, emu, append(args, "--", worker)...)
			time.Sleep(outage)
			runsDown := strings.Count(readFile(t, filepath.Join(dir, "runs")), "down")
			if err := os.WriteFile(filepath.Join(dir, "up"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, "the work queue to empty", 60*time.Second, func() bool {
				return testenv.Depth(t, c, q.URL).Total() == 0
			}, stderr.String)
			_ = p.Cmd.Process.Signal(syscall.SIGTERM)
			if code := p.Wait(t, 60*time.Second, stderr.String); code != 0 {
				t.Fatalf("exit %d; logs:\n%s", code, stderr.String())
			}
			dead := int(testenv.Depth(t, c, q.DLQURL).Total())
			processed := strings.Count(readFile(t, filepath.Join(dir, "runs")), "up")
			t.Logf("%s: %d worker runs during the %v outage, %d messages dead-lettered, %d processed after it",
				tc.name, runsDown, outage, dead, processed)
			if processed+dead != messages {
				t.Errorf("%d processed + %d dead-lettered, want %d in all", processed, dead, messages)
			}
			if tc.args == nil {
				if dead > 10 {
					t.Errorf("%d messages dead-lettered with the brake, want a handful (at most 10)", dead)
				}
				// The brake went on, ramped back up after a probe succeeded, and opened again.
				for _, state := range []string{"braking", "recovering", "open"} {
					if !testenv.Logged(stderr.String(), "state", state, "failure_ratio", "*") {
						t.Errorf("the brake never went to %s", state)
					}
				}
			} else if dead < messages*3/4 {
				t.Errorf("only %d of %d dead-lettered without the brake; the test does not show what the brake saves", dead, messages)
			}
		})
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(data)
}
