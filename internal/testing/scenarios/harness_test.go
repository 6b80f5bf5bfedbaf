package scenarios

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/backoff"
	"github.com/watchbot/watchbot/internal/testing/faultproxy"
	"github.com/watchbot/watchbot/internal/testing/testenv"
	"github.com/watchbot/watchbot/supervisor"
)

// world is one scenario's setting: a queue on the emulator, maybe a fault proxy in front of
// it, the worker's trace and the supervisor's log.
type world struct {
	t      *testing.T
	emu    *testenv.Emulator
	q      testenv.Queue
	direct *sqs.Client // straight to the emulator: for sending and for the final count
	proxy  *faultproxy.Proxy
	// endpoint is where the supervisor sends its requests: the proxy, or the emulator.
	endpoint string
	dir      string
	trace    string
	locks    string
	logs     *logSink
	// env is more variables for the binary (a DynamoDB emulator's endpoint).
	env []string
}

// newWorld creates a queue (and DLQ) for the test. With rules, the supervisor's requests
// go through a fault proxy seeded with seed.
func newWorld(t *testing.T, qo testenv.QueueOptions, seed int64, rules []faultproxy.Rule) *world {
	t.Helper()
	emu := testenv.SQS(t)
	dir := t.TempDir()
	w := &world{t: t, emu: emu, q: emu.NewQueue(t, qo), direct: emu.Client(), endpoint: emu.Endpoint,
		dir: dir, trace: filepath.Join(dir, "trace"), locks: filepath.Join(dir, "locks"), logs: newLogSink()}
	if err := os.Mkdir(w.locks, 0o755); err != nil {
		t.Fatal(err)
	}
	if rules != nil {
		w.startProxy(seed, rules)
	}
	return w
}

// startProxy puts a fault proxy in front of the emulator.
func (w *world) startProxy(seed int64, rules []faultproxy.Rule) {
	w.t.Helper()
	w.proxy, w.endpoint = faultproxy.Serve(w.t, w.emu.Endpoint, faultproxy.Config{Seed: seed, Rules: rules})
}

// command is the worker command line.
func (w *world) command() []string {
	return []string{testenv.Build(w.t, "./internal/testing/scenarios/testworker"), "-trace", w.trace, "-locks", w.locks}
}

// config is a fast supervisor configuration: 1 s backoff base capped at 4 s, 1 s long
// polls, short leases.
func (w *world) config() supervisor.Config {
	cfg := supervisor.DefaultConfig()
	cfg.QueueURL = w.q.URL
	cfg.Command = w.command()
	cfg.Backoff = backoff.Exponential{Base: time.Second, Max: 4 * time.Second, Jitter: backoff.Equal}
	cfg.WaitTime = time.Second
	cfg.VisibilityTimeout = 6 * time.Second
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.KillGrace = time.Second
	cfg.TempDir = w.dir
	return cfg
}

// start runs supervisor.Run in-process until the returned stop is called; stop returns
// Run's error. The supervisor talks to w.endpoint.
func (w *world) start(cfg supervisor.Config, seed int64) (stop func() error) {
	w.t.Helper()
	return testenv.Run(w.t, "supervisor", 90*time.Second, func(ctx context.Context) error {
		return supervisor.Run(ctx, cfg, supervisor.Deps{
			SQS:    testenv.ClientFor(w.endpoint),
			Logger: slog.New(slog.NewJSONHandler(w.logs, nil)),
			Random: lockedRandom(seed),
		})
	}, w.logs.tail)
}

// lockedRandom is a seeded random source safe for the supervisor's concurrent calls.
func lockedRandom(seed int64) func() float64 {
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(uint64(seed), 7))
	return func() float64 {
		mu.Lock()
		defer mu.Unlock()
		return r.Float64()
	}
}

// binary starts `watchbot listen --queue-url URL --endpoint-url ENDPOINT ARGS -- worker`.
func (w *world) binary(args ...string) *testenv.Process {
	w.t.Helper()
	full := append([]string{"listen", "--queue-url", w.q.URL, "--endpoint-url", w.endpoint, "--log-format", "json"}, args...)
	cmd := w.emu.Watchbot(w.t, append(append(full, "--"), w.command()...)...)
	cmd.Env = append(append(cmd.Env, "TMPDIR="+w.dir), w.env...)
	cmd.Stdout, cmd.Stderr = w.logs, w.logs
	return testenv.Spawn(w.t, cmd)
}

// body is a planned message's body (see testworker).
func body(key string, plan ...string) string {
	b, _ := json.Marshal(struct {
		Key  string   `json:"key"`
		Plan []string `json:"plan"`
	}{key, plan})
	return string(b)
}

