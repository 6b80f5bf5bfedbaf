package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/internal/testing/testenv"
	"github.com/watchbot/watchbot/supervisor"
)

// invocation is one invocation as the aws-lambda-go handler (testdata/lambdahandler) saw it.
type invocation struct {
	PID         int               `json:"pid"`
	RequestID   string            `json:"requestId"`
	FunctionARN string            `json:"functionArn"`
	Deadline    time.Time         `json:"deadline"`
	TraceID     string            `json:"traceId"`
	Start       time.Time         `json:"start"`
	Event       events.SQSEvent   `json:"event"`
	Env         map[string]string `json:"env"`
}

// handlerRun is a listen --lambda run of the aws-lambda-go handler against the emulator.
type handlerRun struct {
	dir    string
	p      *testenv.Process
	stderr *testenv.Buffer
}

// listenLambda starts listen --lambda with the aws-lambda-go handler as the runtime.
func listenLambda(t *testing.T, emu *testenv.Emulator, args ...string) handlerRun {
	t.Helper()
	handler := testenv.Build(t, "./cmd/watchbot/testdata/lambdahandler")
	dir := t.TempDir()
	cmd := emu.Watchbot(t, append(append([]string{"listen", "--lambda"}, args...), "--", handler)...)
	cmd.Env = append(cmd.Env, "HANDLER_DIR="+dir)
	out := &testenv.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	return handlerRun{dir: dir, p: testenv.Spawn(t, cmd), stderr: out}
}

// invocations reads every invocation the handler's processes wrote, in start order.
func (h handlerRun) invocations(t *testing.T) []invocation {
	t.Helper()
	all := jsonLines[invocation](t, filepath.Join(h.dir, "invocations-*.jsonl"))
	slices.SortFunc(all, func(a, b invocation) int { return a.Start.Compare(b.Start) })
	return all
}

// jsonLines reads the JSON lines of the files matching pattern, each line one T.
func jsonLines[T any](t *testing.T, pattern string) []T {
	t.Helper()
	files, _ := filepath.Glob(pattern)
	var all []T
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 8<<20)
		for sc.Scan() {
			var v T
			if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			all = append(all, v)
		}
		f.Close()
	}
	return all
}

// runsOf returns, for each run of a record whose body starts with prefix, its receive count
// and the pid of the runtime that ran it.
func runsOf(invs []invocation, prefix string) (receives []string, pids []int) {
	for _, inv := range invs {
		for _, r := range inv.Event.Records {
			if strings.HasPrefix(r.Body, prefix) {
				receives = append(receives, r.Attributes["ApproximateReceiveCount"])
				pids = append(pids, inv.PID)
			}
		}
	}
	return receives, pids
}

func sendAttrs(t *testing.T, c *sqs.Client, url, body string, attrs map[string]sqstypes.MessageAttributeValue) {
	t.Helper()
	if _, err := c.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body), MessageAttributes: attrs}); err != nil {
		t.Fatal(err)
	}
}

