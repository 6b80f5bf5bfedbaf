package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/internal/testing/faultproxy"
	"github.com/watchbot/watchbot/internal/testing/testenv"
	"github.com/watchbot/watchbot/limits"
)

// limitsFleet is several watchbot processes (the built binary) on one queue of the SQS
// emulator, sharing a limits table on the DynamoDB emulator, with a worker that records every
// start and end in a log.
type limitsFleet struct {
	t      *testing.T
	emu    *testenv.Emulator
	q      testenv.Queue
	dynEnv []string
	dyn    *testenv.Dynamo
	table  string
	dir    string
	worker string
	procs  []*testenv.Process
	outs   []*testenv.Buffer
}

// limitsWorker runs a message whose body is "NAME SECONDS [pause]": it logs its start (with
// the tenant attribute, the receive count, when its process was made and the process id of
// the watchbot that runs it), asks for a 5 s
// pause on its first run when the body says pause, sleeps SECONDS and logs its end (none when
// SECONDS is 0). The time is bash's own clock, read first thing; the process's making is the
// kernel's start time of it (field 22 of /proc/PID/stat, in clock ticks since boot), which
// watchbot's fork sets right after the limiter's grant, however long a loaded machine then
// takes to run bash. Each line is one write(2) to a file opened with O_APPEND, so the workers'
// lines never interleave.
const limitsWorker = `#!/bin/bash
t=${EPOCHREALTIME/./}
read -r -a stat < /proc/$$/stat
d=%s
set -- $Message
echo "start ${t}000 $1 ${WATCHBOT_ATTR_TENANT:--} $ApproximateReceiveCount ${stat[21]} $PPID" >> "$d/log"
if [ "$3" = pause ] && mkdir "$d/paused-$1" 2>/dev/null; then
  echo '{"pause":"5s"}' > "$WATCHBOT_RESULT_FILE"
fi
if [ "$2" != 0 ]; then
  sleep "$2"
  t=${EPOCHREALTIME/./}
  echo "end ${t}000 $1" >> "$d/log"
fi
`

// newLimitsFleet starts the emulators and writes the worker. With faults > 0 the watchbots
// reach DynamoDB through a fault proxy that answers that share of the calls with a 500.
func newLimitsFleet(t *testing.T, faults float64) *limitsFleet {
	t.Helper()
	emu := testenv.SQS(t)
	dyn := testenv.DynamoDB(t)
	f := &limitsFleet{t: t, emu: emu, q: emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 5}), dynEnv: dyn.Env(), dyn: dyn,
		table: dyn.NewTable(t, limits.TableDefinition), dir: t.TempDir()}
	if faults > 0 {
		_, url := faultproxy.Serve(t, dyn.Endpoint, faultproxy.Config{Seed: 36, Rules: []faultproxy.Rule{
			{Operations: []string{faultproxy.AnyOperation}, Fault: faultproxy.ServerError, Rate: faults},
		}})
		f.dynEnv = append(f.dynEnv, "AWS_ENDPOINT_URL_DYNAMODB="+url)
	}
	f.worker = filepath.Join(f.dir, "worker.sh")
	if err := os.WriteFile(f.worker, fmt.Appendf(nil, limitsWorker, f.dir), 0o755); err != nil {
		t.Fatal(err)
	}
	return f
}

// dynEndpoint is the DynamoDB emulator's endpoint (not the fault proxy's).
func (f *limitsFleet) dynEndpoint() string { return f.dyn.Endpoint }

// start starts n watchbots sharing the table, with args before the worker and env added.
func (f *limitsFleet) start(n int, env []string, args ...string) {
	f.t.Helper()
	for range n {
		f.startOne(env, args...)
	}
}

func (f *limitsFleet) startOne(env []string, args ...string) *testenv.Process {
	f.t.Helper()
	all := append([]string{"listen", "--queue-url", f.q.URL, "--limits-table", f.table, "--metrics", "none"}, args...)
	cmd := f.emu.Watchbot(f.t, append(all, "--", f.worker)...)
	cmd.Env = append(append(cmd.Env, f.dynEnv...), env...)
	out := &testenv.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	p := testenv.Spawn(f.t, cmd)
	f.procs, f.outs = append(f.procs, p), append(f.outs, out)
	return p
}

