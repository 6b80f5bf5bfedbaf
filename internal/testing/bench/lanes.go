//go:build linux

package main

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/internal/testing/faultproxy"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// The lanes beyond throughput: each measures one figure of watchbot on the fauxqs emulator,
// once per round, between the throughput contenders.

// wide measures --concurrency wideSlots with jobs of wideJob against the ideal, every slot
// busy all the time: wideSlots/wideJob messages per second. It also measures what this
// machine can do at all: the same jobs, wideSlots at once, started by a loop with no queue.
// On a small machine starting processes is the limit, so that ceiling is below the ideal.
//
// Each is measured twice: in steady state, the rate between the moments a tenth and nine
// tenths of the messages were done, which is how well the slots are kept busy; and end to
// end, which adds what a run of a few seconds pays once (watchbot's start, the first
// receives, the last jobs finishing with slots idle).
const (
	wideSlots = 64
	wideJob   = 100 * time.Millisecond
)

// wideRun is what one round of the wide lane measured, each as a fraction of the ideal.
type wideRun struct {
	steady, total               float64 // watchbot
	ceilingSteady, ceilingTotal float64 // the loop with no queue
}

func (b *bench) wide(ctx context.Context, name string) (wideRun, error) {
	n := b.o.wideMessages
	ideal := float64(wideSlots) / wideJob.Seconds()
	job := strconv.FormatFloat(wideJob.Seconds(), 'f', -1, 64)
	ceiling := spawnOnly(n, wideSlots, b.sleep, job)
	q, err := newQueue(ctx, b.fauxqs.Client(), name, n, 0)
	if err != nil {
		return wideRun{}, err
	}
	r, err := watchbot(ctx, b.o, b.fauxqs, b.fauxqs.Endpoint, b.fauxqs.Client(), q,
		[]string{"--concurrency", strconv.Itoa(wideSlots)}, nil, b.sleep, job)
	if err != nil {
		return wideRun{}, err
	}
	return wideRun{
		steady:        steadyRate(r.done, n) / ideal,
		total:         float64(n) / r.took.Seconds() / ideal,
		ceilingSteady: steadyRate(ceiling, n) / ideal,
		ceilingTotal:  float64(n) / ceiling[len(ceiling)-1].at.Seconds() / ideal,
	}, nil
}

// doneAt is how many messages were done at a moment of a run, counted from its start.
type doneAt struct {
	at   time.Duration
	done int
}

// steadyRate is the rate, per second, at which the messages of a run of n were done between
// the moments a tenth and nine tenths of them were, each found by linear interpolation
// between the samples around it. Samples are in time order.
func steadyRate(samples []doneAt, n int) float64 {
	when := func(count float64) time.Duration {
		prev := doneAt{}
		for _, s := range samples {
			if float64(s.done) >= count {
				if s.done == prev.done {
					return s.at
				}
				f := (count - float64(prev.done)) / float64(s.done-prev.done)
				return prev.at + time.Duration(f*float64(s.at-prev.at))
			}
			prev = s
		}
		return prev.at
	}
	from, to := when(0.1*float64(n)), when(0.9*float64(n))
	if to <= from {
		return 0
	}
	return 0.8 * float64(n) / (to - from).Seconds()
}

// spawnOnly runs command n times, slots at once, and returns when each run ended.
func spawnOnly(n, slots int, command ...string) []doneAt {
	var (
		left atomic.Int64
		mu   sync.Mutex
		ends []doneAt
	)
	left.Store(int64(n))
	start := time.Now()
	var wg sync.WaitGroup
	for range slots {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				cmd := exec.Command(command[0], command[1:]...)
				cmd.Env = userEnv()
				_ = cmd.Run()
				mu.Lock()
				ends = append(ends, doneAt{at: time.Since(start), done: len(ends) + 1})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return ends
}

// pickup measures how soon a worker starts after a message is sent to the queue an idle
// watchbot long-polls: the bench sends one message at a time, and its own binary, run as
// the worker, reports the moment it starts over a Unix socket. It returns the latencies.
func (b *bench) pickup(ctx context.Context, name string) ([]time.Duration, error) {
	c := b.fauxqs.Client()
	q, err := newQueue(ctx, c, name, 0, 0)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "watchbot-bench-pickup-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "starts")
	l, err := net.Listen("unix", sock)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	starts := make(chan time.Time, 16)
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			line, _ := bufio.NewReader(conn).ReadString('\n')
			conn.Close()
			if ns, err := strconv.ParseInt(strings.TrimSpace(line), 10, 64); err == nil {
				starts <- time.Unix(0, ns)
			}
		}
	}()
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	p, err := startListen(b.o, b.fauxqs, q, []string{"--concurrency", "8"}, []string{pickupSocketEnv + "=" + sock}, self)
	if err != nil {
		return nil, err
	}
	defer p.kill()
	if err := p.waitReady(ctx); err != nil {
		return nil, err
	}
	var lat []time.Duration
	for i := range b.o.pickups {
		// Send at a random moment after the last job, so sends meet the long poll at every stage.
		time.Sleep(time.Duration(20+rand.IntN(80)) * time.Millisecond)
		sent := time.Now()
		if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q), MessageBody: aws.String(strconv.Itoa(i))}); err != nil {
			return nil, err
		}
		select {
		case at := <-starts:
			lat = append(lat, at.Sub(sent))
		case <-time.After(30 * time.Second):
			return nil, fmt.Errorf("pick-up: message %d did not start a worker within 30 s; log: %s", i, p.logs.Name())
		}
	}
	return lat, p.stop()
}

