package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/dedupe"
	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/internal/testing/testenv"
	"github.com/watchbot/watchbot/supervisor"
)

// The in-process CLI tests here do not run in parallel: urfave/cli shares a global help flag.

func TestListenDedupeFlags(t *testing.T) {
	base := []string{"--queue-url", "https://sqs.us-east-1.amazonaws.com/1/q"}
	tests := []struct {
		name string
		env  string // WATCHBOT_DEDUPE_TABLE
		args []string
		want supervisor.DedupeConfig
	}{
		{"off by default", "", nil, supervisor.DedupeConfig{Key: "message-id"}},
		{"a table", "", []string{"--dedupe-table", "jobs-dedupe"}, supervisor.DedupeConfig{Table: "jobs-dedupe", Key: "message-id"}},
		{"an ARN names the table", "", []string{"--dedupe-table", "arn:aws:dynamodb:eu-west-1:123456789012:table/jobs-dedupe"},
			supervisor.DedupeConfig{Table: "jobs-dedupe", Key: "message-id"}},
		{"from the environment", "env-table", nil, supervisor.DedupeConfig{Table: "env-table", Key: "message-id"}},
		{"a key attribute and a TTL", "", []string{"--dedupe-table", "t1x", "--dedupe-key", "attr:idempotency-key", "--dedupe-ttl", "336h"},
			supervisor.DedupeConfig{Table: "t1x", Key: "attr:idempotency-key", TTL: 14 * 24 * time.Hour}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("WATCHBOT_DEDUPE_TABLE", tt.env)
			cfg, _, err := parseListen(t, append(append(slices.Clone(base), tt.args...), "--", "true")...)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Dedupe != tt.want {
				t.Errorf("Dedupe = %+v, want %+v", cfg.Dedupe, tt.want)
			}
		})
	}
}

func TestListenDedupeBadFlagValues(t *testing.T) {
	base := []string{"--queue-url", "https://sqs.us-east-1.amazonaws.com/1/q"}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"a bad key", []string{"--dedupe-table", "t1x", "--dedupe-key", "body"}, `--dedupe-key: ("body") must be message-id or attr:NAME`},
		{"an attribute without a name", []string{"--dedupe-table", "t1x", "--dedupe-key", "attr:"}, `--dedupe-key: ("attr:"): "" is not a message attribute name`},
		{"a TTL too short", []string{"--dedupe-table", "t1x", "--dedupe-ttl", "30s"}, "--dedupe-ttl (30s) must be at least 1m0s"},
		{"a bad table name", []string{"--dedupe-table", "a b"}, `--dedupe-table: "a b" is neither a table name`},
		{"an ARN of something else", []string{"--dedupe-table", "arn:aws:sqs:us-east-1:1:q"}, "--dedupe-table: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, nil, append(append(append([]string{"listen"}, base...), tt.args...), "--", "true")...)
			if code != 2 || !strings.Contains(stderr, tt.want) || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
				t.Errorf("exit %d, stderr %q; want 2 and one line containing %q", code, stderr, tt.want)
			}
		})
	}
}

// dedupeEnv returns the SQS emulator with a queue, and the DynamoDB emulator with a dedupe
// table.
func dedupeEnv(t *testing.T) (*testenv.Emulator, testenv.Queue, *testenv.Dynamo, string) {
	t.Helper()
	emu := testenv.SQS(t)
	dyn := testenv.DynamoDB(t)
	return emu, emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 5}), dyn, dyn.NewTable(t, dedupe.TableDefinition)
}

// listenDedupe starts `watchbot listen ARGS` against both emulators.
func listenDedupe(t *testing.T, emu *testenv.Emulator, dyn *testenv.Dynamo, args ...string) (*testenv.Process, *testenv.Buffer) {
	t.Helper()
	cmd := emu.Watchbot(t, append([]string{"listen"}, args...)...)
	cmd.Env = append(cmd.Env, dyn.Env()...)
	out := &testenv.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	return testenv.Spawn(t, cmd), out
}

func TestListenDedupeStartupFailures(t *testing.T) {
	t.Parallel()
	emu, q, dyn, _ := dedupeEnv(t)
	wrongKey := dyn.NewTable(t, func(name string) *dynamodb.CreateTableInput {
		def := dedupe.TableDefinition(name)
		def.AttributeDefinitions[0].AttributeName = aws.String("id")
		def.KeySchema[0].AttributeName = aws.String("id")
		return def
	})
	c := emu.Client()
	tests := []struct {
		name, table, want string
	}{
		{"no such table", "no-such-table", "--dedupe-table: dedupe describe in table no-such-table: table not found"},
		{"a table keyed otherwise", wrongKey, `--dedupe-table: dedupe table ` + wrongKey + `: the table's key must be "key" alone`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := c.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(q.URL), MessageBody: aws.String("untouched")}); err != nil {
				t.Fatal(err)
			}
			p, out := listenDedupe(t, emu, dyn, "--queue-url", q.URL, "--dedupe-table", tt.table, "--", "true")
			if code := p.Wait(t, 60*time.Second); code != 2 {
				t.Errorf("exit code %d, want 2; output:\n%s", code, out)
			}
			if !strings.Contains(out.String(), "watchbot: "+tt.want) {
				t.Errorf("output lacks %q:\n%s", tt.want, out)
			}
			neverReceived(t, c, q.URL)
		})
	}
}

