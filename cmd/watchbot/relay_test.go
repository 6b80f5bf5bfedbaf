package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/watchbot/watchbot/dedupe"
	"github.com/watchbot/watchbot/internal/testing/fakesqs"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// relayLimit is SQS's 12 h in-flight limit scaled down for the binaries (WATCHBOT_SQS_MAX_IN_FLIGHT)
// and for fakesqs, which enforces it as SQS does; relayJob is a job five times longer.
const (
	relayLimit = 2 * time.Second
	relayJob   = 5 * relayLimit
)

// relayRig is a fakesqs queue served over HTTP with the limit scaled down, a dedupe table on
// the DynamoDB emulator, and a worker that records each run's start and end in a file.
type relayRig struct {
	t     *testing.T
	fake  *fakesqs.Server
	emu   *testenv.Emulator
	queue testenv.Queue
	dyn   *testenv.Dynamo
	table string
	dir   string
	// worker sleeps relayJob for a body starting with "long", else a moment: the command
	// after --, or with httpWorker the application at that URL.
	worker     string
	httpWorker string
	// lambda, when set, is a Lambda runtime (testdata/lambdahandler) that listen --lambda
	// runs instead: it sleeps for a body "sleep D" and records each invocation in dir.
	lambda string
	outs   []*testenv.Buffer
}

func newRelayRig(t *testing.T, o testenv.QueueOptions) *relayRig {
	t.Helper()
	fake := fakesqs.New(fakesqs.InFlightLimit(relayLimit))
	endpoint, closeFn, err := fake.Listen()
	if err != nil {
		t.Fatalf("fakesqs: %v", err)
	}
	t.Cleanup(func() { _ = closeFn() })
	r := &relayRig{t: t, fake: fake, emu: &testenv.Emulator{Endpoint: endpoint}, dyn: testenv.DynamoDB(t), dir: t.TempDir()}
	r.queue = r.emu.NewQueue(t, o)
	r.table = r.dyn.NewTable(t, dedupe.TableDefinition)
	r.worker = filepath.Join(r.dir, "w.sh")
	script := "#!/bin/sh\nbody=$(cat \"$WATCHBOT_MESSAGE_FILE\")\necho \"start $body\" >> " + r.dir + "/runs\n" +
		"case $body in long*) sleep " + strconv.Itoa(int(relayJob.Seconds())) + " ;; *) sleep 0.2 ;; esac\necho \"end $body\" >> " + r.dir + "/runs\n"
	if err := os.WriteFile(r.worker, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return r
}

// listen starts a watchbot with the scaled limit, the dedupe table unless noTable, and args.
func (r *relayRig) listen(t *testing.T, noTable bool, args ...string) *testenv.Process {
	t.Helper()
	base := []string{"listen", "--queue-url", r.queue.URL, "--visibility-timeout", "2s", "--heartbeat-interval", "1s", "--kill-grace", "0s",
		"--wait-time", "1s", "--metrics", "emf"}
	if !noTable {
		base = append(base, "--dedupe-table", r.table)
	}
	worker := []string{"--", r.worker}
	switch {
	case r.httpWorker != "":
		worker = []string{"--http-worker", r.httpWorker, "--http-timeout", "1m"}
	case r.lambda != "":
		worker = []string{"--lambda", "--", r.lambda}
	}
	cmd := r.emu.Watchbot(t, append(append(base, args...), worker...)...)
	cmd.Env = append(cmd.Env, r.dyn.Env()...)
	cmd.Env = append(cmd.Env, "HANDLER_DIR="+r.dir)
	cmd.Env = append(cmd.Env, "WATCHBOT_SQS_MAX_IN_FLIGHT="+relayLimit.String())
	out := &testenv.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	r.outs = append(r.outs, out)
	return testenv.Spawn(t, cmd)
}

func (r *relayRig) logs() string {
	var b strings.Builder
	for _, o := range r.outs {
		b.WriteString(o.String())
	}
	return b.String()
}

// runs returns the worker's record, a line per start and end.
func (r *relayRig) runs() []string {
	data, _ := os.ReadFile(filepath.Join(r.dir, "runs"))
	return strings.Split(strings.TrimSpace(string(data)), "\n")
}

func (r *relayRig) count(line string) int {
	if body, ok := strings.CutPrefix(line, "start "); ok && r.lambda != "" {
		return r.invoked(body)
	}
	n := 0
	for _, l := range r.runs() {
		if l == line {
			n++
		}
	}
	return n
}

// invoked counts the Lambda runtime's invocations of a record with body.
func (r *relayRig) invoked(body string) int {
	n := 0
	for _, inv := range jsonLines[invocation](r.t, filepath.Join(r.dir, "invocations-*.jsonl")) {
		for _, rec := range inv.Event.Records {
			if rec.Body == body {
				n++
			}
		}
	}
	return n
}

func (r *relayRig) send(t *testing.T, bodies ...string) {
	t.Helper()
	for _, b := range bodies {
		in := &sqs.SendMessageInput{QueueUrl: aws.String(r.queue.URL), MessageBody: aws.String(b)}
		if strings.HasSuffix(r.queue.URL, ".fifo") {
			in.MessageGroupId, in.MessageDeduplicationId = aws.String("g"), aws.String(b)
		}
		if _, err := r.emu.Client().SendMessage(t.Context(), in); err != nil {
			t.Fatal(err)
		}
	}
}

// serveWorker serves the worker as an HTTP application, which listen's --http-worker posts
// each message to, instead of the command.
func (r *relayRig) serveWorker(t *testing.T) {
	t.Helper()
	record := func(line string) {
		f, err := os.OpenFile(filepath.Join(r.dir, "runs"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			_, _ = f.WriteString(line + "\n")
			_ = f.Close()
		}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		body := string(b)
		record("start " + body)
		if strings.HasPrefix(body, "long") {
			time.Sleep(relayJob)
		}
		record("end " + body)
	}))
	t.Cleanup(srv.Close)
	r.httpWorker = srv.URL
}