// pickupSocketEnv names the Unix socket the bench's own binary, run as a worker, reports its
// start to.
const pickupSocketEnv = "WATCHBOT_BENCH_PICKUP_SOCKET"

// reportStart is the bench binary run as a pick-up worker: it tells the bench when it started.
func reportStart(sock string) {
	now := time.Now()
	conn, err := net.Dial("unix", sock)
	if err != nil {
		os.Exit(1)
	}
	fmt.Fprintf(conn, "%d\n", now.UnixNano())
	conn.Close()
}

// faultRun is one drain of faultMessages messages with a faultLease lease.
type faultRun struct {
	took       time.Duration
	injections map[string]int // "ReceiveMessage DropAfter" → count
	// lostReceives are when receive answers were lost after SQS had handed out their
	// messages, counted from watchbot's start: those messages are out of reach for a lease.
	lostReceives []time.Duration
	firstPass    firstPass
	log          string
}

const (
	faultMessages = 300
	faultLease    = 6 * time.Second
)

// shortReceiveLease are the flags of the fault lane's third drain: a receive leases its
// messages for 4 s, not the whole lease, so a lost receive answer hides them that long; with a
// kill grace of 1 s that is the shortest --receive-visibility allows.
var shortReceiveLease = []string{"--receive-visibility", "4s", "--kill-grace", "1s"}

// thirtyPercent makes 30% of every SQS call fail: 10% answered 500, 10% throttled, 10% lost
// after they took effect.
func thirtyPercent() []faultproxy.Rule {
	all := []string{faultproxy.AnyOperation}
	return []faultproxy.Rule{
		{Operations: all, Fault: faultproxy.ServerError, Rate: 0.1},
		{Operations: all, Fault: faultproxy.Throttle, Rate: 0.1 / 0.9},
		{Operations: all, Fault: faultproxy.DropAfter, Rate: 0.1 / 0.8},
	}
}

// faults drains faultMessages messages through a fault-injecting proxy, with rules (none for
// the fault-free run) and listen's extra flags, and returns how long it took and what was
// injected.
func (b *bench) faults(ctx context.Context, name string, rules []faultproxy.Rule, seed int64, extra ...string) (faultRun, error) {
	direct := b.fauxqs.Client()
	q, err := testenv.CreateQueue(ctx, direct, name, testenv.QueueOptions{MaxReceiveCount: 10, VisibilityTimeout: faultLease})
	if err != nil {
		return faultRun{}, err
	}
	bodies := make([]string, faultMessages)
	for i := range bodies {
		bodies[i] = strconv.Itoa(i)
	}
	if _, err := testenv.Send(ctx, direct, q.URL, bodies, nil); err != nil {
		return faultRun{}, err
	}
	p, err := faultproxy.New(b.fauxqs.Endpoint, faultproxy.Config{Rules: rules, Seed: seed})
	if err != nil {
		return faultRun{}, err
	}
	url, err := p.Start()
	if err != nil {
		return faultRun{}, err
	}
	defer p.Close()
	// watchbot's /metrics times each receive and short-lease extension: scraped through the
	// drain, they say where its first pass went.
	metricsAddr, err := freeAddr()
	if err != nil {
		return faultRun{}, err
	}
	flags := []string{"--concurrency", "8", "--visibility-timeout", faultLease.String(), "--http-addr", metricsAddr}
	scrapes := scrapeReceives(ctx, metricsAddr)
	r, err := watchbot(ctx, b.o, b.fauxqs, url, direct, q.URL, append(flags, extra...), nil, b.worker)
	samples := scrapes()
	if err != nil {
		return faultRun{}, err
	}
	inj := map[string]int{}
	var lost []time.Duration
	for _, i := range p.Injections() {
		inj[i.Operation+" "+string(i.Fault)]++
		if i.Operation == "ReceiveMessage" && i.Fault == faultproxy.DropAfter {
			lost = append(lost, i.Elapsed)
		}
	}
	return faultRun{took: r.took, injections: inj, lostReceives: lost, firstPass: readFirstPass(r.log, samples), log: r.log}, nil
}

