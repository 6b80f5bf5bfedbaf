package supervisor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/backoff"
	"github.com/watchbot/watchbot/internal/testing/fakesqs"
	"github.com/watchbot/watchbot/internal/testing/testenv"
	"github.com/watchbot/watchbot/limits"
	"github.com/watchbot/watchbot/worker"
)

// These tests run a listen on several queues in a testing/synctest bubble against fakesqs,
// which delivers FIFO groups as SQS does (several messages of a group per receive, none of a
// group while any of it is in flight); fauxqs departs from SQS there. Time in the bubble is
// free, so the runs take seconds of its clock.

// modelRig is a listen on several fakesqs queues with a stand-in worker.
type modelRig struct {
	t     *testing.T
	srv   *fakesqs.Server
	urls  []string
	cfg   Config
	logs  *testenv.Buffer
	loads map[string]*Load
	// behave says how long a run of the queue takes and how it exits; result, when set, what
	// its run numbered run (from 1) writes to its result file ("" for none).
	behave func(queue, body string) (time.Duration, int)
	result func(body string, run int) string
	// protection, when set, is the ECS agent's task protection; limiter, when set, the
	// limiter that cfg.Limits.Fleet's table needs.
	protection ProtectionAPI
	limiter    *limits.Limiter
	stop       func() error

	mu      sync.Mutex
	runs    []modelRun
	running map[string]int // by queue, and by FIFO group as queue/group
	most    map[string]int
	// busy and mostAtOnce count the runs under way across every queue.
	busy, mostAtOnce int
	faults           []string
}

type modelRun struct {
	queue, group, body string
	at                 time.Time
}

// newModelRig creates the queues named (a name ending in .fifo makes a FIFO queue), each
// with a dead-letter queue of its kind, maxReceiveCount 5.
func newModelRig(t *testing.T, names ...string) *modelRig {
	t.Helper()
	r := &modelRig{t: t, srv: fakesqs.New(), logs: &testenv.Buffer{}, loads: map[string]*Load{},
		running: map[string]int{}, most: map[string]int{},
		behave: func(string, string) (time.Duration, int) { return time.Second, 0 }}
	ctx := context.Background()
	for _, name := range names {
		fifo := len(name) > 5 && name[len(name)-5:] == ".fifo"
		dlqName := name + "-dlq"
		attrs := map[string]string{}
		if fifo {
			dlqName = name[:len(name)-5] + "-dlq.fifo"
			attrs["FifoQueue"] = "true"
		}
		if _, err := r.srv.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(dlqName), Attributes: attrs}); err != nil {
			t.Fatal(err)
		}
		attrs["RedrivePolicy"] = fmt.Sprintf(`{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:%s","maxReceiveCount":5}`, dlqName)
		q, err := r.srv.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
		if err != nil {
			t.Fatal(err)
		}
		r.urls = append(r.urls, aws.ToString(q.QueueUrl))
		r.loads[name] = NewLoad()
	}
	cfg := DefaultConfig()
	cfg.QueueURL, cfg.Queues.More = r.urls[0], r.urls[1:]
	cfg.Command = []string{"true"} // never run: the stand-in worker takes its place
	cfg.Concurrency = 4
	cfg.Backoff = backoff.Exponential{Base: time.Second, Max: time.Minute, Jitter: backoff.None}
	cfg.KillGrace = time.Second
	cfg.TempDir = t.TempDir()
	r.cfg = cfg
	return r
}

// send sends bodies to queue i; on a FIFO queue each goes to the group its first letter names,
// on a standard one a body "TENANT:..." has the MessageGroupId TENANT.
func (r *modelRig) send(i int, bodies ...string) {
	r.t.Helper()
	for k := 0; k < len(bodies); k += 10 {
		var entries []types.SendMessageBatchRequestEntry
		for j, b := range bodies[k:min(k+10, len(bodies))] {
			e := types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(j)), MessageBody: aws.String(b)}
			if r.fifo(i) {
				e.MessageGroupId, e.MessageDeduplicationId = aws.String(b[:1]), aws.String(b)
			} else if tenant, _, ok := strings.Cut(b, ":"); ok {
				e.MessageGroupId = aws.String(tenant) // a fair queue's tenant
			}
			entries = append(entries, e)
		}
		out, err := r.srv.SendMessageBatch(context.Background(), &sqs.SendMessageBatchInput{QueueUrl: aws.String(r.urls[i]), Entries: entries})
		if err != nil || len(out.Failed) > 0 {
			r.t.Fatalf("send: %v %v", err, out)
		}
	}
}