// done reports that the queue is empty.
func (r *relayRig) done() bool { return len(r.fake.Messages(r.queue.URL)) == 0 }

// relayed reports whether a relay was logged: a record with the owner and the receive count.
func (r *relayRig) relayed() bool {
	return testenv.Logged(r.logs(), "level", "INFO", "owner", "*", "receive_count", "*")
}

// Two watchbots on one queue, a job five times SQS's in-flight limit: it runs once, to the
// end; every time its message comes back, whichever watchbot receives it relays it to the
// owner; the message is deleted at the end and nothing is dead-lettered. On a FIFO queue the
// message behind it in its group starts only after it ended. An HTTP worker's request and a
// Lambda runtime's invocation go on the same way.
func TestListenRelaysALongJob(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name       string
		fifo, http bool
		lambda     bool
	}{{"standard", false, false, false}, {"FIFO", true, false, false}, {"HTTP worker", false, true, false}, {"Lambda runtime", false, false, true}} {
		fifo := tt.fifo
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := newRelayRig(t, testenv.QueueOptions{MaxReceiveCount: 20, FIFO: fifo})
			long := "long-1"
			switch {
			case tt.http:
				r.serveWorker(t)
			case tt.lambda:
				r.lambda, long = testenv.Build(t, "./cmd/watchbot/testdata/lambdahandler"), "sleep "+relayJob.String()
			}
			procs := []*testenv.Process{r.listen(t, false, "--concurrency", "1", "--max-attempts", "3", "--max-job-duration", "12s")}
			procs = append(procs, r.listen(t, false, "--concurrency", "1", "--max-attempts", "3", "--max-job-duration", "12s"))
			r.send(t, long)
			if fifo {
				r.send(t, "short-2")
			}
			testenv.Eventually(t, "the queue empty", relayJob+20*time.Second, r.done, r.logs)
			// A Lambda runtime records its invocations only: the message deleted is its end.
			if n := r.count("start " + long); n != 1 || !tt.lambda && r.count("end "+long) != 1 {
				t.Errorf("the long job started %d times, want once, to its end: %v", n, r.runs())
			}
			if fifo && strings.Join(r.runs(), ",") != "start long-1,end long-1,start short-2,end short-2" {
				t.Errorf("runs %v: the group's second message ran before its head ended", r.runs())
			}
			if dlq := r.fake.Messages(r.queue.DLQURL); len(dlq) != 0 {
				t.Errorf("the dead-letter queue holds %d messages, want none", len(dlq))
			}
			if !r.relayed() {
				t.Errorf("no relay logged:\n%s", r.logs())
			}
			for _, code := range testenv.Stop(t, 20*time.Second, r.logs, procs...) {
				if code != 0 {
					t.Errorf("exit code %d after SIGTERM, want 0", code)
				}
			}
			// The job passes the limit at least four times, and a relay's receipt at most once a
			// second: the scaled limit leaves a relayed receipt a second before the next (relayMargin).
			if n := emfSum(t, r.logs(), "Relays"); n < float64(relayJob/relayLimit-1) || n > relayJob.Seconds() {
				t.Errorf("Relays published %v in all, want one for each return of the message, %d to %v:\n%s", n, relayJob/relayLimit-1, relayJob.Seconds(), r.logs())
			}
		})
	}
}