// stopRun is one stop of an idle watchbot.
type stopRun struct {
	took time.Duration // from SIGTERM to exit
	// hidden is how long a message sent just after the exit stayed out of reach: none, since
	// the stop waits for its last long poll rather than abandon it to take the message.
	hidden time.Duration
}

// stop starts watchbot on an empty queue, lets it long-poll, stops it with SIGTERM and
// measures how long it takes to exit; then it sends a message and measures how long the
// message takes to become receivable.
func (b *bench) stop(ctx context.Context, name string) (stopRun, error) {
	c := b.fauxqs.Client()
	q, err := newQueue(ctx, c, name, 0, 0)
	if err != nil {
		return stopRun{}, err
	}
	p, err := startListen(b.o, b.fauxqs, q, []string{"--concurrency", "8"}, nil, b.worker)
	if err != nil {
		return stopRun{}, err
	}
	defer p.kill()
	if err := p.waitReady(ctx); err != nil {
		return stopRun{}, err
	}
	time.Sleep(time.Duration(200+rand.IntN(800)) * time.Millisecond) // somewhere in the long poll
	start := time.Now()
	if err := p.stop(); err != nil {
		return stopRun{}, err
	}
	r := stopRun{took: time.Since(start)}
	if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q), MessageBody: aws.String("after the stop")}); err != nil {
		return stopRun{}, err
	}
	sent := time.Now()
	for {
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q), WaitTimeSeconds: 1})
		if err != nil {
			return stopRun{}, err
		}
		if len(out.Messages) > 0 {
			r.hidden = time.Since(sent)
			return r, nil
		}
		if time.Since(sent) > 10*time.Minute {
			return stopRun{}, fmt.Errorf("stop: a message sent after the exit stayed hidden for 10 minutes")
		}
	}
}

// process is a watchbot listen started by a lane, with its log in a file.
type process struct {
	cmd  *exec.Cmd
	logs *os.File
	addr string
}

// startListen starts watchbot listen on queue with extra flags and environment, serving its
// readiness on a free port of 127.0.0.1.
func startListen(o options, emu *testenv.Emulator, queue string, extra, env []string, worker ...string) (*process, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	args := append([]string{"listen", "--queue-url", queue, "--endpoint-url", emu.Endpoint, "--http-addr", addr}, extra...)
	cmd := exec.Command(o.binary, append(append(args, "--"), worker...)...)
	cmd.Env = userEnv(append(emu.Env(), env...)...)
	logs, err := os.CreateTemp("", "watchbot-bench-*.log")
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		logs.Close()
		return nil, err
	}
	return &process{cmd: cmd, logs: logs, addr: addr}, nil
}

// waitReady waits until watchbot answers /readyz, that is, it has started receiving.
func (p *process) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.addr+"/readyz", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				time.Sleep(100 * time.Millisecond) // its first long poll is under way
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("watchbot was not ready within 30 s; log: %s", p.logs.Name())
}

// stop sends SIGTERM and waits for the exit; a non-zero exit is an error.
func (p *process) stop() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	err := p.cmd.Wait()
	p.cmd.Process = nil
	if err != nil {
		return fmt.Errorf("watchbot exited with %v; log: %s", err, p.logs.Name())
	}
	os.Remove(p.logs.Name())
	return nil
}

// waitEmpty waits until queue holds no message, visible or in flight, for at most 10 minutes.
func (p *process) waitEmpty(ctx context.Context, c *sqs.Client, queue string) error {
	start := time.Now()
	for {
		info, err := queueattr.Describe(ctx, c, queue)
		if err != nil {
			return err
		}
		if info.Visible == 0 && info.InFlight == 0 {
			return nil
		}
		if time.Since(start) > 10*time.Minute {
			return fmt.Errorf("watchbot did not empty the queue in 10 minutes; log: %s", p.logs.Name())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill ends the process if it still runs.
func (p *process) kill() {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
	}
	p.logs.Close()
}

// percentile returns the p-th percentile (0..1) of ds, nearest rank.
func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}
