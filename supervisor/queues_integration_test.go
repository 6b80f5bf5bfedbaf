package supervisor

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/watchbot/watchbot/backoff"
	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/internal/testing/testenv"
	"github.com/watchbot/watchbot/worker"
)

// queuesRig runs one listen on several queues of the emulator, with a stand-in worker that
// records which queue each run came from and when it started, and takes took(queue).
type queuesRig struct {
	t     *testing.T
	c     *sqs.Client
	urls  []string
	names []string
	cfg   Config
	logs  *testenv.Buffer
	took  func(queue string) time.Duration
	stop  func() error
	// loads are the queues' gauges, by name.
	loads map[string]*Load

	mu         sync.Mutex
	starts     []queueStart
	running    map[string]int
	maxRunning map[string]int
}

type queueStart struct {
	queue string
	at    time.Time
	// firstWaiting is how many messages the first queue held waiting for a slot, as its loop
	// last said, when this run started.
	firstWaiting int
}

func newQueuesRig(t *testing.T, n int) *queuesRig {
	t.Helper()
	emu := testenv.SQS(t)
	r := &queuesRig{t: t, c: emu.Client(), logs: &testenv.Buffer{}, running: map[string]int{}, maxRunning: map[string]int{},
		took: func(string) time.Duration { return 100 * time.Millisecond }, loads: map[string]*Load{}}
	for range n {
		q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 5})
		r.urls = append(r.urls, q.URL)
		r.names = append(r.names, queueattr.NameFromURL(q.URL))
		r.loads[queueattr.NameFromURL(q.URL)] = NewLoad()
	}
	cfg := DefaultConfig()
	cfg.QueueURL, cfg.Queues.More = r.urls[0], r.urls[1:]
	cfg.Command = []string{"true"} // never run: the stand-in worker takes its place
	cfg.Concurrency = 8
	cfg.Backoff = backoff.Exponential{Base: time.Second, Max: time.Minute, Jitter: backoff.None}
	cfg.WaitTime = time.Second
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.KillGrace = time.Second
	cfg.TempDir = t.TempDir()
	r.cfg = cfg
	return r
}

// flood sends n messages to queue i.
func (r *queuesRig) flood(i, n int) {
	r.t.Helper()
	bodies := make([]string, n)
	for k := range bodies {
		bodies[k] = fmt.Sprintf("%s-%d", r.names[i], k)
	}
	if _, err := testenv.Send(context.Background(), r.c, r.urls[i], bodies, nil); err != nil {
		r.t.Fatal(err)
	}
}

func (r *queuesRig) start() {
	r.t.Helper()
	r.stop = testenv.Run(r.t, "supervisor", 60*time.Second, func(ctx context.Context) error {
		log := slog.New(slog.NewJSONHandler(r.logs, nil))
		per := map[string]QueueDeps{}
		for name, l := range r.loads {
			per[name] = QueueDeps{Load: l}
		}
		return Run(ctx, r.cfg, Deps{SQS: r.c, Logger: log, spawn: r.spawn, PerQueue: per})
	}, r.logs.String)
}

func (r *queuesRig) spawn(ctx context.Context, spec worker.Spec, _ *slog.Logger) worker.Result {
	env, _, err := workerInput(r.t, spec)
	if err != nil {
		return worker.Result{End: worker.NotStarted, Err: err}
	}
	q := env["WATCHBOT_QUEUE_NAME"]
	if want := r.urls[indexOf(r.names, q)]; env["WATCHBOT_QUEUE_URL"] != want {
		r.t.Errorf("worker of queue %s has WATCHBOT_QUEUE_URL %q, want %q", q, env["WATCHBOT_QUEUE_URL"], want)
	}
	first := r.loads[r.names[0]]
	waiting := first.Held() - first.Running()
	r.mu.Lock()
	r.starts = append(r.starts, queueStart{queue: q, at: time.Now(), firstWaiting: waiting})
	r.running[q]++
	r.maxRunning[q] = max(r.maxRunning[q], r.running[q])
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.running[q]--
		r.mu.Unlock()
	}()
	start := time.Now()
	run := worker.Result{}
	select {
	case <-time.After(r.took(q)):
	case <-ctx.Done():
		run.End, run.Err = worker.Stopped, context.Cause(ctx)
	}
	run.Duration = time.Since(start)
	return run
}

func indexOf(names []string, name string) int {
	for i, n := range names {
		if n == name {
			return i
		}
	}
	return 0
}

// startsSoFar returns a copy of the starts recorded.
func (r *queuesRig) startsSoFar() []queueStart {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]queueStart(nil), r.starts...)
}

func (r *queuesRig) waitStarts(n int, limit time.Duration) []queueStart {
	r.t.Helper()
	testenv.Eventually(r.t, fmt.Sprintf("%d starts", n), limit, func() bool { return len(r.startsSoFar()) >= n }, r.logs.String)
	return r.startsSoFar()
}

// firstStart waits for queue i's first start, and returns when it was.
func (r *queuesRig) firstStart(i int, limit time.Duration) time.Time {
	r.t.Helper()
	var at time.Time
	testenv.Eventually(r.t, r.names[i]+" started a message", limit, func() bool {
		for _, s := range r.startsSoFar() {
			if s.queue == r.names[i] {
				at = s.at
				return true
			}
		}
		return false
	}, r.logs.String)
	return at
}

// count returns how many of starts came from each queue.
func count(starts []queueStart) map[string]int {
	n := map[string]int{}
	for _, s := range starts {
		n[s.queue]++
	}
	return n
}