// The owner SIGKILLed mid-job: its claim lapses, and the job runs once more, to the end, on
// the other watchbot; never a third time.
func TestListenRelayOwnerKilled(t *testing.T) {
	t.Parallel()
	r := newRelayRig(t, testenv.QueueOptions{MaxReceiveCount: 20})
	owner := r.listen(t, false, "--concurrency", "1")
	r.send(t, "long-1")
	testenv.Eventually(t, "the job to start", 20*time.Second, func() bool { return r.count("start long-1") == 1 }, r.logs)
	other := r.listen(t, false, "--concurrency", "1")
	time.Sleep(relayLimit + time.Second) // past the first limit: relayed to the owner
	_ = owner.Cmd.Process.Signal(syscall.SIGKILL)
	testenv.Eventually(t, "the queue empty", 2*relayJob+20*time.Second, r.done, r.logs)
	time.Sleep(2 * relayLimit) // a third run would start by now
	if n := r.count("start long-1"); n != 2 || r.count("end long-1") != 1 {
		t.Errorf("the job started %d times, want twice: once on the owner, once after it died, to its end: %v", n, r.runs())
	}
	if dlq := r.fake.Messages(r.queue.DLQURL); len(dlq) != 0 {
		t.Errorf("the dead-letter queue holds %d messages, want none", len(dlq))
	}
	testenv.Stop(t, 20*time.Second, r.logs, other)
}