func (r *modelRig) fifo(i int) bool { u := r.urls[i]; return u[len(u)-5:] == ".fifo" }

// flood sends n messages to queue i, named by the queue's index and their number.
func (r *modelRig) flood(i, n int) {
	bodies := make([]string, n)
	for k := range bodies {
		bodies[k] = fmt.Sprintf("q%d-%d", i, k)
	}
	r.send(i, bodies...)
}

func (r *modelRig) start() {
	r.t.Helper()
	per := map[string]QueueDeps{}
	for name, l := range r.loads {
		per[name] = QueueDeps{Load: l}
	}
	r.stop = testenv.Run(r.t, "supervisor", 10*time.Minute, func(ctx context.Context) error {
		return Run(ctx, r.cfg, Deps{SQS: r.srv, Logger: slog.New(slog.NewJSONHandler(r.logs, nil)), spawn: r.spawn, PerQueue: per, Protection: r.protection,
			Limiter: r.limiter})
	}, r.logs.String)
}

func (r *modelRig) spawn(ctx context.Context, spec worker.Spec, _ *slog.Logger) worker.Result {
	env, lines, err := workerInput(r.t, spec)
	if err != nil {
		return worker.Result{End: worker.NotStarted, Err: err}
	}
	q, body, group := env["WATCHBOT_QUEUE_NAME"], lines[0].Body, env["WATCHBOT_GROUP_ID"]
	keys := []string{q}
	if group != "" {
		keys = append(keys, q+"/"+group)
	}
	r.mu.Lock()
	r.runs = append(r.runs, modelRun{queue: q, group: group, body: body, at: time.Now()})
	for _, k := range keys {
		r.running[k]++
		r.most[k] = max(r.most[k], r.running[k])
	}
	r.busy++
	r.mostAtOnce = max(r.mostAtOnce, r.busy)
	if group != "" && r.running[q+"/"+group] > 1 {
		r.faults = append(r.faults, fmt.Sprintf("%s started while another message of group %s ran", body, group))
	}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		for _, k := range keys {
			r.running[k]--
		}
		r.busy--
		r.mu.Unlock()
	}()
	took, exit := r.behave(q, body)
	run := worker.Result{}
	select {
	case <-time.After(took):
		run.Code = exit
		if err := r.writeResult(env["WATCHBOT_RESULT_FILE"], body); err != nil {
			return worker.Result{End: worker.NotStarted, Err: err}
		}
	case <-ctx.Done():
		run.End, run.Err = worker.Stopped, context.Cause(ctx)
	}
	run.Duration = took
	return run
}

// writeResult writes what result says the latest run of body writes to its result file.
func (r *modelRig) writeResult(path, body string) error {
	if r.result == nil {
		return nil
	}
	r.mu.Lock()
	n := 0
	for _, run := range r.runs {
		if run.body == body {
			n++
		}
	}
	r.mu.Unlock()
	if out := r.result(body, n); out != "" {
		return os.WriteFile(path, []byte(out), 0o600)
	}
	return nil
}

// runsOf returns the runs of queue name, in start order.
func (r *modelRig) runsOf(name string) []modelRun {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []modelRun
	for _, run := range r.runs {
		if run.queue == name {
			out = append(out, run)
		}
	}
	return out
}

// groupBodies returns n bodies for each group named by a letter of groups, in order within
// each group: a1 … an, b1 … (send puts each in the group its first letter names).
func groupBodies(groups string, n int) []string {
	var out []string
	for _, g := range groups {
		for k := 1; k <= n; k++ {
			out = append(out, fmt.Sprintf("%c%d", g, k))
		}
	}
	return out
}

func (r *modelRig) empty(i int) bool { return len(r.srv.Messages(r.urls[i])) == 0 }

func (r *modelRig) trail() string { return r.logs.String() }

