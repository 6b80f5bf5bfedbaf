//go:build linux

// Command bench measures watchbot against a minimal receive → spawn → batch-delete loop on
// the same local SQS emulator, in one run, and prints the figures as ratios. It is run by
// `make bench` (scripts/bench); it is not part of the product. With WATCHBOT_BENCH_KEEP_LOGS
// set, it keeps each watchbot run's log and prints where. With WATCHBOT_BENCH_CPUPROFILE set to a
// directory, and -watchbot built with -tags benchprofile, each watchbot run writes its CPU
// profile there, named after its queue.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/internal/testing/fakesqs"
	"github.com/watchbot/watchbot/internal/testing/faultproxy"
	"github.com/watchbot/watchbot/internal/testing/otlpsink"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

func main() {
	if sock := os.Getenv(pickupSocketEnv); sock != "" {
		reportStart(sock) // run as the pick-up lane's worker
		return
	}
	if spec := os.Getenv(baselineEnv); spec != "" {
		if err := runBaseline(spec); err != nil { // run as the baseline loop
			fmt.Fprintln(os.Stderr, "bench baseline:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// userEnv is the environment of every process the bench starts, built from nothing as a
// user's machine gives it, with vars added: the bench measures what users get. HOME names no
// directory: nothing the bench starts reads one.
func userEnv(vars ...string) []string { return testenv.UserEnv("/nonexistent", vars...) }

type options struct {
	messages     int
	wideMessages int
	pickups      int
	concurrency  int
	groups       int
	rounds       int
	binary       string
	worker       string
	page         string
	lanes        map[string]bool
}

// bench holds what every lane uses: the options, the emulators and the worker commands.
type bench struct {
	o      options
	fauxqs *testenv.Emulator
	worker string          // the throughput worker, resolved
	sleep  string          // sleep(1), the wide lane's worker
	dynamo *testenv.Dynamo // started by the dedupe lane
	sink   *otlpsink.Sink  // started by the tracing lane
}

// allLanes are the lanes of the bench, the default of -lanes.
var allLanes = []string{"throughput", "wide", "pickup", "stop", "faults", "dedupe", "tracing", "queues", "limits"}

func run() error {
	var o options
	flag.IntVar(&o.messages, "messages", 3000, "messages preloaded for each throughput contender")
	flag.IntVar(&o.wideMessages, "wide-messages", 2000, "messages of the --concurrency 64, 100 ms jobs lane")
	flag.IntVar(&o.pickups, "pickups", 200, "messages sent one at a time to an idle watchbot, per round")
	flag.IntVar(&o.concurrency, "concurrency", 8, "watchbot --concurrency")
	flag.IntVar(&o.groups, "groups", 16, "message groups of the FIFO cases")
	flag.IntVar(&o.rounds, "rounds", 3, "interleaved rounds; figures are the medians")
	flag.StringVar(&o.binary, "watchbot", "bin/watchbot", "the watchbot binary")
	flag.StringVar(&o.worker, "worker", "true", "the worker command")
	flag.StringVar(&o.page, "page", "", "rewrite the performance table of this Markdown page (docs/performance.md) with the figures")
	lanes := flag.String("lanes", strings.Join(allLanes, ","), "the lanes to run (comma-separated); -page needs them all")
	flag.Parse()
	o.lanes = map[string]bool{}
	for _, l := range strings.Split(*lanes, ",") {
		if !slices.Contains(allLanes, l) {
			return fmt.Errorf("-lanes: unknown lane %q (%s)", l, strings.Join(allLanes, ", "))
		}
		o.lanes[l] = true
	}
	if o.page != "" && !o.fullReport() {
		return fmt.Errorf("-page needs the lanes %s at least", strings.Join(reportLanes, ", "))
	}
	if o.messages < 100 || o.wideMessages < 100 || o.pickups < 10 || o.concurrency < 1 || o.groups < 1 || o.rounds < 1 {
		return fmt.Errorf("-messages and -wide-messages must be at least 100, -pickups at least 10, -concurrency, -groups and -rounds at least 1")
	}
	worker, err := exec.LookPath(o.worker)
	if err != nil {
		return err
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		return err
	}
	fauxqs, err := testenv.Start()
	if err != nil {
		return err
	}
	fake := fakesqs.New()
	endpoint, closeFake, err := fake.Listen()
	if err != nil {
		return err
	}
	defer closeFake()
	sqsLike := &testenv.Emulator{Endpoint: endpoint}
	b := &bench{o: o, fauxqs: fauxqs, worker: worker, sleep: sleep}
	defer func() {
		if b.sink != nil {
			b.sink.Close()
		}
	}()

	// The contenders, run once each per round in this order, so that a slow moment of the
	// machine costs every contender alike; ratios are taken within a round.
	contenders := []contender{
		{name: "baseline (receive 10 → spawn 10 → batch delete)", emu: fauxqs, baseline: true},
		{name: fmt.Sprintf("watchbot listen --concurrency %d", o.concurrency), emu: fauxqs},
		{name: "watchbot, FIFO, fauxqs (one message per group per receive)", emu: fauxqs, groups: o.groups},
		{name: "watchbot, standard queue, fakesqs", emu: sqsLike},
		{name: "watchbot, FIFO, fakesqs (SQS's FIFO delivery)", emu: sqsLike, groups: o.groups},
		{name: "watchbot --http-worker (an application answering 200)", emu: fauxqs, http: true},
		{name: "watchbot --lambda (an aws-lambda-go handler returning at once, --batch-size 10)", emu: fauxqs, lambda: true},
	}
	fmt.Printf("%d messages per run, worker %q, %d cores, %d interleaved rounds; medians (min–max)\n", o.messages, worker, numCPU(), o.rounds)
	ctx := context.Background()
	results := make([][]result, len(contenders))
	var (
		wide                 []wideRun
		pickups              []time.Duration
		stops                []stopRun
		clean, faulty, short []faultRun
		dedupes, tracings    []float64
		twoQueues            []float64
		limitRuns            []limitsRun
	)
	for round := range o.rounds {
		for i, c := range contenders {
			if !o.lanes["throughput"] {
				break
			}
			r, err := c.measure(ctx, o, worker, fmt.Sprintf("bench-%d-%d", round, i))
			if err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			results[i] = append(results[i], r)
		}
		if o.lanes["wide"] {
			w, err := b.wide(ctx, fmt.Sprintf("bench-%d-wide", round))
			if err != nil {
				return fmt.Errorf("wide lane: %w", err)
			}
			wide = append(wide, w)
		}
		if o.lanes["pickup"] {
			lat, err := b.pickup(ctx, fmt.Sprintf("bench-%d-pickup", round))
			if err != nil {
				return fmt.Errorf("pick-up lane: %w", err)
			}
			pickups = append(pickups, lat...)
		}
		for k := range 3 {
			if !o.lanes["stop"] {
				break
			}
			st, err := b.stop(ctx, fmt.Sprintf("bench-%d-stop-%d", round, k))
			if err != nil {
				return fmt.Errorf("stop lane: %w", err)
			}
			stops = append(stops, st)
		}
		if o.lanes["dedupe"] {
			d, err := b.dedupeCost(ctx, fmt.Sprintf("bench-%d-dedupe", round))
			if err != nil {
				return fmt.Errorf("dedupe lane: %w", err)
			}
			dedupes = append(dedupes, d)
		}
		if o.lanes["tracing"] {
			tr, err := b.tracingCost(ctx, fmt.Sprintf("bench-%d-tracing", round))
			if err != nil {
				return err
			}
			tracings = append(tracings, tr)
		}
		if o.lanes["limits"] {
			lr, err := b.limitsCost(ctx, fmt.Sprintf("bench-%d-limits", round))
			if err != nil {
				return fmt.Errorf("limits lane: %w", err)
			}
			limitRuns = append(limitRuns, lr)
		}
		if o.lanes["queues"] {
			q, err := b.twoQueues(ctx, fmt.Sprintf("bench-%d-queues", round))
			if err != nil {
				return fmt.Errorf("queues lane: %w", err)
			}
			twoQueues = append(twoQueues, q)
		}
		if !o.lanes["faults"] {
			continue
		}
		fr, err := b.faults(ctx, fmt.Sprintf("bench-%d-clean", round), nil, 0)
		if err != nil {
			return fmt.Errorf("fault lane, no faults: %w", err)
		}
		clean = append(clean, fr)
		fr, err = b.faults(ctx, fmt.Sprintf("bench-%d-faults", round), thirtyPercent(), int64(round+1))
		if err != nil {
			return fmt.Errorf("fault lane: %w", err)
		}
		faulty = append(faulty, fr)
		fr, err = b.faults(ctx, fmt.Sprintf("bench-%d-short", round), thirtyPercent(), int64(round+1), shortReceiveLease...)
		if err != nil {
			return fmt.Errorf("fault lane, short receive lease: %w", err)
		}
		short = append(short, fr)
	}
	rep := report{o: o, contenders: contenders, results: results, wide: wide, pickups: pickups, stops: stops, clean: clean, faulty: faulty, short: short, dedupes: dedupes, tracings: tracings, twoQueues: twoQueues, limits: limitRuns}
	rep.print(os.Stdout)
	if o.page != "" {
		return rep.rewrite(o.page)
	}
	return nil
}

// httpContender and lambdaContender are the indexes of the --http-worker and --lambda
// contenders among run's.
const (
	httpContender   = 5
	lambdaContender = 6
)

// contender is one way of emptying a preloaded queue: the baseline loop or watchbot, on a
// standard queue or a FIFO queue of groups groups, on one server.
type contender struct {
	name     string
	emu      *testenv.Emulator
	baseline bool
	groups   int
	// http runs watchbot with --http-worker against an application in the bench's process
	// that answers every POST 200 at once, so no process is started per message.
	http bool
	// lambda runs watchbot with --lambda and --concurrency runtimes of an aws-lambda-go handler
	// that returns at once, ten messages an invocation.
	lambda bool
}

// result is one run of a contender.
type result struct {
	rate, reqPerMsg float64
	detail          string
	rss             int           // KiB, watchbot only
	cpuPerMsg       time.Duration // watchbot's own CPU per message
	// failedReceives is how many receives failed (watchbot's log). No fault is injected, so
	// none should: on fauxqs, which ignores ReceiveRequestAttemptId, a failed receive's
	// messages wait out --receive-visibility, a stall the run's figures would include. (The
	// counting proxy cut answers short until it read each request whole before forwarding.)
	failedReceives int
}

// measure preloads a fresh queue, empties it through a counting proxy and returns the figures.
func (c contender) measure(ctx context.Context, o options, worker, name string) (result, error) {
	direct := c.emu.Client()
	q, err := newQueue(ctx, direct, name, o.messages, c.groups)
	if err != nil {
		return result{}, err
	}
	proxy, url, err := countingProxy(c.emu.Endpoint)
	if err != nil {
		return result{}, err
	}
	defer proxy.Close()
	var r listenRun
	switch {
	case c.baseline:
		r, err = baselineProcess(url, q, worker, o.messages)
	case c.http:
		app, stop, aerr := okApplication()
		if aerr != nil {
			return result{}, aerr
		}
		r, err = watchbot(ctx, o, c.emu, url, direct, q, []string{"--concurrency", strconv.Itoa(o.concurrency), "--http-worker", app}, nil)
		stop()
	case c.lambda:
		handler, herr := lambdaHandler()
		if herr != nil {
			return result{}, herr
		}
		addr, aerr := freeAddr()
		if aerr != nil {
			return result{}, aerr
		}
		r, err = watchbot(ctx, o, c.emu, url, direct, q, []string{"--concurrency", strconv.Itoa(o.concurrency), "--lambda", "--batch-size", "10", "--http-addr", addr}, nil, handler)
		// Timed from its readiness: the runtimes' start is that of the application the
		// --http-worker lane starts before its clock.
		r.took -= r.ready
	default:
		r, err = watchbot(ctx, o, c.emu, url, direct, q, []string{"--concurrency", strconv.Itoa(o.concurrency)}, nil, worker)
	}
	if err != nil {
		return result{}, err
	}
	reqs, detail := requests(proxy)
	return result{rate: float64(o.messages) / r.took.Seconds(), reqPerMsg: float64(reqs) / float64(o.messages), detail: detail,
		rss: r.rss, cpuPerMsg: r.cpu / time.Duration(o.messages), failedReceives: strings.Count(r.log, `"msg":"receive failed`)}, nil
}

// lambdaHandler builds the tests' aws-lambda-go handler once; without HANDLER_DIR it returns
// at once, every record done.
var lambdaHandler = sync.OnceValues(func() (string, error) {
	root, err := testenv.Root()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "watchbot-bench-lambda-")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "bootstrap")
	cmd := exec.Command("go", "build", "-o", path, "./cmd/watchbot/testdata/lambdahandler")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the Lambda handler: %w\n%s", err, out)
	}
	return path, nil
})

// okApplication serves, on loopback, an HTTP worker application that reads each POST's body
// and answers 200: the least an --http-worker application can do. It returns its URL and a
// function that stops it.
func okApplication() (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("HTTP worker application: %w", err)
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
	})}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ln)
	}()
	return "http://" + ln.Addr().String() + "/", func() { _ = srv.Close(); <-served }, nil
}

