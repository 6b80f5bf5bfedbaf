package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/urfave/cli/v2"

	"github.com/watchbot/watchbot/internal/testing/testenv"
	"github.com/watchbot/watchbot/supervisor"
)

// parseListen runs the listen command's flag parsing only, returning the config it builds.
func parseListen(t *testing.T, args ...string) (supervisor.Config, string, error) {
	t.Helper()
	cmd := listenCommand(nil)
	var cfg supervisor.Config
	var format string
	cmd.Action = func(c *cli.Context) error {
		a, err := listenConfig(c)
		cfg, format = a.Listen, a.logFormat
		return err
	}
	app := &cli.App{Name: "watchbot", Commands: []*cli.Command{cmd}, Writer: &bytes.Buffer{}, ErrWriter: &bytes.Buffer{},
		ExitErrHandler: func(*cli.Context, error) {}}
	err := app.Run(append([]string{"watchbot", "listen"}, args...))
	return cfg, format, err
}

func TestListenHonoursWatchbotEnvironment(t *testing.T) {
	t.Setenv("QueueUrl", "https://sqs.us-east-1.amazonaws.com/123456789012/legacy")
	t.Setenv("maxJobDuration", "300")
	t.Setenv("Volumes", "/scratch, /tmp/work")
	t.Setenv("writableFilesystem", "true")
	t.Setenv("structuredLogging", "false")
	cfg, format, err := parseListen(t, "--", "./worker.sh", "--flag-for-worker")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.QueueURL != "https://sqs.us-east-1.amazonaws.com/123456789012/legacy" {
		t.Errorf("QueueURL = %q", cfg.QueueURL)
	}
	if cfg.MaxJobDuration != 5*time.Minute {
		t.Errorf("maxJobDuration=300 gave %v, want 5m", cfg.MaxJobDuration)
	}
	if !slices.Equal(cfg.Volumes, []string{"/scratch", "/tmp/work"}) {
		t.Errorf("Volumes = %v", cfg.Volumes)
	}
	if !cfg.Once {
		t.Error("writableFilesystem=true did not turn on --once")
	}
	if format != "text" {
		t.Errorf("structuredLogging=false gave format %q, want text", format)
	}
	if !slices.Equal(cfg.Command, []string{"./worker.sh", "--flag-for-worker"}) {
		t.Errorf("Command = %q", cfg.Command)
	}
}

func TestListenFlags(t *testing.T) {
	cfg, format, err := parseListen(t, "--queue-url", "https://sqs.eu-west-1.amazonaws.com/1/q",
		"--concurrency", "8", "--max-attempts", "4", "--backoff-base", "500ms", "--backoff-max", "60",
		"--backoff-jitter", "full", "--visibility-timeout", "2m", "--heartbeat-interval", "30s",
		"--max-job-duration", "1h", "--kill-grace", "10", "--shutdown-timeout", "25s", "--on-reject", "delete",
		"--max-message-age", "24h", "--log-format", "json", "--batch-size", "25", "--batch-window", "2s", "--retry-delay", "45",
		"--", "sh", "-c", "exit 0")
	if err != nil {
		t.Fatal(err)
	}
	want := supervisor.DefaultConfig()
	if cfg.Concurrency != 8 || cfg.MaxAttempts != 4 || cfg.Backoff.Base != 500*time.Millisecond || cfg.Backoff.Max != time.Minute ||
		cfg.Backoff.Jitter != "full" || cfg.VisibilityTimeout != 2*time.Minute || cfg.HeartbeatInterval != 30*time.Second ||
		cfg.MaxJobDuration != time.Hour || cfg.KillGrace != 10*time.Second || cfg.ShutdownTimeout != 25*time.Second ||
		cfg.OnReject != supervisor.RejectDelete || cfg.MaxMessageAge != 24*time.Hour || format != "json" || cfg.WaitTime != want.WaitTime ||
		cfg.BatchSize != 25 || cfg.BatchWindow != 2*time.Second || cfg.RetryDelay != 45*time.Second {
		t.Fatalf("flags not applied: %+v", cfg)
	}
}