// A FIFO queue served beside a standard one keeps its groups' order, one message of a group
// at a time, while the standard queue's messages run side by side.
func TestQueuesFIFOBesideStandard(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newModelRig(t, "orders.fifo", "bulk")
		fifo := groupBodies("abc", 6)
		r.send(0, fifo...)
		r.flood(1, 40)
		r.start()
		testenv.Eventually(t, "both queues empty", 5*time.Minute, func() bool { return r.empty(0) && r.empty(1) }, r.trail)
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		for _, f := range r.faults {
			t.Error(f)
		}
		last := map[string]int{}
		for _, run := range r.runsOf("orders.fifo") {
			n, _ := strconv.Atoi(run.body[1:])
			if n != last[run.group]+1 {
				t.Errorf("%s started after %s%d: a group's order was broken", run.body, run.group, last[run.group])
			}
			last[run.group] = n
		}
		if got := len(r.runsOf("orders.fifo")); got != len(fifo) {
			t.Errorf("the FIFO queue ran %d messages, want %d", got, len(fifo))
		}
		if got := len(r.runsOf("bulk")); got != 40 {
			t.Errorf("the standard queue ran %d messages, want 40", got)
		}
		if r.most["bulk"] < 2 {
			t.Errorf("the standard queue ran at most %d at once, want its messages side by side", r.most["bulk"])
		}
	})
}

// Weighted never starves a queue: with weights 1, 5 and 20 on four slots, each queue with
// work gets a start within a bounded time (its share of a smooth weighted round-robin: one
// start in 26 for the lightest, 6.5 s of 1 s jobs on four slots), and the starts split by
// weight.
func TestQueuesWeightedNoStarvation(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newModelRig(t, "light", "middle", "heavy")
		r.cfg.Queues.Weights = map[string]int{"light": 1, "middle": 5, "heavy": 20}
		for i := range 3 {
			r.flood(i, 400)
		}
		r.start()
		time.Sleep(2 * time.Minute)
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		const bound = 10 * time.Second
		starts := map[string]int{}
		for _, name := range []string{"light", "middle", "heavy"} {
			runs := r.runsOf(name)
			starts[name] = len(runs)
			if len(runs) == 0 {
				t.Fatalf("queue %s never started a message", name)
			}
			// From the first round of the slots on (the first receives land in the order they
			// answer), the gaps between a queue's starts are bounded.
			for k := 1; k < len(runs); k++ {
				if gap := runs[k].at.Sub(runs[k-1].at); gap > bound && runs[k-1].at.Sub(runs[0].at) > 0 {
					t.Errorf("queue %s waited %v between starts %d and %d, want at most %v", name, gap, k-1, k, bound)
				}
			}
			if d := runs[0].at.Sub(t0Bubble); d > bound {
				t.Errorf("queue %s started its first message after %v, want within %v", name, d, bound)
			}
		}
		total := starts["light"] + starts["middle"] + starts["heavy"]
		t.Logf("starts by queue: %v", starts)
		for name, w := range map[string]float64{"light": 1, "middle": 5, "heavy": 20} {
			want := float64(total) * w / 26
			if got := float64(starts[name]); got < 0.8*want-2 || got > 1.2*want+2 {
				t.Errorf("queue %s started %v of %d, want about %.0f (weight %v of 26): %v", name, got, total, want, w, starts)
			}
		}
	})
}

// One brake per queue: a queue whose every run fails brakes to a probe, and the other queue
// goes on with every other slot.
func TestQueuesBrakePerQueue(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newModelRig(t, "broken", "healthy")
		r.behave = func(queue, _ string) (time.Duration, int) {
			if queue == "broken" {
				return 100 * time.Millisecond, 1
			}
			return time.Second, 0
		}
		r.flood(0, 100)
		r.flood(1, 300)
		r.start()
		testenv.Eventually(t, "the broken queue braking", 5*time.Minute, r.loads["broken"].Braking, r.trail)
		braked := len(r.runsOf("healthy"))
		time.Sleep(20 * time.Second)
		if r.loads["healthy"].Braking() {
			t.Error("the healthy queue brakes too")
		}
		// While the broken queue probes, the healthy one runs on the other slots: about 3 a
		// second with 1 s jobs on 4 slots.
		if got := len(r.runsOf("healthy")) - braked; got < 50 {
			t.Errorf("the healthy queue started %d messages in 20 s while the other braked, want about 60", got)
		}
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
	})
}