// Two watchbots on one queue, every job sent twice with different message ids and the same
// key attribute: each key runs once, as the worker's own record shows.
func TestListenDedupeTwoWatchbots(t *testing.T) {
	t.Parallel()
	emu, q, dyn, table := dedupeEnv(t)
	dir := t.TempDir()
	worker := filepath.Join(dir, "w.sh")
	if err := os.WriteFile(worker, []byte("#!/bin/sh\necho \"$WATCHBOT_ATTR_IDEMPOTENCY_KEY\" >> "+dir+"/ran\nsleep 0.2\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var procs []*testenv.Process
	var outs []*testenv.Buffer
	for range 2 {
		p, out := listenDedupe(t, emu, dyn, "--queue-url", q.URL, "--concurrency", "4", "--dedupe-table", table,
			"--dedupe-key", "attr:idempotency-key", "--metrics", "emf", "--", worker)
		procs, outs = append(procs, p), append(outs, out)
	}
	logs := func() string { return outs[0].String() + outs[1].String() }
	c := emu.Client()
	const keys = 10
	for send := range 2 {
		for k := range keys {
			sendKeyed(t, c, q.URL, fmt.Sprintf("job %d (%d)", k, send), fmt.Sprintf("order-%d", k))
		}
	}
	testenv.Eventually(t, "every job done and the queue empty", 60*time.Second, func() bool {
		data, _ := os.ReadFile(filepath.Join(dir, "ran"))
		return strings.Count(string(data), "\n") >= keys && testenv.Depth(t, c, q.URL).Total() == 0
	}, logs)
	for _, code := range testenv.Stop(t, 30*time.Second, logs, procs...) {
		if code != 0 {
			t.Errorf("exit code %d after SIGTERM, want 0", code)
		}
	}
	data, _ := os.ReadFile(filepath.Join(dir, "ran"))
	ran := strings.Fields(string(data))
	slices.Sort(ran)
	var want []string
	for k := range keys {
		want = append(want, fmt.Sprintf("order-%d", k))
	}
	slices.Sort(want)
	if !slices.Equal(ran, want) {
		t.Errorf("ran %v, want each of %v once", ran, want)
	}
	if n := strings.Count(logs(), `"DuplicatesSkipped"`); n == 0 {
		t.Errorf("no DuplicatesSkipped metric published:\n%s", logs())
	}
}

// One listen on two queues shares the dedupe table between them: each job sent twice to each
// queue with the same key runs once on each queue, the table keeping the queues' keys apart.
func TestListenDedupeSeveralQueues(t *testing.T) {
	t.Parallel()
	emu, first, dyn, table := dedupeEnv(t)
	second := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 5})
	dir := t.TempDir()
	worker := filepath.Join(dir, "w.sh")
	if err := os.WriteFile(worker, []byte("#!/bin/sh\necho \"$WATCHBOT_QUEUE_NAME/$WATCHBOT_ATTR_IDEMPOTENCY_KEY\" >> "+dir+"/ran\nsleep 0.2\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	p, out := listenDedupe(t, emu, dyn, "--queue-url", first.URL, "--queue-url", second.URL, "--concurrency", "4", "--dedupe-table", table,
		"--dedupe-key", "attr:idempotency-key", "--", worker)
	c := emu.Client()
	const keys = 5
	var want []string
	for _, q := range []testenv.Queue{first, second} {
		for send := range 2 {
			for k := range keys {
				sendKeyed(t, c, q.URL, fmt.Sprintf("job %d (%d)", k, send), fmt.Sprintf("order-%d", k))
				if send == 0 {
					want = append(want, fmt.Sprintf("%s/order-%d", queueattr.NameFromURL(q.URL), k))
				}
			}
		}
	}
	testenv.Eventually(t, "every job done and both queues empty", 60*time.Second, func() bool {
		data, _ := os.ReadFile(filepath.Join(dir, "ran"))
		return strings.Count(string(data), "\n") >= len(want) && testenv.Depth(t, c, first.URL).Total() == 0 && testenv.Depth(t, c, second.URL).Total() == 0
	}, out.String)
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	if code := p.Wait(t, 30*time.Second, out.String); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
	data, _ := os.ReadFile(filepath.Join(dir, "ran"))
	ran := strings.Fields(string(data))
	slices.Sort(ran)
	slices.Sort(want)
	if !slices.Equal(ran, want) {
		t.Errorf("ran %v, want each key once on each queue: %v", ran, want)
	}
}

// sendKeyed sends body to the queue at url with key as its idempotency-key attribute.
func sendKeyed(t *testing.T, c *sqs.Client, url, body, key string) {
	t.Helper()
	_, err := c.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body),
		MessageAttributes: map[string]sqstypes.MessageAttributeValue{"idempotency-key": {DataType: aws.String("String"), StringValue: aws.String(key)}}})
	if err != nil {
		t.Fatal(err)
	}
}
