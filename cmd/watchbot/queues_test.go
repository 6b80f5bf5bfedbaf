package main

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/internal/testing/testenv"
	"github.com/watchbot/watchbot/supervisor"
)

const (
	urgentURL = "https://sqs.us-east-1.amazonaws.com/123456789012/urgent"
	bulkURL   = "https://sqs.us-east-1.amazonaws.com/123456789012/bulk"
)

func TestListenSeveralQueues(t *testing.T) {
	tests := []struct {
		name     string
		env      string
		args     []string
		urls     []string
		policy   supervisor.QueuePolicy
		weights  map[string]int
		reserves map[string]int
	}{
		{name: "repeated flag", args: []string{"--queue-url", urgentURL, "--queue-url", bulkURL},
			urls: []string{urgentURL, bulkURL}, policy: supervisor.PolicyWeighted},
		{name: "commas in the flag", args: []string{"--queue-url", urgentURL + "," + bulkURL},
			urls: []string{urgentURL, bulkURL}, policy: supervisor.PolicyWeighted},
		{name: "commas in WATCHBOT_QUEUE_URL", env: urgentURL + ", " + bulkURL,
			urls: []string{urgentURL, bulkURL}, policy: supervisor.PolicyWeighted},
		{name: "policy, weights and reserve",
			args: []string{"--queue-url", urgentURL, "--queue-url", bulkURL, "--queue-policy", "strict",
				"--queue-weight", "urgent=3", "--queue-weight", "bulk=1", "--queue-reserve", "urgent=2"},
			urls: []string{urgentURL, bulkURL}, policy: supervisor.PolicyStrict,
			weights: map[string]int{"urgent": 3, "bulk": 1}, reserves: map[string]int{"urgent": 2}},
		{name: "one queue with a weight and a reserve", args: []string{"--queue-url", urgentURL, "--queue-weight", "urgent=2", "--queue-reserve", "urgent=1"},
			urls: []string{urgentURL}, policy: supervisor.PolicyWeighted, weights: map[string]int{"urgent": 2}, reserves: map[string]int{"urgent": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("WATCHBOT_QUEUE_URL", tt.env)
			cfg, _, err := parseListen(t, append(tt.args, "--concurrency", "4", "--", "true")...)
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.URLs(); !slices.Equal(got, tt.urls) {
				t.Errorf("queues %q, want %q", got, tt.urls)
			}
			if cfg.Queues.Policy != tt.policy || !maps.Equal(cfg.Queues.Weights, tt.weights) || !maps.Equal(cfg.Queues.Reserve, tt.reserves) {
				t.Errorf("policy %s, weights %v, reserves %v", cfg.Queues.Policy, cfg.Queues.Weights, cfg.Queues.Reserve)
			}
		})
	}
}

func TestListenSeveralQueuesRefused(t *testing.T) {
	two := []string{"--queue-url", urgentURL, "--queue-url", bulkURL, "--concurrency", "4"}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"the same queue twice", []string{"--queue-url", urgentURL, "--queue-url", urgentURL}, "names queue urgent a second time"},
		{"unknown policy", append(two, "--queue-policy", "fair"), `--queue-policy ("fair") must be weighted or strict`},
		{"weight of an unknown queue", append(two, "--queue-weight", "other=2"), `--queue-weight ("other") names no queue given with --queue-url`},
		{"weight 0", append(two, "--queue-weight", "bulk=0"), `--queue-weight ("bulk=0") must be between 1 and 1000`},
		{"weight not a number", append(two, "--queue-weight", "bulk=lots"), `--queue-weight ("bulk=lots") must be NAME=N`},
		{"weight given twice", append(two, "--queue-weight", "bulk=2", "--queue-weight", "bulk=3"), "gives queue bulk a second time"},
		{"reserve of an unknown queue", append(two, "--queue-reserve", "other=1"), `--queue-reserve ("other") names no queue`},
		{"reserve 0", append(two, "--queue-reserve", "bulk=0"), "must keep at least 1 slot"},
		{"reserves above concurrency", append(two, "--queue-reserve", "bulk=3", "--queue-reserve", "urgent=2"), "--queue-reserve: keeps 5 slots in all, more than --concurrency (4)"},
		{"reserves leave a queue nothing", append(two, "--queue-reserve", "bulk=4"), "queue urgent would never run"},
		{"--once", append(two, "--once"), "--once takes one message from one queue"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, nil, append(append([]string{"listen"}, tt.args...), "--", "true")...)
			if code != 2 {
				t.Errorf("exit code %d, want 2", code)
			}
			if !strings.Contains(stderr, tt.want) {
				t.Errorf("stderr = %q, want it to contain %q", stderr, tt.want)
			}
		})
	}
}

