package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/watchbot/watchbot/internal/testing/testenv"
	"github.com/watchbot/watchbot/supervisor"
)

// tryCase is a worker and the decision try prints for it.
type tryCase struct {
	name   string
	script string   // the worker's shell script
	args   []string // try's flags before --
	want   string   // the printed line
	code   int      // try's exit status
	action string   // the action listen logs for the same message and worker
}

func tryCases() []tryCase {
	directive := func(json string) string { return "printf '%s' '" + json + "' > \"$WATCHBOT_RESULT_FILE\"\n" }
	return []tryCase{
		{name: "exit 0", script: "exit 0", want: "delete [exit code 0]", code: 0, action: "delete"},
		{name: "exit 1", script: "exit 1", want: "retry in 2s (attempt 1 of 10) [exit code 1]", code: 11, action: "retry"},
		{name: "exit 1, third attempt", script: "exit 1", args: []string{"--attempt", "3"}, want: "retry in 8s (attempt 3 of 10) [exit code 1]", code: 11},
		{name: "exit 1, last attempt", script: "exit 1", args: []string{"--attempt", "10"},
			want: "left to the redrive policy (attempt 10 of 10): worker exited 1 on the last attempt (10 of 10) [exit code 1]", code: 12},
		{name: "exit 3", script: "exit 3", want: "dead-letter: worker rejected the message (exit 3) [exit code 3]", code: 13, action: "dead-letter"},
		{name: "exit 4", script: "exit 4", want: "retry in 2s (attempt 1 of 10) [exit code 4]", code: 11, action: "retry"},
		{name: "killed by a signal", script: "kill -9 $$", want: "retry in 2s (attempt 1 of 10) [signal 9]", code: 11, action: "retry"},
		{name: "past --max-job-duration", script: "sleep 30", args: []string{"--max-job-duration", "1s", "--kill-grace", "1s"},
			want: "retry in 2s (attempt 1 of 10) [--max-job-duration]", code: 11, action: "retry"},
		{name: "ack", script: directive(`{"action":"ack"}`) + "exit 1", want: `delete [result file: "ack"]`, code: 0, action: "delete"},
		{name: "retry in 5 s", script: directive(`{"action":"retry","delaySeconds":5}`), want: `retry in 5s (attempt 1 of 10) [result file: "retry"]`, code: 11, action: "retry"},
		{name: "retry at once", script: directive(`{"action":"retry","delaySeconds":0}`), want: `retry in 0s (attempt 1 of 10) [result file: "retry"]`, code: 11, action: "retry"},
		{name: "dead-letter with a reason", script: directive(`{"action":"dead-letter","reason":"bad invoice"}`),
			want: `dead-letter: bad invoice [result file: "dead-letter"]`, code: 13, action: "dead-letter"},
		{name: "pause", script: directive(`{"pause":"30s"}`),
			want: `pause 30s: no job starts until it ends, then the message runs again, not as an attempt [result file: pause "30s"]`, code: 11},
		{name: "pause past --max-pause", script: directive(`{"pause":"1h"}`),
			want: `pause 15m0s: no job starts until it ends, then the message runs again, not as an attempt [result file: pause "1h"]`, code: 11},
		{name: "malformed result file", script: directive(`{"action":"explode"}`) + "exit 0", want: "delete [exit code 0]", code: 0, action: "delete"},
	}
}