// The limits count every queue's starts together: a task limit of 2 running jobs holds for
// two queues on four slots, and both queues keep running within it (the limiter's wake-ups
// reach every queue's loop).
func TestQueuesShareTheLimits(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newModelRig(t, "first", "second")
		r.cfg.Limits.Fleet.Concurrency = 2
		r.flood(0, 30)
		r.flood(1, 30)
		r.start()
		testenv.Eventually(t, "both queues empty", 5*time.Minute, func() bool { return r.empty(0) && r.empty(1) }, r.trail)
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if most := r.mostAtOnce; most != 2 {
			t.Errorf("at most %d jobs ran at once across the queues, want the limit's 2", most)
		}
		if len(r.runs) != 60 {
			t.Errorf("%d runs, want 60", len(r.runs))
		}
	})
}

// A pause a worker of one queue asks for holds every queue: no run starts on either until it
// ends, and the message that asked runs again then.
func TestQueuesPauseHoldsEveryQueue(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newModelRig(t, "first", "second")
		r.result = func(body string, run int) string {
			if body == "q0-0" && run == 1 {
				return `{"pause":"5s"}`
			}
			return ""
		}
		r.behave = func(_, body string) (time.Duration, int) {
			if body == "q0-0" {
				return 500 * time.Millisecond, 0 // it asks while the other runs go on
			}
			return time.Second, 0
		}
		r.flood(0, 6)
		r.flood(1, 6)
		r.start()
		testenv.Eventually(t, "both queues empty", 5*time.Minute, func() bool { return r.empty(0) && r.empty(1) }, r.trail)
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		var asked []time.Time
		for _, run := range r.runs {
			if run.body == "q0-0" {
				asked = append(asked, run.at)
			}
		}
		if len(asked) != 2 {
			t.Fatalf("q0-0 ran %d times, want twice (the pause, then its run)", len(asked))
		}
		pausedAt := asked[0].Add(500 * time.Millisecond)
		for _, run := range r.runs {
			if !run.at.Before(pausedAt) && run.at.Before(pausedAt.Add(5*time.Second)) {
				t.Errorf("%s of %s started %v into the pause", run.body, run.queue, run.at.Sub(pausedAt))
			}
		}
		if len(r.runs) != 13 {
			t.Errorf("%d runs, want 13", len(r.runs))
		}
	})
}

// An operator's pause of one queue of a listen holds that queue alone: within a poll none of
// its runs starts, while the other queue's go on; a resume lets it run, each message once.
func TestQueuesFleetPauseOfOneQueue(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newModelRig(t, "first", "second")
		r.cfg.Limits.Fleet.Table, r.cfg.Limits.Fleet.Task = "limits", "task"
		r.cfg.Limits.Fleet.Member = limits.Member{Queues: []string{"first", "second"}, Concurrency: 4, BatchSize: 1}
		table := &controlTable{}
		r.limiter = limits.New(r.cfg.Limits.Fleet, table, time.Now, nil)
		r.flood(0, 20)
		r.flood(1, 20)
		r.start()
		time.Sleep(2 * time.Second)
		table.steer(func(c limits.Control) limits.Control { return c.Pause("first", time.Time{}) })
		held := time.Now().Add(limits.PollInterval + 10*time.Millisecond)
		time.Sleep(5 * time.Second)
		started := map[string]int{}
		r.mu.Lock()
		for _, run := range r.runs {
			if run.at.After(held) {
				started[run.queue]++
			}
		}
		r.mu.Unlock()
		if started["first"] > 0 || started["second"] == 0 {
			t.Errorf("runs started in the pause of first: %v, want none of first and some of second", started)
		}
		table.steer(func(c limits.Control) limits.Control { return c.Resume("first") })
		testenv.Eventually(t, "both queues empty", 5*time.Minute, func() bool { return r.empty(0) && r.empty(1) }, r.trail)
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		runs := map[string]int{}
		for _, run := range r.runs {
			runs[run.body]++
		}
		if len(runs) != 40 || slices.ContainsFunc(slices.Collect(maps.Values(runs)), func(n int) bool { return n != 1 }) {
			t.Errorf("runs by body %v, want each of the 40 once", runs)
		}
	})
}