// One watchbot, its one slot busy with the job as it passes the limit: it receives nothing
// while the slot is busy (no read-ahead before a run has ended), so the message waits in the
// queue, visible, until the job ends; received as the slot frees (taken by the job as it
// settles, or found completed), it is deleted without a second run. Meanwhile /metrics gives
// the job's age, and watchbot status shows it past the limit, with its owner, from the dedupe
// table.
func TestListenRelayEverySlotBusy(t *testing.T) {
	t.Parallel()
	r := newRelayRig(t, testenv.QueueOptions{MaxReceiveCount: 20})
	addr := freeAddr(t)
	p := r.listen(t, false, "--concurrency", "1", "--http-addr", addr)
	r.send(t, "long-1")
	testenv.Eventually(t, "the job to run past the limit", 4*relayLimit+20*time.Second, func() bool {
		return r.count("start long-1") == 1 && len(r.longJobs(t)) == 1
	}, r.logs)
	if age := value(t, scrape(t, addr), "watchbot_oldest_job_age_seconds"); age < relayLimit.Seconds() {
		t.Errorf("watchbot_oldest_job_age_seconds = %v while the job runs past the %v limit, want its age", age, relayLimit)
	}
	if j := r.longJobs(t)[0]; !strings.Contains(j.Owner, "/"+j.MessageID+"/") || j.Key != j.MessageID {
		t.Errorf("status shows %+v, want the job's message id as its key and in its owner", j)
	}
	testenv.Eventually(t, "the queue empty", relayJob+20*time.Second, r.done, r.logs)
	if n := r.count("start long-1"); n != 1 {
		t.Errorf("the job started %d times, want once: %v", n, r.runs())
	}
	if jobs := r.longJobs(t); len(jobs) != 0 {
		t.Errorf("status shows %+v once the job ended, want none", jobs)
	}
	if age := value(t, scrape(t, addr), "watchbot_oldest_job_age_seconds"); age != 0 {
		t.Errorf("watchbot_oldest_job_age_seconds = %v once the job ended, want 0", age)
	}
	testenv.Stop(t, 20*time.Second, r.logs, p)
}

// emfSum sums metric name over the EMF documents in logs.
func emfSum(t *testing.T, logs, name string) float64 {
	t.Helper()
	sum := 0.0
	for _, line := range strings.Split(logs, "\n") {
		if !strings.Contains(line, `"_aws"`) {
			continue
		}
		var doc map[string]any
		if err := json.Unmarshal([]byte(line), &doc); err != nil {
			t.Fatalf("EMF line is not JSON: %v\n%s", err, line)
		}
		if v, ok := doc[name].(float64); ok {
			sum += v
		}
	}
	return sum
}

// longJobs runs watchbot status --dedupe-table --json and returns the jobs it shows past the
// limit.
func (r *relayRig) longJobs(t *testing.T) []dedupe.LongJob {
	t.Helper()
	cmd := r.emu.Watchbot(t, "status", "--queue-url", r.queue.URL, "--dedupe-table", r.table, "--json")
	cmd.Env = append(append(cmd.Env, r.dyn.Env()...), "WATCHBOT_SQS_MAX_IN_FLIGHT="+relayLimit.String())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	var s struct {
		LongJobs *[]dedupe.LongJob `json:"longJobs"`
	}
	if err := json.Unmarshal(out, &s); err != nil || s.LongJobs == nil {
		t.Fatalf("status printed %s (%v), want its longJobs", out, err)
	}
	return *s.LongJobs
}

// A --max-job-duration past the limit is refused at start (exit 2) without --dedupe-table,
// naming it, and with one when the queue's maxReceiveCount leaves too few receives for it.
func TestListenRelayRefusals(t *testing.T) {
	t.Parallel()
	r := newRelayRig(t, testenv.QueueOptions{MaxReceiveCount: 5})
	for _, tt := range []struct {
		name    string
		noTable bool
		args    []string
		want    string
	}{
		{"without --dedupe-table", true, []string{"--max-job-duration", "3s"}, "--dedupe-table"},
		{"past what maxReceiveCount allows", false, []string{"--max-job-duration", "6s", "--max-attempts", "3"}, "raise the redrive policy's maxReceiveCount"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := r.listen(t, tt.noTable, tt.args...)
			out := r.outs[len(r.outs)-1]
			if code := p.Wait(t, 30*time.Second, out.String); code != 2 {
				t.Errorf("exit code %d, want 2:\n%s", code, out)
			}
			if !strings.Contains(out.String(), "--max-job-duration") || !strings.Contains(out.String(), tt.want) {
				t.Errorf("output names neither --max-job-duration nor %q:\n%s", tt.want, out)
			}
		})
	}
	if len(r.fake.Messages(r.queue.URL)) != 0 {
		t.Errorf("a refused listen touched the queue")
	}
}