// send sends each body, with the tenant attribute tenants[i] when not empty.
func (f *limitsFleet) send(bodies []string, tenants []string) {
	f.t.Helper()
	c := f.emu.Client()
	for from := 0; from < len(bodies); from += 10 {
		var entries []sqstypes.SendMessageBatchRequestEntry
		for i := from; i < min(from+10, len(bodies)); i++ {
			e := sqstypes.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(bodies[i])}
			if tenants != nil && tenants[i] != "" {
				e.MessageAttributes = map[string]sqstypes.MessageAttributeValue{"tenant": {DataType: aws.String("String"), StringValue: aws.String(tenants[i])}}
			}
			entries = append(entries, e)
		}
		out, err := c.SendMessageBatch(f.t.Context(), &sqs.SendMessageBatchInput{QueueUrl: aws.String(f.q.URL), Entries: entries})
		if err != nil || len(out.Failed) > 0 {
			f.t.Fatalf("send: %v %+v", err, out)
		}
	}
}

func (f *limitsFleet) logs() string {
	var b strings.Builder
	for i, o := range f.outs {
		fmt.Fprintf(&b, "--- watchbot %d\n%s", i, o)
	}
	data, _ := os.ReadFile(filepath.Join(f.dir, "log"))
	return b.String() + "--- worker log\n" + string(data)
}

// waitDone waits until the queue is empty and n starts are logged.
func (f *limitsFleet) waitDone(n int, limit time.Duration) {
	f.t.Helper()
	c := f.emu.Client()
	testenv.Eventually(f.t, fmt.Sprintf("%d starts and an empty queue", n), limit, func() bool {
		return len(f.runs()) >= n && testenv.Depth(f.t, c, f.q.URL).Total() == 0
	}, f.logs)
}

// stop stops the watchbots still running with SIGTERM.
func (f *limitsFleet) stop() {
	f.t.Helper()
	var running []*testenv.Process // a task the test killed has its own exit code
	for _, p := range f.procs {
		select {
		case <-p.Done():
		default:
			running = append(running, p)
		}
	}
	for _, code := range testenv.Stop(f.t, 60*time.Second, f.logs, running...) {
		if code != 0 {
			f.t.Errorf("exit code %d after SIGTERM, want 0", code)
		}
	}
}

// limitsRun is one run the worker logged: its start, its end (zero when it logged none), its
// message's name, tenant and receive count, when its process was made (since boot) and the
// process id of the watchbot that ran it.
type limitsRun struct {
	start, end time.Time
	name       string
	tenant     string
	receives   int
	forked     time.Duration
	watchbot   int
}

// clockTick is the unit of a process's start time in /proc/PID/stat: USER_HZ, 100 a second
// on Linux.
const clockTick = 10 * time.Millisecond

// runs reads the worker's log, in start order.
func (f *limitsFleet) runs() []limitsRun {
	data, _ := os.ReadFile(filepath.Join(f.dir, "log"))
	var out []limitsRun
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 3 {
			continue
		}
		ns, _ := strconv.ParseInt(fields[1], 10, 64)
		at := time.Unix(0, ns)
		switch {
		case fields[0] == "start" && len(fields) == 7:
			rc, _ := strconv.Atoi(fields[4])
			ticks, _ := strconv.ParseInt(fields[5], 10, 64)
			pid, _ := strconv.Atoi(fields[6])
			out = append(out, limitsRun{start: at, name: fields[2], tenant: fields[3], receives: rc, forked: time.Duration(ticks) * clockTick, watchbot: pid})
		case fields[0] == "end":
			for i := len(out) - 1; i >= 0; i-- {
				if out[i].name == fields[2] && out[i].end.IsZero() {
					out[i].end = at
					break
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b limitsRun) int { return a.start.Compare(b.start) })
	return out
}

// mostAtOnce returns the most runs under way at one moment among runs that pass keep.
func mostAtOnce(runs []limitsRun, keep func(limitsRun) bool) int {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, r := range runs {
		if keep(r) && !r.end.IsZero() {
			edges = append(edges, edge{r.start, 1}, edge{r.end, -1})
		}
	}
	// An end at the same instant as a start comes first: the slot was free.
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta
	})
	most, n := 0, 0
	for _, e := range edges {
		n += e.delta
		most = max(most, n)
	}
	return most
}