// A per-key limit on several queues: a message held back for its key starts once the key
// frees, although nothing else of its queue is ready, and one held past --limit-wait is
// released.
func TestQueuesKeyedLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		wait     time.Duration
		releases bool
	}{
		{name: "starts once its key frees", wait: time.Minute},
		{name: "released after --limit-wait", wait: 3 * time.Second, releases: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newModelRig(t, "first", "second")
				r.cfg.Limits.Fleet.ConcurrencyPerKey, r.cfg.Limits.Key, r.cfg.Limits.Wait = 1, LimitKeyGroup, tc.wait
				r.behave = func(string, string) (time.Duration, int) { return 10 * time.Second, 0 }
				r.send(0, "k1:a1", "k1:a2")
				r.start()
				testenv.Eventually(t, "the first queue empty", 5*time.Minute, func() bool { return r.empty(0) }, r.trail)
				if err := r.stop(); err != nil {
					t.Fatal(err)
				}
				runs := r.runsOf("first")
				if len(runs) != 2 || runs[1].at.Sub(runs[0].at) < 10*time.Second {
					t.Fatalf("runs %+v, want a2 after a1 ended (one run of k1 at a time)", runs)
				}
				if released := testenv.Logged(r.trail(), "level", "INFO", "limit_key", "*", "limit_wait", "*"); released != tc.releases {
					t.Errorf("released: %v, want %v", released, tc.releases)
				}
				if !tc.releases && runs[1].at.Sub(runs[0].at) > 12*time.Second {
					t.Errorf("a2 started %v after a1, want it soon after a1 ended at 10s", runs[1].at.Sub(runs[0].at))
				}
			})
		})
	}
}

// One scale-in protector follows every queue: the task is protected while any queue holds a
// message, with no flip-flop between the queues, and unprotected after the drain.
func TestQueuesOneProtector(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		agent := &fakeProtection{start: time.Now()}
		r := newModelRig(t, "first", "second")
		r.protection = agent
		r.cfg.ProtectionIdle = time.Second
		r.start()
		time.Sleep(5 * time.Second)
		if calls := agent.log(); len(calls) != 0 {
			t.Fatalf("idle queues made calls: %v", agent)
		}
		r.flood(1, 8)
		testenv.Eventually(t, "the second queue empty", 5*time.Minute, func() bool { return r.empty(1) }, r.trail)
		r.flood(0, 8)
		testenv.Eventually(t, "the first queue empty", 5*time.Minute, func() bool { return r.empty(0) }, r.trail)
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		calls := agent.log()
		if len(calls) < 2 || !calls[0].enable || calls[len(calls)-1].enable {
			t.Fatalf("calls %v, want protection on first and off last", agent)
		}
		for i := 1; i < len(calls); i++ {
			if calls[i].enable == calls[i-1].enable && !calls[i].enable {
				t.Errorf("protection turned off twice in a row: %v", agent)
			}
		}
	})
}

// Batch mode on several queues: a run is a batch of one queue's messages and takes one slot.
func TestQueuesBatches(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newModelRig(t, "first", "second")
		r.cfg.BatchSize, r.cfg.BatchWindow = 5, time.Second
		r.flood(0, 40)
		r.flood(1, 40)
		r.start()
		testenv.Eventually(t, "both queues empty", 5*time.Minute, func() bool { return r.empty(0) && r.empty(1) }, r.trail)
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(r.runs) >= 80 || len(r.runs) < 16 {
			t.Errorf("%d runs for 80 messages in batches of up to 5", len(r.runs))
		}
		if r.mostAtOnce > r.cfg.Concurrency {
			t.Errorf("%d runs at once on %d slots", r.mostAtOnce, r.cfg.Concurrency)
		}
	})
}