// median returns the median of f over rs.
func median(rs []result, f func(result) float64) float64 {
	vs := make([]float64, len(rs))
	for i, r := range rs {
		vs[i] = f(r)
	}
	slices.Sort(vs)
	if n := len(vs); n%2 == 0 {
		return (vs[n/2-1] + vs[n/2]) / 2
	}
	return vs[len(vs)/2]
}

// spread formats the median of f over rs with its range.
func spread(rs []result, f func(result) float64, format string) string {
	lo, hi := f(rs[0]), f(rs[0])
	for _, r := range rs {
		lo, hi = min(lo, f(r)), max(hi, f(r))
	}
	return fmt.Sprintf(format+" ("+format+"–"+format+")", median(rs, f), lo, hi)
}

func numCPU() int {
	data, _ := os.ReadFile("/proc/cpuinfo")
	return strings.Count(string(data), "processor\t:")
}

// newQueue creates a queue and its DLQ (maxReceiveCount 5) as the tests do and preloads n
// messages; with groups > 0 the queue is FIFO and message i goes to group i mod groups.
func newQueue(ctx context.Context, c *sqs.Client, name string, n, groups int) (string, error) {
	q, err := testenv.CreateQueue(ctx, c, name, testenv.QueueOptions{MaxReceiveCount: 5, FIFO: groups > 0})
	if err != nil {
		return "", err
	}
	bodies := make([]string, n)
	for i := range bodies {
		bodies[i] = fmt.Sprintf(`{"job":%d}`, i)
	}
	var group func(int) string
	if groups > 0 {
		group = func(i int) string { return "g" + strconv.Itoa(i%groups) }
	}
	if _, err := testenv.Send(ctx, c, q.URL, bodies, group); err != nil {
		return "", fmt.Errorf("preload: %w", err)
	}
	return q.URL, nil
}

