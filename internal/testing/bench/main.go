// Command bench measures watchbot against a minimal receive → spawn → batch-delete loop on
// the same local SQS emulator, in one run, and prints the figures as ratios. It is run by
// `make bench` (scripts/bench); it is not part of the product.
package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
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
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type options struct {
	messages    int
	concurrency int
	groups      int
	binary      string
	worker      string
}

func run() error {
	var o options
	flag.IntVar(&o.messages, "messages", 3000, "messages preloaded for each contender")
	flag.IntVar(&o.concurrency, "concurrency", 8, "watchbot --concurrency")
	flag.IntVar(&o.groups, "groups", 16, "message groups of the FIFO cases")
	flag.StringVar(&o.binary, "watchbot", "bin/watchbot", "the watchbot binary")
	flag.StringVar(&o.worker, "worker", "true", "the worker command")
	flag.Parse()
	if o.messages < 100 || o.concurrency < 1 || o.groups < 1 {
		return fmt.Errorf("-messages must be at least 100, -concurrency and -groups at least 1")
	}
	worker, err := exec.LookPath(o.worker)
	if err != nil {
		return err
	}
	emu, err := testenv.Start()
	if err != nil {
		return err
	}
	direct := emu.Client()
	ctx := context.Background()

	fmt.Printf("preloading %d messages per contender into the fauxqs emulator; worker %q; %d cores\n", o.messages, worker, numCPU())
	qBase, err := newQueue(ctx, direct, "bench-baseline", o.messages, 0)
	if err != nil {
		return err
	}
	qWatchbot, err := newQueue(ctx, direct, "bench-watchbot", o.messages, 0)
	if err != nil {
		return err
	}

	baseProxy, baseURL, err := countingProxy(emu.Endpoint)
	if err != nil {
		return err
	}
	defer baseProxy.Close()
	start := time.Now()
	if err := baseline(ctx, testenv.ClientFor(baseURL), qBase, worker, o.messages); err != nil {
		return err
	}
	baseTime := time.Since(start)
	baseReqs, _ := requests(baseProxy)

	wbProxy, wbURL, err := countingProxy(emu.Endpoint)
	if err != nil {
		return err
	}
	defer wbProxy.Close()
	wbTime, rss, err := watchbot(ctx, o, emu, wbURL, direct, qWatchbot, worker)
	if err != nil {
		return err
	}
	wbReqs, wbDetail := requests(wbProxy)

	fifo, err := fifoCases(ctx, o, emu, worker)
	if err != nil {
		return err
	}

	baseRate := float64(o.messages) / baseTime.Seconds()
	wbRate := float64(o.messages) / wbTime.Seconds()
	fmt.Println()
	fmt.Printf("%-44s %12s %14s\n", "", "messages/s", "SQS req/msg")
	fmt.Printf("%-44s %12.0f %14.3f\n", "baseline (receive 10 → spawn 10 → batch delete)", baseRate, float64(baseReqs)/float64(o.messages))
	fmt.Printf("%-44s %12.0f %14.3f\n", fmt.Sprintf("watchbot listen --concurrency %d", o.concurrency), wbRate, float64(wbReqs)/float64(o.messages))
	fmt.Println()
	fmt.Printf("throughput ratio watchbot/baseline: %.2f (goal ≥ 0.8)\n", wbRate/baseRate)
	fmt.Printf("watchbot SQS requests per message:  %.3f (goal ≤ 0.3): %s\n", float64(wbReqs)/float64(o.messages), wbDetail)
	fmt.Printf("watchbot peak RSS:                  %.1f MiB\n", float64(rss)/1024)
	fmt.Println()
	fmt.Printf("FIFO: --concurrency %d, %d message groups, the same %d messages, ratio to a standard queue on the same server\n", o.concurrency, o.groups, o.messages)
	for _, f := range fifo {
		fmt.Printf("  %-52s %6.0f msg/s vs %6.0f standard: ratio %.2f, %.3f SQS req/msg\n", f.server, f.fifoRate, f.stdRate, f.fifoRate/f.stdRate, f.reqPerMsg)
	}
	return nil
}

// fifoFigures is watchbot on a FIFO queue and on a standard one, on one server.
type fifoFigures struct {
	server            string
	fifoRate, stdRate float64
	reqPerMsg         float64
}

// fifoCases runs watchbot on a standard queue and on a FIFO queue of o.groups groups, on two
// servers: fakesqs, which delivers FIFO messages as SQS does (as many of one group per receive
// as it can), and fauxqs, which returns one message per group per receive.
func fifoCases(ctx context.Context, o options, fauxqs *testenv.Emulator, worker string) ([]fifoFigures, error) {
	fake := fakesqs.New()
	endpoint, closeFake, err := fake.Listen()
	if err != nil {
		return nil, err
	}
	defer closeFake()
	servers := []struct {
		name string
		emu  *testenv.Emulator
	}{
		{"fakesqs (SQS's FIFO delivery)", &testenv.Emulator{Endpoint: endpoint}},
		{"fauxqs (one message per group per receive)", fauxqs},
	}
	var out []fifoFigures
	for _, srv := range servers {
		direct := srv.emu.Client()
		f := fifoFigures{server: srv.name}
		for _, fifo := range []bool{false, true} {
			name := "bench-std"
			groups := 0
			if fifo {
				name, groups = "bench-fifo", o.groups
			}
			q, err := newQueue(ctx, direct, name, o.messages, groups)
			if err != nil {
				return nil, err
			}
			proxy, url, err := countingProxy(srv.emu.Endpoint)
			if err != nil {
				return nil, err
			}
			took, _, err := watchbot(ctx, o, srv.emu, url, direct, q, worker)
			reqs, _ := requests(proxy)
			proxy.Close()
			if err != nil {
				return nil, fmt.Errorf("%s, fifo %v: %w", srv.name, fifo, err)
			}
			rate := float64(o.messages) / took.Seconds()
			if fifo {
				f.fifoRate, f.reqPerMsg = rate, float64(reqs)/float64(o.messages)
			} else {
				f.stdRate = rate
			}
		}
		out = append(out, f)
	}
	return out, nil
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

// watchbot runs the real binary until the queue is empty and returns the time it took and
// its peak RSS in KiB.
func watchbot(ctx context.Context, o options, emu *testenv.Emulator, endpoint string, direct *sqs.Client, queue, worker string) (time.Duration, int, error) {
	cmd := exec.Command(o.binary, "listen", "--queue-url", queue, "--endpoint-url", endpoint,
		"--concurrency", strconv.Itoa(o.concurrency), "--", worker)
	cmd.Env = append(os.Environ(), emu.Env()...)
	logs, err := os.CreateTemp("", "watchbot-bench-*.log")
	if err != nil {
		return 0, 0, err
	}
	defer os.Remove(logs.Name())
	defer logs.Close()
	cmd.Stdout, cmd.Stderr = logs, logs
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	for {
		time.Sleep(20 * time.Millisecond)
		info, err := queueattr.Describe(ctx, direct, queue)
		if err != nil {
			return 0, 0, err
		}
		if info.Visible == 0 && info.InFlight == 0 {
			break
		}
		if time.Since(start) > 10*time.Minute {
			return 0, 0, fmt.Errorf("watchbot did not empty the queue in 10 minutes; log: %s", logs.Name())
		}
	}
	elapsed := time.Since(start)
	rss := peakRSS(cmd.Process.Pid)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()
	return elapsed, rss, nil
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