func writeWorker(t *testing.T, dir, script string) string {
	t.Helper()
	p := filepath.Join(dir, "worker.sh")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTry walks the outcome table through try: each worker's printed decision and exit
// status.
func TestTry(t *testing.T) {
	for _, tc := range tryCases() {
		// Not in parallel: urfave/cli's help flag is shared by every app the in-process CLI builds.
		t.Run(tc.name, func(t *testing.T) {
			worker := writeWorker(t, t.TempDir(), tc.script)
			args := append(append([]string{"try", "--body", "hello"}, tc.args...), "--", worker)
			code, out, errOut := runCLI(t, nil, args...)
			if code != tc.code || strings.TrimSpace(out) != tc.want {
				t.Errorf("exit %d, printed %q; want %d, %q\nstderr: %s", code, strings.TrimSpace(out), tc.code, tc.want, errOut)
			}
		})
	}
}

// TestTryTakesListenSettings checks that try's run settings are listen's rows: a flag listen
// has and try once lacked (--backoff-min), and an environment variable listen reads
// (Watchbot's maxJobDuration).
func TestTryTakesListenSettings(t *testing.T) {
	cases := []struct {
		name, script string
		env          map[string]string
		args         []string
		want         string
	}{
		{name: "--backoff-min", script: "exit 1", args: []string{"--backoff-min", "5s"}, want: "retry in 5s (attempt 1 of 10) [exit code 1]"},
		{name: "maxJobDuration", script: "sleep 30", env: map[string]string{"maxJobDuration": "1s"}, args: []string{"--kill-grace", "1s"},
			want: "retry in 2s (attempt 1 of 10) [--max-job-duration]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			worker := writeWorker(t, t.TempDir(), tc.script)
			args := append(append([]string{"try", "--body", "hello"}, tc.args...), "--", worker)
			code, out, errOut := runCLI(t, nil, args...)
			if code != 11 || strings.TrimSpace(out) != tc.want {
				t.Errorf("exit %d, printed %q; want 11, %q\nstderr: %s", code, strings.TrimSpace(out), tc.want, errOut)
			}
		})
	}
}

// TestTryMatchesListen runs each worker once under listen, on fauxqs, with the same message:
// the action listen logs is the one try printed.
func TestTryMatchesListen(t *testing.T) {
	emu := testenv.SQS(t)
	for _, tc := range tryCases() {
		if tc.action == "" {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := emu.Client()
			q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 10})
			worker := writeWorker(t, t.TempDir(), tc.script)
			send(t, c, q.URL, "hello")
			args := append([]string{"--queue-url", q.URL, "--once"}, tc.args...)
			p, out := listenBinary(t, emu, append(args, "--", worker)...)
			if code := p.Wait(t, 60*time.Second, out.String); code != 0 {
				t.Fatalf("listen exit %d\n%s", code, out)
			}
			var action string
			for _, line := range strings.Split(out.String(), "\n") {
				var rec map[string]any
				if json.Unmarshal([]byte(line), &rec) == nil && rec["outcome"] != nil {
					action, _ = rec["outcome"].(string)
				}
			}
			if action != tc.action {
				t.Errorf("listen's outcome %q, try's %q\n%s", action, tc.action, out)
			}
		})
	}
}

func TestTryBatch(t *testing.T) {
	worker := writeWorker(t, t.TempDir(), `while read -r line; do
  id=$(printf '%s' "$line" | sed -E 's/.*"id":"([^"]+)".*/\1/')
  case "$line" in
  *'"body":"good'*) printf '{"id":"%s","action":"ack"}\n' "$id" ;;
  *'"body":"later'*) printf '{"id":"%s","action":"retry","delaySeconds":30}\n' "$id" ;;
  *'"body":"bad'*) printf '{"id":"%s","action":"dead-letter","reason":"bad"}\n' "$id" ;;
  esac
done < "$WATCHBOT_MESSAGE_FILE" > "$WATCHBOT_RESULT_FILE"
exit 1`)
	code, out, errOut := runCLI(t, strings.NewReader("good 1\nlater 2\nbad 3\nnone 4\n"), "try", "--batch", "--json", "--", worker)
	if code != 13 {
		t.Errorf("exit %d, want 13 (the highest: dead-letter); stderr %s", code, errOut)
	}
	var got struct{ Decisions []supervisor.Decision }
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	var actions []string
	for _, d := range got.Decisions {
		actions = append(actions, d.Action)
	}
	if want := "delete retry dead-letter retry"; strings.Join(actions, " ") != want {
		t.Errorf("actions %v, want %s (the last one follows the exit code)", actions, want)
	}
	if d := got.Decisions[1]; d.DelaySeconds != 30 {
		t.Errorf("retry delay %v, want 30", d.DelaySeconds)
	}
}