// Two queues flooded with 500 messages each and 100 ms jobs: weighted 3:1 splits the starts
// 3:1 (within 10%) while both have a backlog.
func TestQueuesWeightedSplit(t *testing.T) {
	// Not parallel: it measures the split in real time (see TestQueuesStrict).
	r := newQueuesRig(t, 2)
	r.cfg.Queues.Weights = map[string]int{r.names[0]: 3, r.names[1]: 1}
	r.flood(0, 500)
	r.flood(1, 500)
	r.start()
	starts := r.waitStarts(400, 45*time.Second)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	// The first receives of each queue land in the order they answer; judge the rest.
	n := count(starts[40:400])
	ratio := float64(n[r.names[0]]) / float64(n[r.names[1]])
	if ratio < 2.7 || ratio > 3.3 {
		t.Errorf("weighted 3:1 split the starts %d:%d (%.2f), want 3:1 within 10%%", n[r.names[0]], n[r.names[1]], ratio)
	}
}

// Strict gives the first queue every slot that frees while it has work, and the second
// queue's backlog runs once the first's is done.
func TestQueuesStrict(t *testing.T) {
	// Not parallel: it judges which queue each slot went to in real time, and sibling tests'
	// load widens the moment between a slot's grant and its worker's start past what it allows.
	r := newQueuesRig(t, 2)
	r.cfg.Queues.Policy = PolicyStrict
	r.flood(0, 500)
	r.flood(1, 500)
	r.start()
	starts := r.waitStarts(560, 45*time.Second)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	// Before the first queue's first receive answers, the second's messages may take the
	// idle slots; from its first full round of slots on, the first queue takes every one
	// until its last round, when its last messages may still be on their way from SQS.
	first := 0
	for first < len(starts) && starts[first].queue != r.names[0] {
		first++
	}
	var lastUrgent int
	for i, s := range starts {
		if s.queue == r.names[0] {
			lastUrgent = i
		}
	}
	if n := count(starts)[r.names[0]]; n != 500 {
		t.Fatalf("the first queue ran %d of its 500 messages", n)
	}
	// Strict gives a slot to the first queue that has a message waiting. While the first
	// queue's next receive is under way it may have none, and the slot rightly goes to the
	// second: on a loaded machine a receive can outlast a round of 100 ms jobs. So what
	// counts is a start of the second queue while the first had messages waiting, allowing
	// for the moment between a slot's grant and its worker's start, in which the first
	// queue's receive may answer.
	var wrong, idle int
	for i, s := range starts[first+8 : lastUrgent-8] {
		if s.queue != r.names[1] {
			continue
		}
		if s.firstWaiting > 0 {
			wrong++
			t.Logf("start %d (of %d..%d) went to the second queue at %v while the first had %d waiting", first+8+i, first+8, lastUrgent, s.at.Sub(starts[0].at), s.firstWaiting)
		} else {
			idle++
		}
	}
	t.Logf("the second queue took %d slots while the first's receive was under way", idle)
	if wrong > 2 {
		t.Errorf("the second queue took %d slots while the first had messages waiting", wrong)
	}
	if got := count(starts[lastUrgent+1:])[r.names[1]]; got == 0 {
		t.Error("the second queue never ran once the first was done")
	}
}

// A message sent to the urgent queue while every slot runs a bulk job, and the bulk queue
// holds messages read ahead of a slot, starts within one job's duration plus 1 s, however
// deep the bulk backlog, under either policy.
func TestQueuesUrgentTakesNextSlot(t *testing.T) {
	t.Parallel()
	for _, policy := range []QueuePolicy{PolicyStrict, PolicyWeighted} {
		t.Run(string(policy), func(t *testing.T) {
			const job = 2 * time.Second
			r := newQueuesRig(t, 2)
			r.cfg.Queues.Policy = policy
			r.took = func(string) time.Duration { return job }
			r.flood(1, 500)
			r.start()
			r.waitStarts(8, 20*time.Second)
			bulk := r.loads[r.names[1]]
			testenv.Eventually(t, "bulk holding messages ahead of a slot", 10*time.Second, func() bool { return bulk.Held() > bulk.Running() }, r.logs.String)
			sent := time.Now()
			r.flood(0, 1)
			at := r.firstStart(0, 3*job)
			if err := r.stop(); err != nil {
				t.Fatal(err)
			}
			if d := at.Sub(sent); d > job+time.Second {
				t.Errorf("the urgent message started %v after it was sent, want within %v", d, job+time.Second)
			}
		})
	}
}

// A reserved slot stays free for its queue while the other's backlog is deep, and its
// queue's message starts in it at once.
func TestQueuesReserve(t *testing.T) {
	t.Parallel()
	r := newQueuesRig(t, 2)
	r.cfg.Concurrency = 4
	r.cfg.Queues.Reserve = map[string]int{r.names[0]: 1}
	r.flood(1, 200)
	r.start()
	r.waitStarts(60, 30*time.Second)
	sent := time.Now()
	r.flood(0, 1)
	at := r.firstStart(0, 10*time.Second)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if got := r.maxRunning[r.names[1]]; got != 3 {
		t.Errorf("the other queue ran %d at once, want 3: one of the 4 slots is reserved", got)
	}
	// The reserved queue's long poll answers as the message arrives, and its slot is free.
	if d := at.Sub(sent); d > 2*time.Second {
		t.Errorf("the reserved queue's message started %v after it was sent", d)
	}
}