// byTenth counts the runs' starts in each tenth of a second from the first.
func byTenth(runs []limitsRun) []int {
	var out []int
	for _, r := range runs {
		i := int(r.start.Sub(runs[0].start) / (100 * time.Millisecond))
		for len(out) <= i {
			out = append(out, 0)
		}
		out[i]++
	}
	return out
}

func bodiesOf(n int, format string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf(format, i)
	}
	return out
}

// Three watchbots share --rate-limit 20/s over 200 messages (10 s): no second holds more than 22
// starts across them, and the backlog goes at 18/s or more. A start is when watchbot made the
// worker's process, right after the limiter's grant: bash's own clock, read once it runs, lags
// that by as long as a loaded machine takes to schedule it, which on a busy CI machine moves
// starts across a window's edge. The test runs alone all the same, to spare it the other
// fleets' load.
func TestLimitsFleetRate(t *testing.T) {
	f := newLimitsFleet(t, 0)
	const n = 200
	f.send(bodiesOf(n, "m%d 0"), nil)
	f.start(3, nil, "--rate-limit", "20/s", "--concurrency", "8")
	f.waitDone(n, 120*time.Second)
	f.stop()
	runs := f.runs()
	if len(runs) != n {
		t.Fatalf("%d starts, want %d (one per message)", len(runs), n)
	}
	forks := make([]time.Duration, n)
	for i, r := range runs {
		forks[i] = r.forked
	}
	slices.Sort(forks)
	// Ticks round down: two starts less than a second apart are at most a second apart in
	// ticks. So this counts every second's starts, and a few just over a second apart.
	for i := range forks {
		j := i
		for j < n && forks[j]-forks[i] <= time.Second {
			j++
		}
		if j-i > 22 {
			t.Fatalf("%d starts in the second from start %d, want at most 22 at 20/s; starts by tenth of a second (bash's clock): %v", j-i, i, byTenth(runs))
		}
	}
	took := forks[n-1] - forks[0]
	if rate := float64(n-1) / took.Seconds(); rate < 18 {
		t.Errorf("%.1f starts a second over %v, want at least 18 while the backlog lasts", rate, took)
	}
	t.Logf("%d starts in %v", n, took)
}

// Three watchbots of --concurrency 4 share --fleet-concurrency 4 with 2 s jobs: never more than
// 4 run at once, 4 do at some point, and while the backlog lasts more than 3 do on average: a
// fleet slot held by no run would leave at most 3. (Each start waits on the table, so on a
// busy machine the average falls short of 4 by those waits, not by a slot.)
func TestLimitsFleetConcurrency(t *testing.T) {
	t.Parallel()
	f := newLimitsFleet(t, 0)
	const n = 24
	f.send(bodiesOf(n, "c%d 2"), nil)
	f.start(3, nil, "--fleet-concurrency", "4", "--concurrency", "4")
	f.waitDone(n, 120*time.Second)
	testenv.Eventually(t, "every run ended", 10*time.Second, func() bool {
		return !slices.ContainsFunc(f.runs(), func(r limitsRun) bool { return r.end.IsZero() })
	}, f.logs)
	f.stop()
	runs := f.runs()
	if most := mostAtOnce(runs, func(limitsRun) bool { return true }); most != 4 {
		t.Errorf("at most %d runs at once across the watchbots, want 4", most)
	}
	// While backlogged: from the first start to the last, the runs' time inside that window
	// over its length is the average under way.
	from, to := runs[0].start, runs[len(runs)-1].start
	var busy time.Duration
	for _, r := range runs {
		end, start := r.end, r.start
		if end.After(to) {
			end = to
		}
		if start.Before(from) {
			start = from
		}
		busy += max(0, end.Sub(start))
	}
	if avg := busy.Seconds() / to.Sub(from).Seconds(); avg <= 3 {
		t.Errorf("%.2f runs under way on average while backlogged, want more than 3", avg)
	}
}