// baselineEnv, set, runs the bench's own binary as the baseline loop: "endpoint queue worker
// messages", space-separated. Run as a process of its own, its CPU is measured as watchbot's is.
const baselineEnv = "WATCHBOT_BENCH_BASELINE"

// baselineProcess runs the baseline loop in a process of its own and returns the time it
// took and its own CPU time (its children excluded), which it reports on stdout as it ends.
func baselineProcess(endpoint, queue, worker string, n int) (listenRun, error) {
	self, err := os.Executable()
	if err != nil {
		return listenRun{}, err
	}
	cmd := exec.Command(self)
	cmd.Env = userEnv(fmt.Sprintf("%s=%s %s %s %d", baselineEnv, endpoint, queue, worker, n))
	cmd.Stderr = os.Stderr
	start := time.Now()
	out, err := cmd.Output()
	if err != nil {
		return listenRun{}, fmt.Errorf("baseline: %w", err)
	}
	took := time.Since(start)
	cpu, err := time.ParseDuration(strings.TrimSpace(string(out)))
	if err != nil {
		return listenRun{}, fmt.Errorf("baseline: its CPU time %q: %w", out, err)
	}
	return listenRun{took: took, cpu: cpu}, nil
}

// runBaseline is the bench's binary run as the baseline loop (baselineEnv): it empties the
// queue and prints its own CPU time.
func runBaseline(spec string) error {
	f := strings.Fields(spec)
	if len(f) != 4 {
		return fmt.Errorf("%s=%q: want endpoint, queue, worker and messages", baselineEnv, spec)
	}
	n, err := strconv.Atoi(f[3])
	if err != nil {
		return err
	}
	if err := baseline(context.Background(), testenv.ClientFor(f[0]), f[1], f[2], n); err != nil {
		return err
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return err
	}
	fmt.Println(time.Duration(ru.Utime.Nano() + ru.Stime.Nano()))
	return nil
}