// keyOf returns a body's key: the planned key, or "" for other bodies.
func keyOf(b string) string {
	var p struct {
		Key string `json:"key"`
	}
	if json.Unmarshal([]byte(b), &p) != nil {
		return ""
	}
	return p.Key
}

// sendBodies sends bodies straight to the emulator and returns their ids.
func (w *world) sendBodies(bodies []string) []string {
	w.t.Helper()
	ids, err := testenv.Send(context.Background(), w.direct, w.q.URL, bodies, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	return ids
}

// depth returns a queue's visible, in-flight and delayed messages, as the emulator counts them.
func (w *world) depth(url string) int64 {
	w.t.Helper()
	return testenv.Depth(w.t, w.direct, url).Total()
}

// eventually is testenv.Eventually with the tail of the log.
func (w *world) eventually(what string, limit time.Duration, cond func() bool) {
	w.t.Helper()
	testenv.Eventually(w.t, what, limit, cond, w.logs.tail)
}

// run is one worker run from the trace.
type run struct {
	key, id  string
	attempt  int
	receives int // ApproximateReceiveCount
	pid      int
	start    int64
	end      int64 // 0: no end record (killed)
	result   string
	children []int
}

// traceData is the parsed trace.
type traceData struct {
	runs     map[string][]*run // by key, in start order
	overlaps []string          // overlap lines
	seen     map[string]string // key → JSON of the last seen record
}

func (w *world) readTrace() traceData {
	w.t.Helper()
	td := traceData{runs: map[string][]*run{}, seen: map[string]string{}}
	data, err := os.ReadFile(w.trace)
	if err != nil && !os.IsNotExist(err) {
		w.t.Fatal(err)
	}
	open := map[string]*run{} // key|pid → run without its end yet
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), " ", 7)
		if len(f) < 6 {
			w.t.Fatalf("malformed trace line %q", sc.Text())
		}
		kind, key, id := f[0], f[1], f[2]
		attempt, _ := strconv.Atoi(f[3])
		pid, _ := strconv.Atoi(f[4])
		at, _ := strconv.ParseInt(f[5], 10, 64)
		rest := ""
		if len(f) == 7 {
			rest = f[6]
		}
		slot := key + "|" + strconv.Itoa(pid)
		switch kind {
		case "start":
			r := &run{key: key, id: id, attempt: attempt, pid: pid, start: at}
			r.receives, _ = strconv.Atoi(rest)
			td.runs[key] = append(td.runs[key], r)
			open[slot] = r
		case "end":
			if r := open[slot]; r != nil {
				r.end, r.result = at, rest
				delete(open, slot)
			}
		case "child":
			// The pid field holds the child's pid; the run is the last open one of the key.
			for _, r := range slices.Backward(td.runs[key]) {
				r.children = append(r.children, pid)
				break
			}
		case "overlap":
			td.overlaps = append(td.overlaps, sc.Text())
		case "seen":
			td.seen[key] = rest
		}
	}
	for _, rs := range td.runs {
		sort.Slice(rs, func(i, j int) bool { return rs[i].start < rs[j].start })
	}
	return td
}

// emptyThenStop waits up to limit for the queue to empty under the supervisor p, restarted
// after a kill, then stops it with SIGTERM: it must exit 0.
func (w *world) emptyThenStop(p *testenv.Process, limit time.Duration) {
	w.t.Helper()
	w.eventually("the queue to empty after the restart", limit, func() bool { return w.depth(w.q.URL) == 0 })
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	if code := p.Wait(w.t, 30*time.Second, w.logs.tail); code != 0 {
		w.t.Errorf("restarted supervisor exited %d after SIGTERM, want 0", code)
	}
}

// unfinished returns the pids of the runs in the trace without an end record: under way, or
// killed.
func (w *world) unfinished() []int {
	var pids []int
	for _, rs := range w.readTrace().runs {
		for _, r := range rs {
			if r.end == 0 {
				pids = append(pids, r.pid)
			}
		}
	}
	return pids
}

// tally is what a scenario found, for its table and its assertions.
type tally struct {
	Sent, Runs, Succeeded, Deleted, DeadLettered, DLQCopies, InQueue, Lost int
	ConcurrentDuplicates, RerunsAfterSuccess, UnexplainedReruns            int
	DeleteFailures, DeleteFaults, FaultsInjected                           int
}

