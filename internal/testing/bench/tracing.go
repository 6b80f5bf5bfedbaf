//go:build linux

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/internal/testing/otlpsink"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// tracingCost is the tracing lane: what exporting spans costs in watchbot's own CPU. It
// empties two queues, each preloaded with -messages messages that carry a producer's
// traceparent, with `watchbot listen --concurrency 8 -- true`: first with no OTEL_*
// variables (watchbot still reads each message's context and hands it to the worker), then
// exporting over OTLP/HTTP to a receiver in the bench that decodes every export. It returns
// the own CPU per message with tracing divided by the same without. A run that exported
// fewer process spans than messages is an error: there would be no tracing cost to measure.
func (b *bench) tracingCost(ctx context.Context, name string) (float64, error) {
	if b.sink == nil {
		s, err := otlpsink.Start()
		if err != nil {
			return 0, err
		}
		b.sink = s
	}
	n := b.o.messages
	var cpu [2]time.Duration
	for i, env := range [][]string{nil, append(b.sink.Env(), "OTEL_SERVICE_NAME=watchbot-bench")} {
		c := b.fauxqs.Client()
		q, err := tracedQueue(ctx, c, fmt.Sprintf("%s-%d", name, i), n)
		if err != nil {
			return 0, err
		}
		before := len(b.sink.Spans())
		r, err := watchbot(ctx, b.o, b.fauxqs, b.fauxqs.Endpoint, c, q, []string{"--concurrency", "8"}, env, b.worker)
		if err != nil {
			return 0, fmt.Errorf("tracing lane (%v): %w", env, err)
		}
		cpu[i] = r.cpu
		if env == nil {
			continue
		}
		queue := "process " + q[strings.LastIndexByte(q, '/')+1:]
		spans, ok := b.sink.Wait(15*time.Second, func(spans []otlpsink.Span) bool { return countNamed(spans[before:], queue) >= n })
		if !ok {
			_, refused := b.sink.Exports()
			return 0, fmt.Errorf("tracing lane: watchbot exported %d %q spans for %d messages (exports refused: %v)", countNamed(spans[before:], queue), queue, n, refused)
		}
	}
	if cpu[0] == 0 {
		return 0, fmt.Errorf("tracing lane: no CPU time read for the run without tracing")
	}
	return cpu[1].Seconds() / cpu[0].Seconds(), nil
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