// With --http-worker, each POST names its message's queue in X-Aws-Sqsd-Queue, as sqsd does.
func TestQueuesHTTPWorkerQueueHeader(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]string{} // body -> X-Aws-Sqsd-Queue
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		mu.Lock()
		seen[string(b)] = req.Header.Get("X-Aws-Sqsd-Queue")
		mu.Unlock()
	}))
	defer app.Close()
	r := newModelRig(t, "urgent", "bulk")
	r.cfg.Command, r.cfg.HTTP.URL = nil, app.URL
	r.cfg.WaitTime = time.Second
	r.send(0, "u1", "u2")
	r.send(1, "b1")
	r.start()
	testenv.Eventually(t, "both queues empty", 30*time.Second, func() bool { return r.empty(0) && r.empty(1) }, r.trail)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := map[string]string{"u1": "urgent", "u2": "urgent", "b1": "bulk"}
	if !maps.Equal(seen, want) {
		t.Errorf("X-Aws-Sqsd-Queue by body %v, want %v", seen, want)
	}
}

// A stop (SIGTERM) drains every queue side by side within the bounded shutdown: a FIFO queue
// and a standard one, each with runs under way longer than --shutdown-timeout and messages
// held ahead of a slot, stop within --shutdown-timeout + --kill-grace + 2 s, and every message
// of both queues is back in its queue, visible, none lost, none left leased.
func TestQueuesStopDrainsEveryQueue(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newModelRig(t, "orders.fifo", "bulk")
		r.cfg.ShutdownTimeout, r.cfg.KillGrace = 5*time.Second, time.Second
		r.behave = func(string, string) (time.Duration, int) { return time.Minute, 0 }
		fifo := groupBodies("abcdef", 3)
		r.send(0, fifo...)
		r.flood(1, 40)
		r.start()
		testenv.Eventually(t, "both queues running and holding messages ahead", time.Minute, func() bool {
			for _, name := range []string{"orders.fifo", "bulk"} {
				if l := r.loads[name]; l.Running() == 0 || l.Held() <= l.Running() {
					return false
				}
			}
			return true
		}, r.trail)
		stopped := time.Now()
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		if took, limit := time.Since(stopped), r.cfg.ShutdownTimeout+r.cfg.KillGrace+2*time.Second; took > limit {
			t.Errorf("the stop took %v, want at most %v\n%s", took, limit, r.trail())
		}
		// Each message is back in its queue, visible, unless a run of it succeeded before the
		// stop and deleted it.
		deleted := map[string]int{}
		for _, line := range strings.Split(r.trail(), "\n") {
			var e struct{ Level, Queue, Outcome string } // a delete's failure is an error
			if json.Unmarshal([]byte(line), &e) == nil && e.Level == "INFO" && e.Outcome == "delete" {
				deleted[e.Queue]++
			}
		}
		for i, name := range []string{"orders.fifo", "bulk"} {
			msgs := r.srv.Messages(r.urls[i])
			if want := []int{len(fifo), 40}[i] - deleted[name]; len(msgs) != want {
				t.Errorf("queue %s holds %d messages after the stop, want %d (%d deleted after their runs)\n%s", name, len(msgs), want, deleted[name], r.trail())
			}
			for _, m := range msgs {
				if m.InFlight {
					t.Errorf("%s of queue %s is still in flight after the stop: not handed back", m.Body, name)
				}
			}
		}
		if len(r.runsOf("orders.fifo")) == 0 || len(r.runsOf("bulk")) == 0 {
			t.Errorf("runs by queue: %d and %d, want both queues running at the stop", len(r.runsOf("orders.fifo")), len(r.runsOf("bulk")))
		}
	})
}

// The read-ahead is counted against a queue's share: while every slot is busy, a queue holds
// waiting for a slot about what its share of the slots would run within the read-ahead's
// reach (its share's worth of readAhead of work, at most a receive). Weighted 3:1 on 4 slots
// gives shares of 3 and 1; at 5 s jobs that is 6 and 2 messages ahead, where one queue alone
// would hold 8. A receive may also count the slots free at that moment, which the policy may
// then give to the other queue, so the bound is on the average over time.
func TestQueuesReadAheadCountedAgainstShare(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newModelRig(t, "heavy", "light")
		r.cfg.Queues.Weights = map[string]int{"heavy": 3, "light": 1}
		r.behave = func(string, string) (time.Duration, int) { return 5 * time.Second, 0 }
		r.flood(0, 300)
		r.flood(1, 300)
		r.start()
		time.Sleep(20 * time.Second) // past the first rounds, with the jobs' duration known
		const samples = 100
		sum := map[string]int{}
		for range samples {
			time.Sleep(time.Second)
			for _, name := range []string{"heavy", "light"} {
				l := r.loads[name]
				sum[name] += l.Held() - l.Running()
			}
		}
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		mean := map[string]float64{}
		for name, n := range sum {
			mean[name] = float64(n) / samples
		}
		t.Logf("messages held ahead of a slot, on average: %v", mean)
		for name, want := range map[string]float64{"heavy": 6, "light": 2} {
			if mean[name] > want+0.5 {
				t.Errorf("queue %s held %.1f messages ahead of a slot on average, want about %v (its share's read-ahead)", name, mean[name], want)
			}
		}
	})
}