func (t tally) String() string {
	return fmt.Sprintf("sent %d, runs %d, succeeded %d, deleted %d, dead-lettered %d (DLQ copies %d), still queued %d, lost %d, "+
		"concurrent duplicates %d, reruns after success %d (unexplained %d), delete failures logged %d, delete faults %d, faults injected %d",
		t.Sent, t.Runs, t.Succeeded, t.Deleted, t.DeadLettered, t.DLQCopies, t.InQueue, t.Lost,
		t.ConcurrentDuplicates, t.RerunsAfterSuccess, t.UnexplainedReruns, t.DeleteFailures, t.DeleteFaults, t.FaultsInjected)
}

// verifyOpts adjust verify.
type verifyOpts struct {
	// drainWait is how long to wait for in-flight messages to come back (default 15 s).
	drainWait time.Duration
	// excuse may explain why a successful run ran again (e.g. the supervisor was killed
	// before it could delete); it returns "" when it does not.
	excuse func(r *run) string
}

// verify checks the invariants once the supervisor has stopped: every key sent was
// deleted after a successful run, or is in the DLQ, or is still in the queue; no key ran
// twice at once; a key that succeeded ran again only when the log says its delete failed
// (or its lease was lost, or opts.excuse explains it). It reports each breach as a test
// error and returns the tally.
func (w *world) verify(keys []string, opts verifyOpts) tally {
	w.t.Helper()
	if opts.drainWait == 0 {
		opts.drainWait = 15 * time.Second
	}
	td := w.readTrace()
	keyOfMsg := func(m types.Message) string {
		if k := keyOf(aws.ToString(m.Body)); k != "" {
			return k
		}
		return aws.ToString(m.MessageId)
	}
	inQueue, inDLQ := map[string]int{}, map[string]int{}
	for _, m := range testenv.Drain(w.t, w.direct, w.q.URL, opts.drainWait) {
		inQueue[keyOfMsg(m)]++
	}
	if w.q.DLQURL != "" {
		for _, m := range testenv.Drain(w.t, w.direct, w.q.DLQURL, opts.drainWait) {
			inDLQ[keyOfMsg(m)]++
		}
	}
	ev := w.logs.evidence()
	t := tally{Sent: len(keys), DeleteFailures: ev.deleteFailures}
	if w.proxy != nil {
		st := w.proxy.Stats()
		t.FaultsInjected = st.Total().Injected()
		t.DeleteFaults = st.Operations["DeleteMessage"].Injected() + st.Operations["DeleteMessageBatch"].Injected()
	}
	var lost []string
	for _, k := range keys {
		runs := td.runs[k]
		t.Runs += len(runs)
		ok := slices.ContainsFunc(runs, func(r *run) bool { return r.result == "ok" })
		if ok {
			t.Succeeded++
		}
		switch {
		case inQueue[k] > 0:
			t.InQueue++
		case inDLQ[k] > 0:
			t.DeadLettered++
		case ok:
			t.Deleted++
		default:
			t.Lost++
			lost = append(lost, fmt.Sprintf("%s (%d runs)", k, len(runs)))
		}
		t.DLQCopies += inDLQ[k]
		// Runs of one key must not overlap.
		for i := 1; i < len(runs); i++ {
			prev := runs[i-1]
			if prev.end != 0 && runs[i].start < prev.end {
				t.ConcurrentDuplicates++
				w.t.Errorf("concurrent duplicate: %s attempt %d (pid %d) started %v before attempt %d (pid %d) ended",
					k, runs[i].attempt, runs[i].pid, time.Duration(prev.end-runs[i].start), prev.attempt, prev.pid)
			}
		}
		// A run that succeeded and was followed by another must have lost its delete.
		for i, r := range runs[:max(len(runs)-1, 0)] {
			if r.result != "ok" {
				continue
			}
			t.RerunsAfterSuccess++
			why := ev.explain(r.id, r.attempt)
			if why == "" && opts.excuse != nil {
				why = opts.excuse(r)
			}
			if why == "" {
				t.UnexplainedReruns++
				w.t.Errorf("%s succeeded on attempt %d (message %s) and ran again (attempt %d) with no delete failure, lost lease or other cause logged",
					k, r.attempt, r.id, runs[i+1].attempt)
			}
		}
	}
	for _, o := range td.overlaps {
		t.ConcurrentDuplicates++
		w.t.Errorf("concurrent duplicate (the message's lock was held by another run): %s", o)
	}
	if len(lost) > 0 {
		w.t.Errorf("%d messages lost (not deleted after a successful run, not in the DLQ, not in the queue): %s",
			len(lost), strings.Join(lost[:min(len(lost), 10)], ", "))
	}
	if w.proxy != nil && t.DeleteFailures > 0 && t.DeleteFaults == 0 {
		w.t.Errorf("%d delete failures logged with no fault injected into any delete", t.DeleteFailures)
	}
	if w.t.Failed() {
		w.t.Logf("log tail:\n%s", w.logs.tail())
	}
	return t
}

