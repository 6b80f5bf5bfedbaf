package supervisor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/dedupe"
	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// These tests run supervisors against the SQS emulator and the DynamoDB emulator, through
// the real SDK over HTTP, with real worker processes.

// dedupeHarness is a harness whose supervisors share a dedupe table on the emulator.
type dedupeHarness struct {
	*harness
	dyn   *testenv.Dynamo
	table string
}

func newDedupeHarness(t *testing.T) *dedupeHarness {
	t.Helper()
	h := newHarness(t, testenv.QueueOptions{MaxReceiveCount: 5})
	dyn := testenv.DynamoDB(t)
	return &dedupeHarness{harness: h, dyn: dyn, table: dyn.NewTable(t, dedupe.TableDefinition)}
}

// config is the harness's configuration with duplicate suppression keyed by the attribute
// idem.
func (h *dedupeHarness) config(command ...string) Config {
	cfg := h.harness.config(command...)
	cfg.Dedupe = DedupeConfig{Table: h.table, Key: "attr:idem"}
	return cfg
}

// startWith runs a supervisor whose table is reached at endpoint, recording its metrics in
// metrics and its log in logs, until the returned stop is called.
func (h *dedupeHarness) startWith(cfg Config, endpoint string, metrics *countingRecorder, logs *testenv.Buffer) (stop func() error) {
	h.t.Helper()
	store := dedupe.NewStore(testenv.DynamoClientFor(endpoint), h.table, queueattr.NameFromURL(h.q.URL))
	return testenv.Run(h.t, "supervisor", 60*time.Second, func(ctx context.Context) error {
		return Run(ctx, cfg, Deps{SQS: h.c, Logger: slog.New(slog.NewJSONHandler(logs, nil)), Metrics: metrics, Dedupe: store})
	}, logs.String)
}

// sendKeyed sends body with the attribute idem=key.
func (h *dedupeHarness) sendKeyed(body, key string) string {
	return h.send(body, map[string]string{"idem": key})
}

func TestDedupeTwoSupervisorsRunEachKeyOnce(t *testing.T) {
	t.Parallel()
	h := newDedupeHarness(t)
	// The worker records its key, then works a little; k3's first run fails.
	worker := h.script("w.sh", `if [ "$WATCHBOT_ATTR_IDEM" = k3 ] && [ ! -e "`+h.dir+`/failed" ]; then touch "`+h.dir+`/failed"; exit 1; fi
echo "$WATCHBOT_ATTR_IDEM" >> "`+h.dir+`/ran"; sleep 0.3`)
	cfg := h.config(worker)
	cfg.Concurrency = 4
	var metrics [2]countingRecorder
	var logs [2]testenv.Buffer
	for i := range 2 {
		h.startWith(cfg, h.dyn.Endpoint, &metrics[i], &logs[i])
	}
	const keys = 12
	for round := range 2 {
		for k := range keys {
			h.sendKeyed(fmt.Sprintf("job %d, send %d", k, round), fmt.Sprintf("k%d", k))
		}
	}
	all := func() string { return logs[0].String() + logs[1].String() }
	testenv.Eventually(t, "every key run and the queue empty", 60*time.Second, func() bool {
		return strings.Count(h.readFile("ran"), "\n") >= keys && h.empty(h.q.URL)
	}, all)
	ran := strings.Fields(h.readFile("ran"))
	slices.Sort(ran)
	var want []string
	for k := range keys {
		want = append(want, fmt.Sprintf("k%d", k))
	}
	slices.Sort(want)
	if !slices.Equal(ran, want) {
		t.Errorf("keys run %v, want each of %v once", ran, want)
	}
	if _, err := os.Stat(filepath.Join(h.dir, "failed")); err != nil {
		t.Errorf("k3 never failed, so its retry was not tested: %v", err)
	}
	// k3's first run failed; every key's second send was skipped.
	wantCounts(t, map[alarms.Metric]float64{alarms.DuplicatesSkipped: keys, alarms.WorkerErrors: 1, alarms.DeadLetter: 0, alarms.DedupeErrors: 0},
		&metrics[0], &metrics[1])
}