func TestTryEnvironmentAndSNS(t *testing.T) {
	dir := t.TempDir()
	worker := writeWorker(t, dir, `env > "`+dir+`/env"; cat > "`+dir+`/stdin"`)
	code, out, errOut := runCLI(t, nil, "try", "--body", "payload", "--subject", "Invoice", "--attr", "tenant=acme,beta", "--attempt", "2",
		"--attr", "traceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "--", worker)
	if code != 0 || strings.TrimSpace(out) != "delete [exit code 0]" {
		t.Fatalf("exit %d, %q, %s", code, out, errOut)
	}
	env, _ := os.ReadFile(filepath.Join(dir, "env"))
	for _, want := range []string{"TRACEPARENT=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\n", "Message=payload", "Subject=Invoice", "WATCHBOT_ATTEMPT=2", "ApproximateReceiveCount=2", "WATCHBOT_MAX_ATTEMPTS=10", "MessageId=try-1-"} {
		if !strings.Contains(string(env), want) {
			t.Errorf("worker environment lacks %s", want)
		}
	}
	if stdin, _ := os.ReadFile(filepath.Join(dir, "stdin")); string(stdin) != "payload" {
		t.Errorf("stdin %q", stdin)
	}
}

// TestTryQueueAndGroup: the worker learns the queue --queue-url names (no SQS call is made)
// and the message's group: a fair queue's tenant, as listen passes it.
func TestTryQueueAndGroup(t *testing.T) {
	dir := t.TempDir()
	worker := writeWorker(t, dir, `env > "`+dir+`/env"`)
	queue := "https://sqs.eu-west-1.amazonaws.com/123456789012/urgent"
	code, out, errOut := runCLI(t, nil, "try", "--body", "x", "--queue-url", queue, "--group-id", "tenant-a", "--", worker)
	if code != 0 || strings.TrimSpace(out) != "delete [exit code 0]" {
		t.Fatalf("exit %d, %q, %s", code, out, errOut)
	}
	env, _ := os.ReadFile(filepath.Join(dir, "env"))
	for _, want := range []string{"WATCHBOT_QUEUE_URL=" + queue + "\n", "WATCHBOT_GROUP_ID=tenant-a\n"} {
		if !strings.Contains(string(env), want) {
			t.Errorf("worker environment lacks %q", want)
		}
	}
}

func TestTryBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--body", "x", "--file", "f", "--", "true"}, "give the message one way"},
		{[]string{"--file", "/nonexistent", "--", "true"}, "--file: open /nonexistent"},
		{[]string{"--body", "x", "--attr", "novalue", "--", "true"}, `--attr ("novalue") must be NAME=VALUE`},
		{[]string{"--body", "x", "--attr", "a=1", "--attr", "a=2", "--", "true"}, "--attr a is given twice"},
		{[]string{"--body", "x", "--attempt", "11", "--", "true"}, "--attempt (11) must be between 1 and --max-attempts (10)"},
		{[]string{"--body", "x", "--max-attempts", "0", "--", "true"}, "--max-attempts (0) must be between 1 and 1000: try has no queue"},
		{[]string{"--body", "x"}, "no worker command"},
		{[]string{"--body", "x", "--queue-url", "https://sqs.eu-west-1.amazonaws.com/1/a", "--queue-url", "https://sqs.eu-west-1.amazonaws.com/1/b", "--", "true"},
			"--queue-url is given 2 times: try runs one message, which comes from one queue"},
		{[]string{"--body", "x", "--queue-url", "jobs", "--", "true"}, "--queue-url: "},
		{[]string{"--body", "x", "--", "/nonexistent/worker"}, `worker command "/nonexistent/worker"`},
	} {
		code, _, errOut := runCLI(t, nil, append([]string{"try"}, tc.args...)...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("try %v: exit %d, stderr %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

// TestTryLogFormat checks that --log-format shapes the log try writes on stderr (the worker's
// output lines among it), and that a format listen does not know is bad usage.
func TestTryLogFormat(t *testing.T) {
	worker := writeWorker(t, t.TempDir(), "echo from-worker >&2")
	for _, tc := range []struct {
		format string
		code   int
		want   string
	}{
		{"json", 0, `"level":"INFO",`},
		{"text", 0, `level=INFO `},
		{"xml", 2, `--log-format: "xml" is not json or text`},
	} {
		t.Run(tc.format, func(t *testing.T) {
			code, _, stderr := runCLI(t, nil, "try", "--log-format", tc.format, "--body", "x", "--", worker)
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr, tc.code, tc.want)
			}
			if tc.code == 0 && !strings.Contains(stderr, "from-worker") {
				t.Errorf("stderr %q lacks the worker's line", stderr)
			}
			if tc.format == "json" && !testenv.Logged(stderr, "stream", "stderr", "line", "from-worker") {
				t.Errorf("stderr %q lacks a JSON record of the worker's line", stderr)
			}
		})
	}
}