// Log lines that explain a rerun after success, by their message.
const (
	logDeleteFailed = "delete failed: the message will be delivered again after its visibility timeout"
	logLeaseLost    = "stopping job: its lease could not be renewed and the message may already be with another worker"
	logStopped      = "worker stopped by watchbot"
	// A lease that lapsed (the machine too busy to renew it in time) explains a rerun of its
	// message whichever attempt it follows.
	logRenewedLate    = "renewing a lease that has lapsed: the message may be delivered again meanwhile"
	logDeliveredAgain = "message delivered again while its last delivery was settling (its lease had lapsed): the new delivery is a new attempt"
)

// logSink collects the supervisor's JSON log lines: a tail for failure messages, counts by
// message, and the lines that explain reruns. Worker output lines are counted, not kept.
type logSink struct {
	mu      sync.Mutex
	partial []byte
	ring    []string
	next    int
	counts  map[string]int
	kept    []logLine
}

type logLine struct {
	Level     string `json:"level"`
	Msg       string `json:"msg"`
	MessageID string `json:"message_id"`
	Attempt   int    `json:"attempt"`
	Error     string `json:"error"`
}

func newLogSink() *logSink { return &logSink{ring: make([]string, 200), counts: map[string]int{}} }

// Write takes any chunking of the log: lines are assembled before they are read.
func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if len(s.partial) < 1<<20 {
				s.partial = append(s.partial, p...)
			}
			break
		}
		line := p[:i]
		if len(s.partial) > 0 {
			line = append(s.partial, line...)
			s.partial = nil
		}
		s.line(line)
		p = p[i+1:]
	}
	return n, nil
}

func (s *logSink) line(b []byte) {
	if bytes.Contains(b, []byte(`"msg":"worker output"`)) {
		s.counts["worker output"]++
		if len(b) > 300 {
			b = append(b[:300:300], "…"...)
		}
		s.ring[s.next%len(s.ring)] = string(b)
		s.next++
		return
	}
	var l logLine
	if json.Unmarshal(b, &l) != nil {
		l = logLine{Msg: string(b)}
	}
	s.counts[l.Msg]++
	if l.Level == "WARN" || l.Level == "ERROR" {
		s.kept = append(s.kept, l)
	}
	s.ring[s.next%len(s.ring)] = string(b)
	s.next++
}

// count returns how many lines carried msg.
func (s *logSink) count(msg string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[msg]
}

// contains reports whether a kept (warning or error) line's message contains sub.
func (s *logSink) warned(sub string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, l := range s.kept {
		if strings.Contains(l.Msg, sub) {
			n++
		}
	}
	return n
}

// tail returns the last lines logged.
func (s *logSink) tail() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for i := max(0, s.next-len(s.ring)); i < s.next; i++ {
		b.WriteString(s.ring[i%len(s.ring)])
		b.WriteByte('\n')
	}
	return b.String()
}

// evidence is what the log says about lost deletes and leases.
type evidence struct {
	causes         map[string]string // message id|attempt → the log line that explains a rerun
	deleteFailures int
}

func (s *logSink) evidence() evidence {
	s.mu.Lock()
	defer s.mu.Unlock()
	ev := evidence{causes: map[string]string{}}
	for _, l := range s.kept {
		switch {
		case l.Msg == logDeleteFailed:
			ev.deleteFailures++
		case l.Msg == logLeaseLost, l.Msg == logStopped:
		case l.Msg == logRenewedLate, l.Msg == logDeliveredAgain:
			ev.causes[l.MessageID+"|any"] = l.Msg
			continue
		default:
			continue
		}
		ev.causes[l.MessageID+"|"+strconv.Itoa(l.Attempt)] = l.Msg
	}
	return ev
}

func (e evidence) explain(id string, attempt int) string {
	if why := e.causes[id+"|"+strconv.Itoa(attempt)]; why != "" {
		return why
	}
	return e.causes[id+"|any"]
}

// soakDuration is the soak's length from WATCHBOT_SOAK (0: long forms off).
func soakDuration(t *testing.T) time.Duration {
	t.Helper()
	v := os.Getenv("WATCHBOT_SOAK")
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < time.Minute {
		t.Fatalf("WATCHBOT_SOAK=%q: want a duration of at least 1m, e.g. 20m", v)
	}
	return d
}