func TestDedupeFailedWorkerGetsItsRetry(t *testing.T) {
	t.Parallel()
	h := newDedupeHarness(t)
	worker := h.script("w.sh", `echo "$WATCHBOT_ATTEMPT" >> "`+h.dir+`/attempts"; [ "$WATCHBOT_ATTEMPT" -ge 2 ]`)
	metrics, logs := &countingRecorder{}, &testenv.Buffer{}
	h.startWith(h.config(worker), h.dyn.Endpoint, metrics, logs)
	h.sendKeyed("flaky", "order-1")
	testenv.Eventually(t, "the retry to succeed", 30*time.Second, func() bool { return h.empty(h.q.URL) }, logs.String)
	if got := strings.Fields(h.readFile("attempts")); !slices.Equal(got, []string{"1", "2"}) {
		t.Errorf("attempts %v, want 1 then 2: the failed run's key must be released for its retry", got)
	}
	// Completed: a producer's second send is skipped.
	h.sendKeyed("flaky, sent again", "order-1")
	testenv.Eventually(t, "the duplicate to be skipped", 30*time.Second, func() bool {
		return metrics.get(alarms.DuplicatesSkipped) == 1 && h.empty(h.q.URL)
	}, logs.String)
	if got := strings.Fields(h.readFile("attempts")); len(got) != 2 {
		t.Errorf("attempts %v: the duplicate ran", got)
	}
}

// TestDedupeUnreachableTableRunsNothingAndLosesNothing: with the table's port closed, every
// message is released after its backoff and received again, none runs, none is deleted; a
// watchbot that reaches the table then runs each once.
func TestDedupeUnreachableTableRunsNothingAndLosesNothing(t *testing.T) {
	t.Parallel()
	h := newDedupeHarness(t)
	worker := h.script("w.sh", `echo "$MessageId $ApproximateReceiveCount" >> "`+h.dir+`/ran"`)
	proxy := newTCPProxy(t, strings.TrimPrefix(h.dyn.Endpoint, "http://"))
	metrics, logs := &countingRecorder{}, &testenv.Buffer{}
	stop := h.startWith(h.config(worker), "http://"+proxy.addr(), metrics, logs)
	time.Sleep(time.Second) // past the startup check
	proxy.close()           // from now on the table's port is closed
	var ids []string
	down := time.Now()
	for i := range 3 {
		ids = append(ids, h.sendKeyed(fmt.Sprintf("job %d", i), fmt.Sprintf("k%d", i)))
	}
	// Released after its backoff (1 s, then 2 s), and received again: twice each. Each failed
	// claim takes the SDK's retries first, and so does the removal of what it may have written.
	testenv.Eventually(t, "every message released twice", 90*time.Second, func() bool {
		released := map[string]int{}
		for _, l := range logRecords(logs.String(), retried...) {
			if strings.HasPrefix(fmt.Sprint(l["reason"]), "duplicate check failed") {
				released[fmt.Sprint(l["message_id"])]++
			}
		}
		return released[ids[0]] >= 2 && released[ids[1]] >= 2 && released[ids[2]] >= 2
	}, logs.String)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if ran := h.readFile("ran"); ran != "" {
		t.Fatalf("ran %q while the table could not be reached", ran)
	}
	if n := testenv.Depth(t, h.c, h.q.URL).Total(); n != 3 {
		t.Fatalf("%d messages in the queue, want the 3: none deleted", n)
	}
	if n := testenv.Depth(t, h.c, h.q.DLQURL).Total(); n != 0 {
		t.Fatalf("%d messages in the DLQ, want none yet", n)
	}
	if got := metrics.get(alarms.DedupeErrors); got < 6 {
		t.Errorf("DedupeErrors = %v, want each failed claim counted", got)
	}
	wantCounts(t, map[alarms.Metric]float64{alarms.WorkerErrors: 0, alarms.DeadLetter: 0}, metrics)
	most := 1 + int(time.Since(down)/dedupeErrorLog)
	if n := testenv.LogCount(logs.String(), "level", "ERROR", "failures_not_logged", "*"); n < 1 || n > most {
		t.Errorf("%d error lines for the failed claims in %v, want 1 to %d (at most one per 30 s)", n, time.Since(down), most)
	}
	// The table back: each runs once, received a third time or more.
	h.startWith(h.config(worker), h.dyn.Endpoint, &countingRecorder{}, logs)
	testenv.Eventually(t, "every message run and the queue empty", 30*time.Second, func() bool {
		return strings.Count(h.readFile("ran"), "\n") == 3 && h.empty(h.q.URL)
	}, logs.String)
	runs := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(h.readFile("ran")), "\n") {
		id, count, _ := strings.Cut(line, " ")
		runs[id]++
		if n, _ := strconv.Atoi(count); n < 3 {
			t.Errorf("%s ran on receive %d, want 3 or more: it was released while the table was down", id, n)
		}
	}
	for _, id := range ids {
		if runs[id] != 1 {
			t.Errorf("%s ran %d times, want once: runs %v", id, runs[id], runs)
		}
	}
}