// Under strict, a queue receives nothing ahead while a queue before it has work (its share
// is its reserve, none): what it holds ahead of a slot does not grow, and an urgent message
// takes every slot that frees, ahead of the bulk messages held.
func TestQueuesStrictNoReadAheadBehindWork(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newModelRig(t, "urgent", "bulk")
		r.cfg.Queues.Policy = PolicyStrict
		r.behave = func(string, string) (time.Duration, int) { return 5 * time.Second, 0 }
		r.flood(1, 300)
		r.start()
		time.Sleep(20 * time.Second) // bulk alone: every slot, and its read-ahead
		bulk := r.loads["bulk"]
		if bulk.Held() <= bulk.Running() {
			t.Fatalf("bulk holds %d messages with %d running: no read-ahead to test against", bulk.Held(), bulk.Running())
		}
		r.flood(0, 40)
		urgent := r.loads["urgent"]
		testenv.Eventually(t, "urgent holding its messages", time.Minute, func() bool { return urgent.Held() > 0 }, r.trail)
		ahead := bulk.Held() - bulk.Running()
		for urgent.Held() > 0 {
			if got := bulk.Held() - bulk.Running(); got > ahead {
				t.Fatalf("at %v bulk held %d messages ahead of a slot while urgent had work, up from %d", time.Since(t0Bubble), got, ahead)
			}
			time.Sleep(time.Second)
		}
		urgentRuns := r.runsOf("urgent")
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		// From the first round of urgent's starts on, every start before its last round is
		// urgent's (the slots its last messages leave go to bulk at that moment).
		var starts []modelRun
		r.mu.Lock()
		for _, run := range r.runs {
			if !run.at.Before(urgentRuns[0].at.Add(5*time.Second)) && run.at.Before(urgentRuns[len(urgentRuns)-1].at) {
				starts = append(starts, run)
			}
		}
		r.mu.Unlock()
		for _, s := range starts {
			if s.queue != "urgent" {
				t.Errorf("bulk's %s started at %v while urgent had work", s.body, s.at.Sub(t0Bubble))
			}
		}
	})
}

// A message held back for its key goes back after --limit-wait even when every shared slot
// has been taken since: its release needs no slot, so it does not wait for one to free.
func TestQueuesKeyedLimitWaitWhileSlotsBusy(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newModelRig(t, "first", "second")
		r.cfg.Concurrency = 3
		r.cfg.Limits.Fleet.ConcurrencyPerKey, r.cfg.Limits.Key, r.cfg.Limits.Wait = 1, LimitKeyGroup, 5*time.Second
		r.behave = func(string, string) (time.Duration, int) { return time.Minute, 0 }
		r.send(0, "k1:a1", "k1:a2")
		r.send(1, "x1")
		r.start()
		testenv.Eventually(t, "a1 and x1 running", time.Minute, func() bool { return len(r.runsOf("first")) == 1 && len(r.runsOf("second")) == 1 }, r.trail)
		started := time.Now()
		time.Sleep(time.Second) // a2 is held back for k1, its slot free
		r.send(1, "x2")
		testenv.Eventually(t, "x2 in the last slot", time.Minute, func() bool { return len(r.runsOf("second")) == 2 }, r.trail)
		testenv.Eventually(t, "a2 released after --limit-wait", 30*time.Second, func() bool {
			return testenv.Logged(r.trail(), "level", "INFO", "limit_key", "*", "limit_wait", "*")
		}, r.trail)
		if d := time.Since(started); d > 10*time.Second {
			t.Errorf("a2 released %v after it was first held back, want about --limit-wait (5s), not when a slot frees", d)
		}
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
	})
}