func TestListenBadFlagValues(t *testing.T) {
	base := []string{"--queue-url", "https://sqs.us-east-1.amazonaws.com/1/q"}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"--no-such-flag"}, "watchbot listen has no flag --no-such-flag"},
		{"missing queue url", []string{"--", "true"}, "give the queue: --queue-url URL, or WATCHBOT_QUEUE_URL"},
		{"bad duration", append(base, "--visibility-timeout", "soon", "--", "true"), `"soon" is not a duration`},
		{"heartbeat not shorter than visibility", append(base, "--visibility-timeout", "1m", "--heartbeat-interval", "1m", "--", "true"),
			"--heartbeat-interval (1m0s) must be shorter than --visibility-timeout (1m0s)"},
		{"concurrency 0", append(base, "--concurrency", "0", "--", "true"), "--concurrency (0) must be between 1 and 1000"},
		{"bad jitter", append(base, "--backoff-jitter", "lots", "--", "true"), `--backoff-jitter: unknown jitter "lots"`},
		{"no command", base, "no worker command"},
		{"brake neither on nor off", append(base, "--brake", "maybe", "--", "true"), `--brake ("maybe") must be on or off`},
		{"batch size 0", append(base, "--batch-size", "0", "--", "true"), "--batch-size (0) must be between 1 and 100"},
		{"batch size 101", append(base, "--batch-size", "101", "--", "true"), "--batch-size (101) must be between 1 and 100"},
		{"batch window above 30s", append(base, "--batch-size", "10", "--batch-window", "31s", "--", "true"), "--batch-window (31s) must be between 0 and 30s"},
		{"batch window without batches", append(base, "--batch-window", "5s", "--", "true"), "--batch-window (5s) needs --batch-size above 1"},
		{"receive visibility below kill grace + 3s", append(base, "--kill-grace", "5s", "--receive-visibility", "7s", "--", "true"),
			"--receive-visibility (7s) must be between --kill-grace + 3s (8s) and --visibility-timeout (3m0s)"},
		{"wait time 0", append(base, "--wait-time", "0s", "--", "true"), "--wait-time (0s) must be whole seconds between 1s and 20s"},
		{"wait time not whole seconds", append(base, "--wait-time", "1500ms", "--", "true"), "--wait-time (1.5s) must be whole seconds between 1s and 20s"},
		{"wait time above 20s", append(base, "--wait-time", "21s", "--", "true"), "--wait-time (21s) must be whole seconds between 1s and 20s"},
		{"receive visibility past the lease", append(base, "--visibility-timeout", "30s", "--receive-visibility", "31s", "--", "true"),
			"--receive-visibility (31s) must be between --kill-grace + 3s (8s) and --visibility-timeout (30s)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, nil, append([]string{"listen"}, tt.args...)...)
			if code != 2 {
				t.Errorf("exit code %d, want 2", code)
			}
			if !strings.Contains(stderr, tt.want) || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
				t.Errorf("stderr = %q, want one line containing %q", stderr, tt.want)
			}
		})
	}
}

// listening says whether listen's log (out) holds its start: the record of what it serves.
func listening(out string) bool { return testenv.Logged(out, "level", "INFO", "max_attempts", "*") }

// listenBinary starts `watchbot listen ARGS` against emu; its output, stdout and stderr
// together, is in the returned buffer.
func listenBinary(t *testing.T, emu *testenv.Emulator, args ...string) (*testenv.Process, *testenv.Buffer) {
	t.Helper()
	cmd := emu.Watchbot(t, append([]string{"listen"}, args...)...)
	out := &testenv.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	return testenv.Spawn(t, cmd), out
}