// --limit-key attr:tenant --concurrency-per-key 1 across three watchbots: never two runs of one
// tenant at once, and the other tenants run while the busy one's backlog waits.
func TestLimitsFleetPerKey(t *testing.T) {
	t.Parallel()
	f := newLimitsFleet(t, 0)
	var bodies, tenants []string
	for i := range 6 {
		bodies, tenants = append(bodies, fmt.Sprintf("a%d 1", i)), append(tenants, "acme")
	}
	for i := range 3 {
		bodies, tenants = append(bodies, fmt.Sprintf("b%d 1", i), fmt.Sprintf("c%d 1", i)), append(tenants, "bolt", "cobalt")
	}
	f.send(bodies, tenants)
	f.start(3, nil, "--limit-key", "attr:tenant", "--concurrency-per-key", "1", "--concurrency", "4")
	f.waitDone(len(bodies), 120*time.Second)
	testenv.Eventually(t, "every run ended", 10*time.Second, func() bool {
		return !slices.ContainsFunc(f.runs(), func(r limitsRun) bool { return r.end.IsZero() })
	}, f.logs)
	f.stop()
	runs := f.runs()
	for _, tenant := range []string{"acme", "bolt", "cobalt"} {
		if most := mostAtOnce(runs, func(r limitsRun) bool { return r.tenant == tenant }); most != 1 {
			t.Errorf("tenant %s: %d runs at once, want 1", tenant, most)
		}
	}
	var lastAcme, lastOther time.Time
	for _, r := range runs {
		if r.tenant == "acme" {
			lastAcme = r.start
		} else {
			lastOther = r.start
		}
	}
	if !lastOther.Before(lastAcme) {
		t.Errorf("the other tenants' last start (%v) is not before acme's (%v): held behind the busy tenant", lastOther, lastAcme)
	}
}

// A worker asks for a 5 s pause: no watchbot starts a job for 5 s, and the message that asked
// runs again afterwards on the same receive.
func TestLimitsFleetPause(t *testing.T) {
	t.Parallel()
	f := newLimitsFleet(t, 0)
	f.start(3, nil, "--concurrency", "2")
	f.send([]string{"slow-down 0.1 pause"}, nil)
	testenv.Eventually(t, "the pause asked", 60*time.Second, func() bool {
		r := f.runs()
		return len(r) == 1 && !r[0].end.IsZero()
	}, f.logs)
	asked := f.runs()[0].end
	// Past the second in which every watchbot reads the fleet's pause.
	time.Sleep(time.Until(asked.Add(1500 * time.Millisecond)))
	f.send(bodiesOf(6, "after%d 0.1"), nil)
	f.waitDone(8, 60*time.Second)
	f.stop()
	runs := f.runs()
	for _, r := range runs[1:] {
		if d := r.start.Sub(asked); d < 5*time.Second-200*time.Millisecond {
			t.Errorf("%s started %v after the pause was asked, want none for 5s", r.name, d)
		}
	}
	var again []limitsRun
	for _, r := range runs {
		if r.name == "slow-down" {
			again = append(again, r)
		}
	}
	if len(again) != 2 || again[1].receives != again[0].receives {
		t.Errorf("slow-down's runs %+v, want two on the same receive count", again)
	}
}

// A watchbot holding fleet slots is killed with SIGKILL: its slots are free again within one
// lease, and another watchbot takes them.
func TestLimitsFleetDyingTask(t *testing.T) {
	t.Parallel()
	f := newLimitsFleet(t, 0)
	lease := []string{limitsLeaseEnv + "=3s"}
	args := []string{"--fleet-concurrency", "2", "--concurrency", "2"}
	doomed := f.startOne(lease, args...)
	f.send([]string{"held0 20", "held1 20"}, nil)
	testenv.Eventually(t, "the doomed watchbot running both", 60*time.Second, func() bool { return len(f.runs()) == 2 }, f.logs)
	f.startOne(lease, args...)
	f.send([]string{"next0 1", "next1 1"}, nil)
	time.Sleep(3 * time.Second)
	if n := len(f.runs()); n != 2 {
		t.Fatalf("%d runs while the fleet's 2 slots were held, want 2", n)
	}
	if err := doomed.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	doomed.Wait(t, 10*time.Second)
	testenv.Eventually(t, "the next jobs started", 30*time.Second, func() bool { return len(f.runs()) == 4 }, f.logs)
	// One lease, the limiter's renewal interval (a third of it) and its poll, for margin.
	for _, r := range f.runs()[2:] {
		if d := r.start.Sub(killed); d > 3*time.Second+2*time.Second {
			t.Errorf("%s started %v after the kill, want within the 3s lease and a poll", r.name, d)
		}
	}
	f.stop()
}

