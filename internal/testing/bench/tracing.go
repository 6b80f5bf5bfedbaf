//go:build linux

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/internal/testing/otlpsink"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// tracingCost is the tracing lane: what exporting spans costs in watchbot's own CPU. It
// empties two queues, each preloaded with -messages messages that carry a producer's
// traceparent, with `watchbot listen --concurrency 8 -- true`: one with no OTEL_* variables
// (watchbot still reads each message's context and hands it to the worker), one exporting
// over OTLP/HTTP to a receiver in the bench that decodes every export. The two run at the
// same time, so that what else the machine does costs both alike (run one after the other
// on a shared machine, the ratio swung by more than the cost). It returns the own CPU per
// message with tracing divided by the same without. A run that exported fewer process spans
// than messages is an error: there would be no tracing cost to measure.
func (b *bench) tracingCost(ctx context.Context, name string) (float64, error) {
	if b.sink == nil {
		s, err := otlpsink.Start()
		if err != nil {
			return 0, err
		}
		b.sink = s
	}
	n := b.o.messages
	envs := [][]string{nil, append(b.sink.Env(), "OTEL_SERVICE_NAME=watchbot-bench")}
	queues := make([]string, len(envs))
	for i := range envs {
		q, err := tracedQueue(ctx, b.fauxqs.Client(), fmt.Sprintf("%s-%d", name, i), n)
		if err != nil {
			return 0, err
		}
		queues[i] = q
	}
	exported := b.spansOf(queues[1], n)
	var (
		cpu  [2]time.Duration
		errs [2]error
		wg   sync.WaitGroup
	)
	for i, env := range envs {
		wg.Go(func() {
			var wait func() error
			if env != nil {
				wait = exported
			}
			cpu[i], errs[i] = tracingRun(ctx, b.o, b.fauxqs, queues[i], env, b.worker, wait)
		})
	}
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		return 0, fmt.Errorf("tracing lane: %w", err)
	}
	if cpu[0] == 0 {
		return 0, fmt.Errorf("tracing lane: no CPU time read for the run without tracing")
	}
	return cpu[1].Seconds() / cpu[0].Seconds(), nil
}

// spansOf returns a function that waits until the sink has received the n process spans of
// queue, the export of which the batching exporter may leave for its timer (5 s).
func (b *bench) spansOf(queue string, n int) func() error {
	before := len(b.sink.Spans())
	name := "process " + queue[strings.LastIndexByte(queue, '/')+1:]
	return func() error {
		spans, ok := b.sink.Wait(15*time.Second, func(spans []otlpsink.Span) bool { return countNamed(spans[before:], name) >= n })
		if !ok {
			_, refused := b.sink.Exports()
			return fmt.Errorf("watchbot exported %d %q spans for %d messages (exports refused: %v)", countNamed(spans[before:], name), name, n, refused)
		}
		return nil
	}
}

// tracingSettle is how long after its queue is empty each run of the tracing lane ends: the
// batching exporter sends its last spans within 5 s (OTEL_BSP_SCHEDULE_DELAY's default), and
// the run without an exporter idles as long, so that idle time costs both alike.
const tracingSettle = 6 * time.Second

// tracingRun empties queue with `watchbot listen --concurrency 8 -- worker` and env, waits
// for exported (when set) and returns watchbot's own CPU time, read then: the export of
// every span is paid for, and the idle seconds spent waiting for the last batch count
// against tracing.
func tracingRun(ctx context.Context, o options, emu *testenv.Emulator, queue string, env []string, worker string, exported func() error) (time.Duration, error) {
	p, err := startListen(o, emu, queue, []string{"--concurrency", "8"}, env, worker)
	if err != nil {
		return 0, err
	}
	defer p.kill()
	if err := p.waitEmpty(ctx, emu.Client(), queue); err != nil {
		return 0, err
	}
	emptied := time.Now()
	if exported != nil {
		if err := exported(); err != nil {
			return 0, err
		}
	}
	time.Sleep(time.Until(emptied.Add(tracingSettle)))
	cpu := ownCPU(p.cmd.Process.Pid)
	return cpu, p.stop()
}

func countNamed(spans []otlpsink.Span, name string) int {
	n := 0
	for _, s := range spans {
		if s.Name == name {
			n++
		}
	}
	return n
}

// tracedQueue creates a queue as newQueue does and preloads n messages, each with the
// traceparent of a producer's span of its own trace, as `watchbot send` run in a traced
// service writes it.
func tracedQueue(ctx context.Context, c *sqs.Client, name string, n int) (string, error) {
	q, err := testenv.CreateQueue(ctx, c, name, testenv.QueueOptions{MaxReceiveCount: 5})
	if err != nil {
		return "", err
	}
	for first := 0; first < n; first += 10 {
		var entries []types.SendMessageBatchRequestEntry
		for i := first; i < min(first+10, n); i++ {
			entries = append(entries, types.SendMessageBatchRequestEntry{
				Id:          aws.String(strconv.Itoa(i - first)),
				MessageBody: aws.String(fmt.Sprintf(`{"job":%d}`, i)),
				MessageAttributes: map[string]types.MessageAttributeValue{
					"traceparent": {DataType: aws.String("String"), StringValue: aws.String("00-" + randomHex(16) + "-" + randomHex(8) + "-01")},
				},
			})
		}
		out, err := c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(q.URL), Entries: entries})
		if err != nil {
			return "", fmt.Errorf("preload: %w", err)
		}
		if len(out.Failed) > 0 {
			return "", fmt.Errorf("preload: %d entries refused: %s", len(out.Failed), aws.ToString(out.Failed[0].Message))
		}
	}
	return q.URL, nil
}

func randomHex(bytes int) string {
	b := make([]byte, bytes)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