func TestListenStartupFailuresReceiveNothing(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	c := emu.Client()
	withDLQ := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	noDLQ := emu.NewQueue(t, testenv.QueueOptions{})
	dir := t.TempDir()
	tests := []struct {
		name  string
		queue testenv.Queue
		args  []string
		code  int
		want  string
	}{
		{"unreachable endpoint", withDLQ, []string{"--endpoint-url", "http://127.0.0.1:1", "--queue-url", withDLQ.URL, "--", "true"}, 1, "SQS could not be reached at http://127.0.0.1:1, which is not the URL's host (dial tcp 127.0.0.1:1: connect: connection refused): check --endpoint-url"},
		{"no redrive policy", noDLQ, []string{"--queue-url", noDLQ.URL, "--", "true"}, 2, "the queue has no redrive policy"},
		{"command does not exist", withDLQ, []string{"--queue-url", withDLQ.URL, "--", filepath.Join(dir, "missing.sh")}, 2, "missing.sh"},
		{"--temp-dir cannot be written", withDLQ, []string{"--queue-url", withDLQ.URL, "--temp-dir", filepath.Join(dir, "missing"), "--", "true"}, 2,
			fmt.Sprintf("--temp-dir (%q) cannot hold the jobs' files", filepath.Join(dir, "missing"))},
		{"max attempts above maxReceiveCount", withDLQ, []string{"--queue-url", withDLQ.URL, "--max-attempts", "5", "--", "true"}, 2, "--max-attempts (5) is above the queue's maxReceiveCount (3)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := c.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(tt.queue.URL), MessageBody: aws.String("untouched")}); err != nil {
				t.Fatal(err)
			}
			p, out := listenBinary(t, emu, tt.args...)
			if code := p.Wait(t, 60*time.Second); code != tt.code {
				t.Errorf("exit code %d, want %d; output:\n%s", code, tt.code, out)
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if last := lines[len(lines)-1]; !strings.HasPrefix(last, "watchbot: ") || !strings.Contains(last, tt.want) {
				t.Errorf("last line %q, want a watchbot: error containing %q", last, tt.want)
			}
			neverReceived(t, c, tt.queue.URL)
		})
	}
}

func TestListenDrainsOnSIGTERM(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	c := emu.Client()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	dir := t.TempDir()
	worker := filepath.Join(dir, "w.sh")
	os.WriteFile(worker, []byte("#!/bin/sh\ntouch "+dir+"/started\nsleep 1\ntouch "+dir+"/finished\n"), 0o755)
	if _, err := c.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(q.URL), MessageBody: aws.String("job")}); err != nil {
		t.Fatal(err)
	}
	p, out := listenBinary(t, emu, "--queue-url", q.URL, "--", worker)
	waitFile(t, filepath.Join(dir, "started"))
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	if code := p.Wait(t, 30*time.Second); code != 0 {
		t.Fatalf("exit code %d after a clean drain, want 0; output:\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "finished")); err != nil {
		t.Fatalf("the running job was not allowed to finish; output:\n%s", out)
	}
	if n := testenv.Depth(t, c, q.URL).Total(); n != 0 {
		t.Fatalf("%d messages left after the drain, want 0 (deleted)", n)
	}
}

func TestListenSecondSignalStopsAtOnce(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	c := emu.Client()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	dir := t.TempDir()
	worker := filepath.Join(dir, "w.sh")
	os.WriteFile(worker, []byte("#!/bin/sh\ntouch "+dir+"/started\ntrap '' TERM\nsleep 60\n"), 0o755)
	if _, err := c.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(q.URL), MessageBody: aws.String("job")}); err != nil {
		t.Fatal(err)
	}
	p, out := listenBinary(t, emu, "--queue-url", q.URL, "--shutdown-timeout", "60s", "--", worker)
	waitFile(t, filepath.Join(dir, "started"))
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	time.Sleep(300 * time.Millisecond)
	_ = p.Cmd.Process.Signal(syscall.SIGINT)
	if code := p.Wait(t, 30*time.Second); code != 130 {
		t.Fatalf("exit code %d after a second signal, want 130; output:\n%s", code, out)
	}
	// Released: visible again at once.
	got, err := c.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.URL), WaitTimeSeconds: 2})
	if err != nil || len(got.Messages) != 1 {
		t.Fatalf("message not released (err %v); output:\n%s", err, out)
	}
}

