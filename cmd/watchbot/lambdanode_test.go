package main

import (
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// nodeRecord is one record as the Powertools handler (testdata/lambdanode) saw it.
type nodeRecord struct {
	PID            int    `json:"pid"`
	MessageID      string `json:"messageId"`
	Body           string `json:"body"`
	Receives       string `json:"receives"`
	EventSource    string `json:"eventSource"`
	EventSourceARN string `json:"eventSourceARN"`
}

// TestLambdaNode runs an unmodified SQS handler on @aws-lambda-powertools/batch's
// processPartialResponse under the Node.js runtime client aws-lambda-ric, its native addon
// built (ricNode): the records' fields; a partial batch, whose failed record
// alone runs again with receive count 2; a batch whose every record fails, which the client
// reports as an invocation error and which runs again whole; the rest deleted.
func TestLambdaNode(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	c := emu.Client()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	root, err := testenv.Root()
	if err != nil {
		t.Fatal(err)
	}
	handlerDir := filepath.Join(root, "cmd", "watchbot", "testdata", "lambdanode")
	send(t, c, q.URL, "ok node 1", "fail-once node 2", "ok node 3")

	dir := t.TempDir()
	node, standIn := ricNode(t, root, handlerDir)
	client := append(node, filepath.Join(root, "node_modules", "aws-lambda-ric", "bin", "index.mjs"), "index.handler")
	cmd := emu.Watchbot(t, append([]string{"listen", "--lambda", "--queue-url", q.URL, "--backoff-base", "1s", "--kill-grace", "1s", "--"}, client...)...)
	cmd.Dir = handlerDir // the runtime client loads the handler from its working directory
	cmd.Env = append(cmd.Env, "HANDLER_DIR="+dir)
	if standIn {
		cmd.Env = append(cmd.Env, "AWS_LAMBDA_NODEJS_USE_ALTERNATIVE_CLIENT_1=true")
	}
	out := &testenv.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	p := testenv.Spawn(t, cmd)
	empty := func(what string) {
		t.Helper()
		testenv.Eventually(t, what, 60*time.Second, func() bool { return testenv.Depth(t, c, q.URL).Total() == 0 }, out.String)
	}
	empty("the three messages to be handled")
	send(t, c, q.URL, "fail-once alone")
	empty("the batch that fails whole to be retried")

	runs := map[string][]string{}
	ids := map[string]map[string]bool{}
	for _, r := range jsonLines[nodeRecord](t, filepath.Join(dir, "records-*.jsonl")) {
		if r.MessageID == "" || r.EventSource != "aws:sqs" || r.EventSourceARN != q.ARN {
			t.Errorf("record %+v, want a message id, event source aws:sqs and the queue's ARN %s", r, q.ARN)
		}
		runs[r.Body] = append(runs[r.Body], r.Receives)
		if ids[r.Body] == nil {
			ids[r.Body] = map[string]bool{}
		}
		ids[r.Body][r.MessageID] = true
	}
	for body, want := range map[string][]string{"ok node 1": {"1"}, "ok node 3": {"1"}, "fail-once node 2": {"1", "2"}, "fail-once alone": {"1", "2"}} {
		if !slices.Equal(runs[body], want) || len(ids[body]) != 1 {
			t.Errorf("%q: receive counts %v under %d message ids, want %v under one", body, runs[body], len(ids[body]), want)
		}
	}
	if !testenv.Logged(out.String(), "level", "WARN", "error_type", "FullBatchFailureError") {
		t.Error("no invocation error of type FullBatchFailureError logged for the batch whose every record failed")
	}
	if n := testenv.Depth(t, c, q.DLQURL).Total(); n != 0 {
		t.Errorf("%d messages dead-lettered, want none", n)
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	if code := p.Wait(t, 30*time.Second, out.String); code != 0 {
		t.Fatalf("exit %d after SIGTERM", code)
	}
}

// ricNode returns the start of the command that runs aws-lambda-ric: node alone when its
// native addon is built (scripts/ric-addon, which make test runs), so the client runs as in
// Lambda's Node.js images; otherwise, with standIn, node with a stand-in for the addon
// preloaded (testdata/lambdanode/rapid-client.cjs), which the client then needs on its
// alternative path. Under CI=true the addon must be there.
func ricNode(t *testing.T, root, handlerDir string) (node []string, standIn bool) {
	t.Helper()
	addon := filepath.Join(root, "node_modules", "aws-lambda-ric", "dist", "rapid-client.node")
	if _, err := os.Stat(addon); err == nil {
		return []string{"node"}, false
	} else if os.Getenv("CI") == "true" {
		t.Fatalf("aws-lambda-ric's native addon is missing (%v): make test builds it with scripts/ric-addon", err)
	}
	t.Logf("aws-lambda-ric's native addon is not built (scripts/ric-addon): its stand-in runs instead")
	return []string{"node", "--require", filepath.Join(handlerDir, "rapid-client.cjs")}, true
}