// TestDedupeHeldKeyIsReleased: a message whose key another run holds is released with a
// short delay, never run beside it: skipped once that run completed the key, run once that
// run's claim lapsed (it crashed).
func TestDedupeHeldKeyIsReleased(t *testing.T) {
	t.Parallel()
	for _, holder := range []string{"completes", "crashes"} {
		t.Run("the holder "+holder, func(t *testing.T) {
			h := newDedupeHarness(t)
			worker := h.script("w.sh", `echo "$MessageId $WATCHBOT_ATTEMPT" >> "`+h.dir+`/ran"; sleep 3`)
			cfg := h.config(worker)
			cfg.Concurrency = 2
			metrics, logs := &countingRecorder{}, &testenv.Buffer{}
			h.startWith(cfg, h.dyn.Endpoint, metrics, logs)
			var first string
			if holder == "completes" {
				// The first send runs, 3 s; the second arrives while it does.
				first = h.sendKeyed("first", "order-7")
				testenv.Eventually(t, "the first send to start", 10*time.Second, func() bool { return h.readFile("ran") != "" }, logs.String)
			} else {
				// A run elsewhere claimed the key and died: its claim lapses in 4 s.
				store := dedupe.NewStore(h.dyn.Client(), h.table, queueattr.NameFromURL(h.q.URL))
				if _, err := store.Claim(t.Context(), "order-7", "crashed", "another-message", time.Now().Add(4*time.Second)); err != nil {
					t.Fatal(err)
				}
			}
			second := h.sendKeyed("second", "order-7")
			testenv.Eventually(t, "the queue empty", 30*time.Second, func() bool { return h.empty(h.q.URL) }, logs.String)
			releases := 0
			for _, l := range logRecords(logs.String(), retried...) {
				if l["message_id"] == second && strings.HasPrefix(fmt.Sprint(l["reason"]), "its dedupe key is held by ") {
					releases++
					if v, _ := l["visible_in_seconds"].(float64); v < 1 || v > 4 {
						t.Errorf("released visible in %v s, want a short delay: 1 s or more, no later than the holder's claim lapses", l["visible_in_seconds"])
					}
				}
			}
			if releases == 0 {
				t.Errorf("the second send was never released as held:\n%s", logs)
			}
			ran := strings.Fields(h.readFile("ran"))
			switch {
			case holder == "completes" && (len(ran) != 2 || ran[0] != first):
				t.Errorf("ran %v, want the first send alone", ran)
			case holder == "completes" && metrics.get(alarms.DuplicatesSkipped) != 1:
				t.Errorf("DuplicatesSkipped = %v, want 1", metrics.get(alarms.DuplicatesSkipped))
			case holder == "crashes" && (len(ran) != 2 || ran[0] != second || ran[1] != "2"):
				t.Errorf("ran %v, want the second send once, as attempt 2: the crashed run counted, its %d releases did not", ran, releases)
			}
			wantCounts(t, noFailures, metrics)
		})
	}
}

// retried are the records of a retry's visibility change.
var retried = []string{"level", "INFO", "outcome", "retry", "visible_in_seconds", "*"}

// logRecords returns the JSON log records that have every one of attrs, as testenv.Logged
// matches them: by level and attributes, never by message.
func logRecords(logs string, attrs ...string) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(logs, "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && testenv.Logged(line, attrs...) {
			out = append(out, rec)
		}
	}
	return out
}

func TestDedupeUnreachableTableAtStartup(t *testing.T) {
	t.Parallel()
	h := newDedupeHarness(t)
	closed := newTCPProxy(t, "127.0.0.1:1")
	closed.close()
	h.send("untouched", nil)
	logs := &testenv.Buffer{}
	cfg := h.config("true")
	store := dedupe.NewStore(testenv.DynamoClientFor("http://"+closed.addr()), h.table, "q")
	err := Run(t.Context(), cfg, Deps{SQS: h.c, Logger: slog.New(slog.NewJSONHandler(logs, nil)), Dedupe: store})
	if err == nil || !strings.Contains(err.Error(), "Dedupe.Table: table not reachable") {
		t.Fatalf("Run = %v, want Dedupe.Table: table not reachable", err)
	}
	out, rerr := h.c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(h.q.URL), WaitTimeSeconds: 1,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount}})
	if rerr != nil || len(out.Messages) != 1 || out.Messages[0].Attributes["ApproximateReceiveCount"] != "1" {
		t.Fatalf("the message was received before the startup check failed (%v, %v)", out, rerr)
	}
}

// tcpProxy forwards connections from a port of 127.0.0.1 to upstream until close, after
// which the port refuses connections and every forwarded connection is cut.
type tcpProxy struct {
	l     net.Listener
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func newTCPProxy(t *testing.T, upstream string) *tcpProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{l: l}
	p.wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			p.wg.Go(func() { _, _ = io.Copy(u, c); u.Close() })
			p.wg.Go(func() { _, _ = io.Copy(c, u); c.Close() })
		}
	})
	t.Cleanup(p.close)
	return p
}

func (p *tcpProxy) addr() string { return p.l.Addr().String() }

// close closes the port and cuts every connection, and waits for the copies to end.
func (p *tcpProxy) close() {
	p.l.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}