// DynamoDB fails 30% of the calls: no message is lost or run twice, and the fleet limit is
// exceeded by no more than one task's fallback share.
func TestLimitsFleetFaults(t *testing.T) {
	t.Parallel()
	f := newLimitsFleet(t, 0.3)
	const n = 30
	f.send(bodiesOf(n, "f%d 0.3"), nil)
	f.start(3, nil, "--fleet-concurrency", "3", "--concurrency", "3")
	f.waitDone(n, 120*time.Second)
	testenv.Eventually(t, "every run ended", 10*time.Second, func() bool {
		return !slices.ContainsFunc(f.runs(), func(r limitsRun) bool { return r.end.IsZero() })
	}, f.logs)
	f.stop()
	runs := f.runs()
	seen := map[string]int{}
	for _, r := range runs {
		seen[r.name]++
	}
	for _, b := range bodiesOf(n, "f%d") {
		if seen[b] != 1 {
			t.Errorf("%s ran %d times, want once", b, seen[b])
		}
	}
	// The documented bound: the limit, and the fallback share (1: --fleet-concurrency 3 over
	// 3 live tasks, or the smallest share before a task read the table) of each task that
	// fell back.
	fellBack := 0
	for _, o := range f.outs {
		if strings.Contains(o.String(), "holds to its share of each limit") {
			fellBack++
		}
	}
	if most := mostAtOnce(runs, func(limitsRun) bool { return true }); most > 3+fellBack {
		t.Errorf("%d runs at once, want at most 3 and a share of 1 for each of the %d tasks that fell back; logs:\n%s", most, fellBack, f.logs())
	}
	t.Logf("%d tasks fell back", fellBack)
}

// status --limits-table shows the fleet's use of its limits: the live tasks, the pause, the
// slots each task holds.
func TestStatusLimitsTable(t *testing.T) {
	t.Parallel()
	f := newLimitsFleet(t, 0)
	cfg := limits.DefaultConfig()
	cfg.Concurrency, cfg.Table, cfg.Task = 3, f.table, "task-a"
	store := limits.NewDynamoStore(testenv.DynamoClientFor(f.dynEndpoint()), f.table)
	lim := limits.New(cfg, store, time.Now, nil)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { _ = lim.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()
	for started := 0; started < 2; {
		if _, ok := lim.TryStart("", 1); ok {
			started++
			continue
		}
		select {
		case <-lim.Changed():
		case <-time.After(5 * time.Second):
			t.Fatal("no slot within 5s")
		}
	}
	lim.Pause(time.Minute)
	testenv.Eventually(t, "the table showing the task's slots, beat and pause", 20*time.Second, func() bool {
		u, err := limits.ReadUse(t.Context(), store, time.Now())
		return err == nil && u.SlotsHeld == 2 && len(u.LiveTasks) == 1 && u.PausedUntil != nil
	})
	cmd := f.emu.Watchbot(t, "status", "--queue-url", f.q.URL, "--limits-table", f.table, "--json")
	cmd.Env = append(cmd.Env, f.dynEnv...)
	var stdout, stderr testenv.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if code := testenv.Spawn(t, cmd).Wait(t, 60*time.Second, stderr.String); code != 0 {
		t.Fatalf("status exit %d: %s", code, stderr.String())
	}
	var got struct {
		Name   string     `json:"name"`
		Limits limits.Use `json:"limits"`
	}
	if err := json.Unmarshal([]byte(stdout.String()), &got); err != nil {
		t.Fatalf("%v: %s", err, stdout.String())
	}
	if got.Name != f.q.Name || got.Limits.SlotsHeld != 2 || got.Limits.Slots["task-a"] != 2 || !slices.Equal(got.Limits.LiveTasks, []string{"task-a"}) || got.Limits.PausedUntil == nil {
		t.Errorf("status --json: %s", stdout.String())
	}
	cmd = f.emu.Watchbot(t, "status", "--queue-url", f.q.URL, "--limits-table", f.table)
	cmd.Env = append(cmd.Env, f.dynEnv...)
	stdout, stderr = testenv.Buffer{}, testenv.Buffer{}
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if code := testenv.Spawn(t, cmd).Wait(t, 60*time.Second, stderr.String); code != 0 {
		t.Fatalf("status exit %d: %s", code, stderr.String())
	}
	for _, want := range []string{"limits table: " + f.table, "live tasks:   1", "paused:       until", "slots held:   2", "  task-a: 2"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, stdout.String())
		}
	}
}