// listen serves two queues from one binary: each worker learns its message's queue, the
// metrics name each queue, and SIGTERM drains both.
func TestListenTwoQueuesEndToEnd(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	c := emu.Client()
	urgent := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	bulk := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	dir := t.TempDir()
	worker := filepath.Join(dir, "w.sh")
	os.WriteFile(worker, []byte("#!/bin/sh\necho \"$WATCHBOT_QUEUE_NAME $WATCHBOT_QUEUE_URL\" > "+dir+"/\"$MessageId\"\n"), 0o755)
	for _, q := range []testenv.Queue{urgent, bulk} {
		if _, err := c.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(q.URL), MessageBody: aws.String("job")}); err != nil {
			t.Fatal(err)
		}
	}
	p, out := listenBinary(t, emu, "--queue-url", urgent.URL, "--queue-url", bulk.URL, "--metrics", "emf", "--concurrency", "2", "--", worker)
	testenv.Eventually(t, "both messages ran", 30*time.Second, func() bool {
		entries, _ := os.ReadDir(dir)
		return len(entries) == 3
	}, out.String)
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	if code := p.Wait(t, 30*time.Second); code != 0 {
		t.Fatalf("exit code %d after a clean drain, want 0; output:\n%s", code, out)
	}
	var seen []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Name() == "w.sh" {
			continue
		}
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		seen = append(seen, strings.TrimSpace(string(b)))
	}
	slices.Sort(seen)
	want := []string{queueattr.NameFromURL(bulk.URL) + " " + bulk.URL, queueattr.NameFromURL(urgent.URL) + " " + urgent.URL}
	slices.Sort(want)
	if !slices.Equal(seen, want) {
		t.Errorf("workers saw %q, want %q", seen, want)
	}
	for _, q := range []testenv.Queue{urgent, bulk} {
		if !strings.Contains(out.String(), `"QueueName":"`+queueattr.NameFromURL(q.URL)+`"`) {
			t.Errorf("no metrics name queue %s; output:\n%s", queueattr.NameFromURL(q.URL), out)
		}
		if n := testenv.Depth(t, c, q.URL).Total(); n != 0 {
			t.Errorf("%d messages left on %s", n, queueattr.NameFromURL(q.URL))
		}
	}
}

// A queue that fails its startup check stops the start, exit 2, naming the queue; no queue
// receives anything.
func TestListenSeveralQueuesStartupFailure(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	c := emu.Client()
	good := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	noDLQ := emu.NewQueue(t, testenv.QueueOptions{})
	missing := good.URL + "-missing"
	tests := []struct {
		name string
		url  string
		want string
	}{
		{"missing", missing, "does not exist"},
		{"no redrive policy", noDLQ.URL, "queue " + queueattr.NameFromURL(noDLQ.URL) + ": the queue has no redrive policy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := c.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(good.URL), MessageBody: aws.String("untouched")}); err != nil {
				t.Fatal(err)
			}
			p, out := listenBinary(t, emu, "--queue-url", good.URL, "--queue-url", tt.url, "--", "true")
			if code := p.Wait(t, 60*time.Second); code != 2 {
				t.Errorf("exit code %d, want 2; output:\n%s", code, out)
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if last := lines[len(lines)-1]; !strings.Contains(last, tt.want) || !strings.Contains(last, queueattr.NameFromURL(tt.url)) {
				t.Errorf("last line %q, want it to name the queue and say %q", last, tt.want)
			}
			neverReceived(t, c, good.URL)
		})
	}
}
