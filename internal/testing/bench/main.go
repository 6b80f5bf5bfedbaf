// Command bench measures watchbot against a minimal receive → spawn → batch-delete loop on
// the same local SQS emulator, in one run, and prints the figures as ratios. It is run by
// `make bench` (scripts/bench); it is not part of the product.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/internal/testing/fakesqs"
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
	proxy, counts := countingProxy(emu.Endpoint)
	defer proxy.Close()
	direct := emu.Client()
	viaProxy := sqs.NewFromConfig(emu.Config(), func(so *sqs.Options) { so.BaseEndpoint = aws.String(proxy.URL) })
	ctx := context.Background()

	fmt.Printf("preloading %d messages per contender into the fauxqs emulator; worker %q; %d cores\n", o.messages, worker, numCPU())
	qBase, err := newQueue(ctx, direct, "bench-baseline", false)
	if err != nil {
		return err
	}
	qWatchbot, err := newQueue(ctx, direct, "bench-watchbot", false)
	if err != nil {
		return err
	}
	if err := preload(ctx, direct, qBase, o.messages, 0); err != nil {
		return err
	}
	if err := preload(ctx, direct, qWatchbot, o.messages, 0); err != nil {
		return err
	}

	counts.reset()
	start := time.Now()
	if err := baseline(ctx, viaProxy, qBase, worker, o.messages); err != nil {
		return err
	}
	baseTime := time.Since(start)
	baseReqs := counts.total()

	counts.reset()
	wbTime, rss, err := watchbot(ctx, o, emu, proxy.URL, direct, qWatchbot, worker)
	if err != nil {
		return err
	}
	wbReqs := counts.total()
	wbDetail := counts.detail()

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
		proxy, counts := countingProxy(srv.emu.Endpoint)
		direct := srv.emu.Client()
		f := fifoFigures{server: srv.name}
		for _, fifo := range []bool{false, true} {
			name := "bench-std"
			groups := 0
			if fifo {
				name, groups = "bench-fifo", o.groups
			}
			q, err := newQueue(ctx, direct, name, fifo)
			if err != nil {
				proxy.Close()
				return nil, err
			}
			if err := preload(ctx, direct, q, o.messages, groups); err != nil {
				proxy.Close()
				return nil, err
			}
			counts.reset()
			took, _, err := watchbot(ctx, o, srv.emu, proxy.URL, direct, q, worker)
			if err != nil {
				proxy.Close()
				return nil, fmt.Errorf("%s, fifo %v: %w", srv.name, fifo, err)
			}
			rate := float64(o.messages) / took.Seconds()
			if fifo {
				f.fifoRate, f.reqPerMsg = rate, float64(counts.total())/float64(o.messages)
			} else {
				f.stdRate = rate
			}
		}
		proxy.Close()
		out = append(out, f)
	}
	return out, nil
}

func numCPU() int {
	data, _ := os.ReadFile("/proc/cpuinfo")
	return strings.Count(string(data), "processor\t:")
}

func newQueue(ctx context.Context, c *sqs.Client, name string, fifo bool) (string, error) {
	suffix, fifoAttrs := "", map[string]string{}
	if fifo {
		suffix, fifoAttrs = ".fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"}
	}
	dlq, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name + "-dlq" + suffix), Attributes: fifoAttrs})
	if err != nil {
		return "", err
	}
	attrs, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: dlq.QueueUrl, AttributeNames: []types.QueueAttributeName{"QueueArn"}})
	if err != nil {
		return "", err
	}
	qAttrs := map[string]string{"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":"5"}`, attrs.Attributes["QueueArn"])}
	for k, v := range fifoAttrs {
		qAttrs[k] = v
	}
	out, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name + suffix), Attributes: qAttrs})
	if err != nil {
		return "", err
	}
	return aws.ToString(out.QueueUrl), nil
}

// preload sends n messages, 10 per call from 4 senders; with groups > 0, message i goes to
// group i mod groups of a FIFO queue.
func preload(ctx context.Context, c *sqs.Client, queue string, n, groups int) error {
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	batches := make(chan int)
	for range 4 {
		wg.Go(func() {
			for first := range batches {
				var entries []types.SendMessageBatchRequestEntry
				for i := first; i < min(first+10, n); i++ {
					e := types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(fmt.Sprintf(`{"job":%d}`, i))}
					if groups > 0 {
						e.MessageGroupId = aws.String("g" + strconv.Itoa(i%groups))
					}
					entries = append(entries, e)
				}
				if _, err := c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(queue), Entries: entries}); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	for i := 0; i < n; i += 10 {
		batches <- i
	}
	close(batches)
	wg.Wait()
	select {
	case err := <-errs:
		return fmt.Errorf("preload: %w", err)
	default:
		return nil
	}
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
		out, err := direct.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(queue),
			AttributeNames: []types.QueueAttributeName{"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"}})
		if err != nil {
			return 0, 0, err
		}
		if out.Attributes["ApproximateNumberOfMessages"] == "0" && out.Attributes["ApproximateNumberOfMessagesNotVisible"] == "0" {
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

// requestCounter counts SQS requests by operation.
type requestCounter struct {
	mu sync.Mutex
	m  map[string]int
	n  atomic.Int64
}

func (r *requestCounter) add(op string) {
	r.mu.Lock()
	r.m[op]++
	r.mu.Unlock()
	r.n.Add(1)
}

func (r *requestCounter) reset() {
	r.mu.Lock()
	r.m = map[string]int{}
	r.mu.Unlock()
	r.n.Store(0)
}

func (r *requestCounter) total() int { return int(r.n.Load()) }

func (r *requestCounter) detail() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var parts []string
	for op, n := range r.m {
		parts = append(parts, fmt.Sprintf("%s %d", op, n))
	}
	return strings.Join(parts, ", ")
}

func countingProxy(upstream string) (*httptest.Server, *requestCounter) {
	target, _ := url.Parse(upstream)
	rp := httputil.NewSingleHostReverseProxy(target)
	counts := &requestCounter{m: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		counts.add(strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "AmazonSQS."))
		rp.ServeHTTP(w, r)
	}))
	return srv, counts
}