// TestLambdaHandler runs an unmodified aws-lambda-go SQS handler under listen --lambda
// against the emulator: the event's fields, the Runtime API's headers and Lambda's
// variables; 40 messages on 2 runtimes in 2 processes; a partial batch; a handler error and
// an unknown itemIdentifier each failing their whole batch; a crash mid-invocation retried
// in a new runtime; an invocation three times the lease run once; and a SIGTERM
// mid-invocation that finishes it, deletes its message, runs the SIGTERM hook and exits 0.
func TestLambdaHandler(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	c := emu.Client()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	str := func(v string) sqstypes.MessageAttributeValue {
		return sqstypes.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	sendAttrs(t, c, q.URL, "ok fields 1", map[string]sqstypes.MessageAttributeValue{"tenant": str("acme"),
		"blob": {DataType: aws.String("Binary"), BinaryValue: []byte{0, 1, 0xfe}}})
	sendAttrs(t, c, q.URL, "ok fields 2", map[string]sqstypes.MessageAttributeValue{"n": {DataType: aws.String("Number"), StringValue: aws.String("42")}})
	sendAttrs(t, c, q.URL, "ok fields 3", map[string]sqstypes.MessageAttributeValue{"traceparent": str("00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01")})
	h := listenLambda(t, emu, "--queue-url", q.URL, "--concurrency", "2", "--max-job-duration", "30m", "--kill-grace", "1s",
		"--backoff-base", "1s", "--visibility-timeout", "2s", "--lambda-function-name", "resize", "--lambda-handler", "index.handler")
	empty := func(what string) {
		t.Helper()
		testenv.Eventually(t, what, 60*time.Second, func() bool { return testenv.Depth(t, c, q.URL).Total() == 0 }, h.stderr.String)
	}
	empty("the three messages to be handled")
	invs := h.invocations(t)
	checkLambdaFields(t, invs, q)

	var bodies []string
	for i := range 40 {
		bodies = append(bodies, "ok forty "+string(rune('a'+i%26)))
	}
	send(t, c, q.URL, bodies...)
	empty("the 40 messages to be handled")
	pids := map[int]bool{}
	for _, inv := range h.invocations(t) {
		pids[inv.PID] = true
	}
	if len(pids) != 2 {
		t.Errorf("the 45 first messages ran in %d processes, want the 2 runtimes'", len(pids))
	}

	send(t, c, q.URL, "ok partial", "fail-once partial", "error whole", "unknown whole")
	empty("the failures to be retried")
	send(t, c, q.URL, "sleep 6s lease")
	empty("the invocation three times the lease")
	checkLambdaRetries(t, h.invocations(t))

	send(t, c, q.URL, "crash")
	empty("the crash to be retried")
	receives, crashPIDs := runsOf(h.invocations(t), "crash")
	if !slices.Equal(receives, []string{"1", "2"}) || len(crashPIDs) == 2 && crashPIDs[0] == crashPIDs[1] {
		t.Errorf("crash: receive counts %v in processes %v, want 1 then 2 in a new runtime", receives, crashPIDs)
	}

	send(t, c, q.URL, "sleep 2s drain")
	testenv.Eventually(t, "the drain's invocation to start", 30*time.Second, func() bool {
		r, _ := runsOf(h.invocations(t), "sleep 2s drain")
		return len(r) == 1
	}, h.stderr.String)
	_ = h.p.Cmd.Process.Signal(syscall.SIGTERM)
	if code := h.p.Wait(t, 60*time.Second, h.stderr.String); code != 0 {
		t.Fatalf("exit %d after SIGTERM", code)
	}
	if n := testenv.Depth(t, c, q.URL).Total(); n != 0 {
		t.Errorf("%d messages left after the drain: the finished invocation's message was not deleted", n)
	}
	if hooks, _ := filepath.Glob(filepath.Join(h.dir, "sigterm-*")); len(hooks) != 2 {
		t.Errorf("%d runtimes ran their SIGTERM hook, want 2", len(hooks))
	}
	if n := testenv.Depth(t, c, q.DLQURL).Total(); n != 0 {
		t.Errorf("%d messages dead-lettered, want none", n)
	}
}

// checkLambdaFields checks the first three records, and the invocation around them, field
// by field, as Lambda would give them.
func checkLambdaFields(t *testing.T, invs []invocation, q testenv.Queue) {
	t.Helper()
	var recs []events.SQSMessage
	var inv invocation
	for _, i := range invs {
		for _, r := range i.Event.Records {
			if strings.HasPrefix(r.Body, "ok fields") {
				recs, inv = append(recs, r), i
			}
		}
	}
	if len(recs) != 3 {
		t.Fatalf("%d records of the three messages", len(recs))
	}
	slices.SortFunc(recs, func(a, b events.SQSMessage) int { return strings.Compare(a.Body, b.Body) })
	for _, r := range recs {
		for _, name := range []string{"ApproximateReceiveCount", "SentTimestamp", "SenderId", "ApproximateFirstReceiveTimestamp"} {
			if r.Attributes[name] == "" {
				t.Errorf("%s: no attribute %s in %v", r.Body, name, r.Attributes)
			}
		}
		if r.MessageId == "" || r.ReceiptHandle == "" || r.Md5OfBody == "" || r.EventSource != "aws:sqs" || r.EventSourceARN != q.ARN || r.AWSRegion == "" {
			t.Errorf("record %+v", r)
		}
	}
	if a := recs[0].MessageAttributes; a["tenant"].StringValue == nil || *a["tenant"].StringValue != "acme" || a["tenant"].DataType != "String" ||
		string(a["blob"].BinaryValue) != "\x00\x01\xfe" || a["blob"].DataType != "Binary" {
		t.Errorf("attributes of the first: %+v", a)
	}
	if a := recs[1].MessageAttributes["n"]; a.DataType != "Number" || a.StringValue == nil || *a.StringValue != "42" {
		t.Errorf("number attribute: %+v", a)
	}
	account := strings.Split(q.ARN, ":")[4]
	if want := "arn:aws:lambda:" + recs[0].AWSRegion + ":" + account + ":function:resize"; inv.FunctionARN != want {
		t.Errorf("function ARN %q, want %q", inv.FunctionARN, want)
	}
	if left := time.Until(inv.Deadline); left < 29*time.Minute || left > 30*time.Minute {
		t.Errorf("deadline %v away, want the 30m of --max-job-duration", left)
	}
	if inv.RequestID == "" {
		t.Error("no request id")
	}
	env := inv.Env
	for name, want := range map[string]string{"AWS_LAMBDA_FUNCTION_NAME": "resize", "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
		"AWS_LAMBDA_LOG_GROUP_NAME": "/aws/lambda/resize", "_HANDLER": "index.handler", "AWS_REGION": recs[0].AWSRegion} {
		if env[name] != want {
			t.Errorf("%s = %q, want %q", name, env[name], want)
		}
	}
	for _, name := range []string{"AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "AWS_LAMBDA_LOG_STREAM_NAME", "LAMBDA_TASK_ROOT"} {
		if env[name] == "" {
			t.Errorf("%s is not set", name)
		}
	}
	if !strings.HasPrefix(env["AWS_LAMBDA_RUNTIME_API"], "127.0.0.1:") {
		t.Errorf("AWS_LAMBDA_RUNTIME_API = %q, want loopback", env["AWS_LAMBDA_RUNTIME_API"])
	}
}

// checkLambdaRetries checks a partial batch (only the reported record runs again, with
// receive count 2), the whole-batch failures (every record of the failed invocation runs
// again), and the invocation three times the lease (once).
func checkLambdaRetries(t *testing.T, invs []invocation) {
	t.Helper()
	if r, _ := runsOf(invs, "fail-once partial"); !slices.Equal(r, []string{"1", "2"}) {
		t.Errorf("fail-once: receive counts %v, want 1 then 2", r)
	}
	if r, _ := runsOf(invs, "sleep 6s lease"); !slices.Equal(r, []string{"1"}) {
		t.Errorf("an invocation three times the lease: receive counts %v, want one run", r)
	}
	for _, word := range []string{"error whole", "unknown whole"} {
		if r, _ := runsOf(invs, word); len(r) != 2 || r[1] != "2" {
			t.Errorf("%s: receive counts %v, want 1 then 2", word, r)
		}
	}
	ran := map[string]int{}
	for _, inv := range invs {
		for _, r := range inv.Event.Records {
			ran[r.MessageId]++
		}
	}
	for _, inv := range invs {
		whole, partial := false, false
		for _, r := range inv.Event.Records {
			whole = whole || r.Attributes["ApproximateReceiveCount"] == "1" && (strings.HasPrefix(r.Body, "error") || strings.HasPrefix(r.Body, "unknown"))
			partial = partial || strings.HasPrefix(r.Body, "fail-once") && r.Attributes["ApproximateReceiveCount"] == "1"
		}
		for _, r := range inv.Event.Records {
			switch {
			case whole && ran[r.MessageId] < 2:
				t.Errorf("%q ran %d times, in a batch that failed as a whole", r.Body, ran[r.MessageId])
			case !whole && partial && r.Body == "ok partial" && ran[r.MessageId] != 1:
				t.Errorf("%q ran %d times beside a partial failure, want once", r.Body, ran[r.MessageId])
			}
		}
	}
}

// TestLambdaRuntimes: --concurrency 4 runs 4 invocations at once; an invocation past
// --max-job-duration has its runtime stopped and its record retried in a new one.
func TestLambdaRuntimes(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	c := emu.Client()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	h := listenLambda(t, emu, "--queue-url", q.URL, "--concurrency", "4", "--batch-size", "1", "--max-job-duration", "2s",
		"--kill-grace", "500ms", "--backoff-base", "1s")
	send(t, c, q.URL, "sleep 1s a", "sleep 1s b", "sleep 1s c", "sleep 1s d")
	testenv.Eventually(t, "the four sleeps", 60*time.Second, func() bool { return testenv.Depth(t, c, q.URL).Total() == 0 }, h.stderr.String)
	invs := h.invocations(t)
	pids := map[int]bool{}
	for _, inv := range invs {
		pids[inv.PID] = true
	}
	if len(invs) != 4 || len(pids) != 4 || invs[3].Start.Sub(invs[0].Start) > 900*time.Millisecond {
		t.Errorf("%d invocations in %d runtimes, the last starting %v after the first; want 4 at once", len(invs), len(pids), invs[len(invs)-1].Start.Sub(invs[0].Start))
	}

	send(t, c, q.URL, "timeout")
	testenv.Eventually(t, "the timeout to be retried", 60*time.Second, func() bool { return testenv.Depth(t, c, q.URL).Total() == 0 }, h.stderr.String)
	receives, runtimes := runsOf(h.invocations(t), "timeout")
	if !slices.Equal(receives, []string{"1", "2"}) || len(runtimes) == 2 && runtimes[0] == runtimes[1] {
		t.Errorf("timeout: receive counts %v in processes %v, want 1 then 2 in a new runtime", receives, runtimes)
	}
	_ = h.p.Cmd.Process.Signal(syscall.SIGTERM)
	if code := h.p.Wait(t, 60*time.Second, h.stderr.String); code != 0 {
		t.Fatalf("exit %d after SIGTERM", code)
	}
}

// TestLambdaFIFO: on a FIFO queue a failed record holds its group's successors, which run
// again after it, in order; another group goes on.
func TestLambdaFIFO(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	c := emu.Client()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3, FIFO: true})
	bodies := []string{"ok g1 first", "fail-once g1 second", "ok g1 third", "ok g2 only"}
	if _, err := testenv.Send(t.Context(), c, q.URL, bodies, func(i int) string { return "g" + string(rune('1'+i/3)) }); err != nil {
		t.Fatal(err)
	}
	h := listenLambda(t, emu, "--queue-url", q.URL, "--backoff-base", "1s", "--kill-grace", "500ms")
	testenv.Eventually(t, "the group to be handled", 60*time.Second, func() bool { return testenv.Depth(t, c, q.URL).Total() == 0 }, h.stderr.String)
	var g1 []string
	for _, inv := range h.invocations(t) {
		for _, r := range inv.Event.Records {
			if r.Attributes["MessageGroupId"] == "g1" {
				g1 = append(g1, strings.Fields(r.Body)[2]+"/"+r.Attributes["ApproximateReceiveCount"])
			}
		}
	}
	// The third may run beside the failed second (and then again), or wait for it; either
	// way its last run follows the second's retry.
	last := func(name string) int {
		at := -1
		for i, s := range g1 {
			if strings.HasPrefix(s, name+"/") {
				at = i
			}
		}
		return at
	}
	if !slices.Contains(g1, "second/2") || !(last("first") < last("second") && last("second") < last("third")) {
		t.Errorf("group g1 ran %v, want first, then second twice, with third's last run after", g1)
	}
	if r, _ := runsOf(h.invocations(t), "ok g2"); len(r) != 1 {
		t.Errorf("group g2 ran %d times, want once", len(r))
	}
	_ = h.p.Cmd.Process.Signal(syscall.SIGTERM)
	h.p.Wait(t, 60*time.Second, h.stderr.String)
}