// neverReceived takes the messages of queue url, failing t if any had been received before,
// and deletes them.
func neverReceived(t *testing.T, c *sqs.Client, url string) {
	t.Helper()
	got, err := c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10,
		MessageSystemAttributeNames: []sqsAttr{sqsAttrReceiveCount}})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range got.Messages {
		if m.Attributes["ApproximateReceiveCount"] != "1" {
			t.Errorf("message received before the startup checks passed (count %s)", m.Attributes["ApproximateReceiveCount"])
		}
		_, _ = c.DeleteMessage(t.Context(), &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle})
	}
}

// waitFile waits for the file p to exist.
func waitFile(t *testing.T, p string) {
	t.Helper()
	testenv.Eventually(t, p+" to appear", 30*time.Second, func() bool {
		_, err := os.Stat(p)
		return err == nil
	})
}

type sqsAttr = sqstypes.MessageSystemAttributeName

const sqsAttrReceiveCount = sqstypes.MessageSystemAttributeNameApproximateReceiveCount

func TestListenPublishesEMFMetrics(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	c := emu.Client()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	dir := t.TempDir()
	worker := filepath.Join(dir, "w.sh")
	os.WriteFile(worker, []byte(`#!/bin/sh
case "$Message" in
ok) exit 0 ;;
reject) exit 3 ;;
flaky) [ "$WATCHBOT_ATTEMPT" -ge 2 ] && exit 0; exit 1 ;;
esac
`), 0o755)
	for _, b := range []string{"ok", "ok", "ok", "reject", "flaky"} {
		if _, err := c.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(q.URL), MessageBody: aws.String(b)}); err != nil {
			t.Fatal(err)
		}
	}
	cmd := emu.Watchbot(t, "listen", "--queue-url", q.URL, "--backoff-base", "1s", "--metrics", "emf",
		"--metrics-service", "demo", "--", worker)
	var stdout, stderr testenv.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	p := testenv.Spawn(t, cmd)
	testenv.Eventually(t, "the queue to drain", 30*time.Second, func() bool { return testenv.Depth(t, c, q.URL).Total() == 0 }, stderr.String)
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	if code := p.Wait(t, 30*time.Second); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr.String())
	}
	// Sum each metric over the EMF lines; one line carries both dimension sets
	// ([QueueName, Service] and [QueueName]), so each value counts once.
	sums := map[string]float64{}
	for _, line := range strings.Split(stdout.String(), "\n") {
		if !strings.Contains(line, `"_aws"`) {
			continue
		}
		var doc map[string]any
		if err := json.Unmarshal([]byte(line), &doc); err != nil {
			t.Fatalf("EMF line is not JSON: %v\n%s", err, line)
		}
		aws := doc["_aws"].(map[string]any)
		if _, ok := aws["Timestamp"].(float64); !ok {
			t.Fatalf("EMF line without _aws.Timestamp: %s", line)
		}
		directive := aws["CloudWatchMetrics"].([]any)[0].(map[string]any)
		if directive["Namespace"] != "Watchbot" {
			t.Fatalf("namespace %v", directive["Namespace"])
		}
		if doc["Service"] != "demo" || doc["QueueName"] != queueName(q.URL) {
			t.Fatalf("dimension values missing: %s", line)
		}
		for _, m := range directive["Metrics"].([]any) {
			name := m.(map[string]any)["Name"].(string)
			if v, ok := doc[name].(float64); ok {
				sums[name] += v
			}
		}
	}
	want := map[string]float64{"MessagesProcessed": 4, "WorkerErrors": 2, "DeadLetter": 1, "MessageReceives": 6}
	for name, v := range want {
		if sums[name] != v {
			t.Errorf("%s = %v, want %v (all sums %v)\nstdout:\n%s", name, sums[name], v, sums, stdout.String())
		}
	}
}

func queueName(url string) string { return url[strings.LastIndex(url, "/")+1:] }