// baseline is the smallest reasonable consumer: receive 10, run the worker for each at once,
// delete the batch.
func baseline(ctx context.Context, c *sqs.Client, queue, worker string, n int) error {
	done := 0
	for done < n {
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(queue), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		if err != nil {
			return fmt.Errorf("baseline receive: %w", err)
		}
		var wg sync.WaitGroup
		entries := make([]types.DeleteMessageBatchRequestEntry, len(out.Messages))
		for i, m := range out.Messages {
			entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle}
			wg.Go(func() {
				cmd := exec.Command(worker)
				cmd.Env = userEnv()
				cmd.Stdin = strings.NewReader(aws.ToString(m.Body))
				_ = cmd.Run()
			})
		}
		wg.Wait()
		if len(entries) > 0 {
			if _, err := c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(queue), Entries: entries}); err != nil {
				return fmt.Errorf("baseline delete: %w", err)
			}
		}
		done += len(out.Messages)
	}
	return nil
}

// watchbot runs the real binary, with listen's extra flags, until the queue is empty and
// returns the time it took, its peak RSS and the CPU time it used itself (children excluded).
func watchbot(ctx context.Context, o options, emu *testenv.Emulator, endpoint string, direct *sqs.Client, queue string, extra, env []string, worker ...string) (listenRun, error) {
	args := append([]string{"listen", "--queue-url", queue, "--endpoint-url", endpoint}, extra...)
	cmd := exec.Command(o.binary, append(append(args, "--"), worker...)...)
	if dir := os.Getenv("WATCHBOT_BENCH_CPUPROFILE"); dir != "" {
		env = append(slices.Clip(env), "WATCHBOT_CPUPROFILE="+filepath.Join(dir, queueattr.NameFromURL(queue)+".pprof"))
	}
	cmd.Env = userEnv(append(emu.Env(), env...)...)
	logs, err := os.CreateTemp("", "watchbot-bench-*.log")
	if err != nil {
		return listenRun{}, err
	}
	defer logs.Close()
	cmd.Stdout, cmd.Stderr = logs, logs
	before, err := queueattr.Describe(ctx, direct, queue)
	if err != nil {
		return listenRun{}, err
	}
	preloaded := before.Visible + before.InFlight
	var done []doneAt
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return listenRun{}, err
	}
	// Buffered: after an early exit the poll ends on its own, within its minute.
	ready := make(chan time.Duration, 1)
	i := slices.Index(extra, "--http-addr")
	polling := i >= 0 && i+1 < len(extra)
	if polling {
		go func() { ready <- readyAfter(extra[i+1], start) }()
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() { _ = cmd.Process.Kill(); <-exited }()
	for {
		select {
		case err := <-exited:
			exited <- err
			return listenRun{}, fmt.Errorf("watchbot exited before the queue was empty (%v); log: %s", err, logs.Name())
		case <-time.After(20 * time.Millisecond):
		}
		info, err := queueattr.Describe(ctx, direct, queue)
		if err != nil {
			return listenRun{}, err
		}
		done = append(done, doneAt{at: time.Since(start), done: int(preloaded - info.Visible - info.InFlight)})
		if info.Visible == 0 && info.InFlight == 0 {
			break
		}
		if time.Since(start) > 10*time.Minute {
			return listenRun{}, fmt.Errorf("watchbot did not empty the queue in 10 minutes; log: %s", logs.Name())
		}
	}
	r := listenRun{took: time.Since(start), done: done, rss: peakRSS(cmd.Process.Pid), cpu: ownCPU(cmd.Process.Pid)}
	if polling {
		r.ready = <-ready // it was ready: it emptied the queue
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	exited <- <-exited
	if data, err := os.ReadFile(logs.Name()); err == nil {
		r.log = string(data)
	}
	if os.Getenv("WATCHBOT_BENCH_KEEP_LOGS") == "" {
		os.Remove(logs.Name()) // kept when the run failed
	} else {
		fmt.Fprintf(os.Stderr, "bench: %s's log: %s\n", queue, logs.Name())
	}
	return r, nil
}

// listenRun is what one watchbot run measured.
type listenRun struct {
	took time.Duration
	done []doneAt      // the messages done, sampled as the queue was watched (of a preloaded queue)
	rss  int           // peak RSS, KiB
	cpu  time.Duration // the process's own user and system time, its children excluded
	log  string
	// ready is when /readyz first answered 200, from the start; 0 without --http-addr.
	ready time.Duration
}

// readyAfter polls http://addr/readyz until it answers 200 and returns when, from start;
// it gives up (0) after a minute, when watchbot has long exited.
func readyAfter(addr string, start time.Time) time.Duration {
	c := http.Client{Timeout: time.Second}
	for time.Since(start) < time.Minute {
		if resp, err := c.Get("http://" + addr + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Since(start)
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	return 0
}

// ownCPU reads a process's own user and system CPU time from /proc/PID/stat (fields 14 and
// 15, in clock ticks of 1/100 s, the USER_HZ every Linux build exposes; see proc(5)); the
// time of its waited-for children is in other fields, so it is excluded.
func ownCPU(pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name, field 2, is in parentheses and may hold spaces: count after it.
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0
	}
	utime, _ := strconv.Atoi(fields[11])
	stime, _ := strconv.Atoi(fields[12])
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

func peakRSS(pid int) int {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return n
		}
	}
	return 0
}

// countingProxy starts a faultproxy with no rules in front of upstream: it forwards every
// request and counts them by operation.
func countingProxy(upstream string) (*faultproxy.Proxy, string, error) {
	p, err := faultproxy.New(upstream, faultproxy.Config{})
	if err != nil {
		return nil, "", err
	}
	url, err := p.Start()
	if err != nil {
		return nil, "", err
	}
	return p, url, nil
}

// requests returns how many requests p received, and how many of each operation ("ReceiveMessage 310, ...").
func requests(p *faultproxy.Proxy) (int, string) {
	st := p.Stats()
	var parts []string
	for _, op := range slices.Sorted(maps.Keys(st.Operations)) {
		parts = append(parts, fmt.Sprintf("%s %d", op, st.Operations[op].Requests))
	}
	return st.Total().Requests, strings.Join(parts, ", ")
}