// TestLambdaInitFailure: a runtime that exits before asking for work is restarted with a
// backoff and logged, and no message is received meanwhile; --lambda with --http-worker is
// refused, exit 2 naming --lambda.
func TestLambdaInitFailure(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	c := emu.Client()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	code, _, errOut := runCLIEnv(t, emu, "listen", "--queue-url", q.URL, "--lambda", "--http-worker", "http://127.0.0.1:1/", "--", "true")
	if code != 2 || !strings.Contains(errOut, "--lambda") {
		t.Errorf("--lambda with --http-worker: exit %d, %q; want 2 naming --lambda", code, errOut)
	}

	send(t, c, q.URL, "ok never received")
	cmd := emu.Watchbot(t, "listen", "--lambda", "--queue-url", q.URL, "--backoff-base", "100ms", "--", "false")
	out := &testenv.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	p := testenv.Spawn(t, cmd)
	testenv.Eventually(t, "three failed inits", 30*time.Second, func() bool {
		return testenv.Logged(out.String(), "level", "ERROR", "runtime", "0", "attempt", "3", "error", "*")
	}, out.String)
	if d := testenv.Depth(t, c, q.URL); d.Visible != 1 || d.InFlight != 0 || listening(out.String()) {
		t.Errorf("depth %+v, listening %v: want the message untouched and no receive", d, listening(out.String()))
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	p.Wait(t, 30*time.Second, out.String)
}

// TestLambdaReadiness: /readyz is not ready while the runtime that replaces a crashed one
// fails its init, and ready again once one starts, which then runs the crashed invocation's
// message.
func TestLambdaReadiness(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	c := emu.Client()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	addr := freeAddr(t)
	h := listenLambda(t, emu, "--queue-url", q.URL, "--concurrency", "1", "--http-addr", addr, "--backoff-base", "100ms", "--backoff-max", "500ms")
	ready := func() bool { code, _ := probe(addr, "/readyz"); return code == 200 }
	testenv.Eventually(t, "readiness", 30*time.Second, ready, h.stderr.String)
	if err := os.WriteFile(filepath.Join(h.dir, "fail-init"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	send(t, c, q.URL, "crash")
	testenv.Eventually(t, "not ready while the new runtime fails its init", 30*time.Second, func() bool {
		code, body := probe(addr, "/readyz")
		return code == 503 && body["reason"] != ""
	}, h.stderr.String)
	if err := os.Remove(filepath.Join(h.dir, "fail-init")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "ready again, the message done", 30*time.Second, func() bool {
		return ready() && testenv.Depth(t, c, q.URL).Total() == 0
	}, h.stderr.String)
	if receives, _ := runsOf(h.invocations(t), "crash"); !slices.Equal(receives, []string{"1", "2"}) {
		t.Errorf("crash: receive counts %v, want 1 then 2", receives)
	}
	_ = h.p.Cmd.Process.Signal(syscall.SIGTERM)
	h.p.Wait(t, 30*time.Second, h.stderr.String)
}

// TestTryLambda: try --lambda invokes the runtime once with the SQS event of a batch, and
// prints each record's decision and the handler's answer.
func TestTryLambda(t *testing.T) {
	t.Parallel()
	handler := testenv.Build(t, "./cmd/watchbot/testdata/lambdahandler")
	cmd := exec.Command(testenv.Binary(t), "try", "--lambda", "--batch", "--json", "--", handler)
	cmd.Env = testenv.CleanEnv(t, "HANDLER_DIR="+t.TempDir())
	cmd.Stdin = strings.NewReader("ok one\nfail-once two\n")
	out, err := cmd.Output()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 11 {
		t.Fatalf("exit %v, want 11 (a retry); output %s", err, out)
	}
	var got struct{ Decisions []supervisor.Decision }
	if err := json.Unmarshal(out, &got); err != nil || len(got.Decisions) != 2 {
		t.Fatalf("decisions %s: %v", out, err)
	}
	ok, failed := got.Decisions[0], got.Decisions[1]
	if ok.Action != "delete" || failed.Action != "retry" || !strings.Contains(failed.Answer, `"itemIdentifier":"`+failed.MessageID+`"`) {
		t.Errorf("decisions %+v, want the first deleted and the second retried, as the answer %q says", got.Decisions, failed.Answer)
	}
}
