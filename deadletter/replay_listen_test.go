package deadletter_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/backoff"
	"github.com/watchbot/watchbot/deadletter"
	"github.com/watchbot/watchbot/internal/dlqattr"
	"github.com/watchbot/watchbot/internal/testing/testenv"
	"github.com/watchbot/watchbot/supervisor"
)

// rejectingListener runs a supervisor on q whose worker rejects every message (exit 3), so
// every replayed copy is dead-lettered again at once.
func rejectingListener(t *testing.T, c *sqs.Client, q testenv.Queue) *testenv.Buffer {
	t.Helper()
	cfg := supervisor.DefaultConfig()
	cfg.QueueURL = q.URL
	cfg.Command = []string{"/bin/sh", "-c", "exit 3"}
	cfg.Backoff = backoff.Exponential{Base: time.Second, Max: time.Minute, Jitter: backoff.None}
	cfg.WaitTime = time.Second
	cfg.VisibilityTimeout = 30 * time.Second
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.KillGrace = time.Second
	logs := &testenv.Buffer{}
	stop := testenv.Run(t, "listener", 60*time.Second, func(ctx context.Context) error {
		return supervisor.Run(ctx, cfg, supervisor.Deps{SQS: c, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	}, logs.String)
	t.Cleanup(func() { _ = stop() })
	return logs
}

// waitingProgress calls wait once, after the first message handled.
type waitingProgress struct {
	wait func()
	done bool
}

func (p *waitingProgress) Add(int) error {
	if !p.done {
		p.done = true
		p.wait()
	}
	return nil
}

func (p *waitingProgress) Finish() error { return nil }

func attr(s string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(s)}
}

// TestReplayEndsWhenTheCopyComesBack replays a message that a listener rejects on every run: the
// run ends after one pass, counts the copy that came back, and the copy in the DLQ carries the
// message's lineage.
func TestReplayEndsWhenTheCopyComesBack(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	c := emu.Client()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	first, _ := dlqattr.With(map[string]types.MessageAttributeValue{"kind": attr("bad")},
		dlqattr.Cause{Reason: "worker rejected the message (exit 3)", SourceQueue: q.URL, Attempts: 1,
			Lineage: dlqattr.Lineage{OriginalMessageID: "orig-hello"}})
	testenv.DeadLetter(t, c, q, testenv.Letter{Body: "hello", Attributes: first})
	logs := rejectingListener(t, c, q)

	queues, err := deadletter.Locate(t.Context(), c, deadletter.Location{QueueURL: q.URL})
	if err != nil {
		t.Fatal(err)
	}
	cfg := deadletter.DefaultReplayConfig()
	cfg.Hold = time.Minute
	// Once the message is replayed, the walk waits for its copy to be back in the DLQ, so that
	// the run meets it.
	cfg.Progress = &waitingProgress{wait: func() {
		testenv.Eventually(t, "the rejected copy back in the DLQ", 30*time.Second, func() bool {
			return testenv.Depth(t, c, q.DLQURL).Visible >= 1
		}, logs.String)
	}}
	sum, err := deadletter.Replay(t.Context(), c, queues, cfg)
	if err != nil || sum.Replayed != 1 || sum.CameBack != 1 {
		t.Fatalf("replay = %+v, %v; want 1 replayed, 1 came back", sum, err)
	}
	if d := testenv.Depth(t, c, q.DLQURL); d.InFlight != 0 {
		t.Errorf("%d DLQ messages left in flight", d.InFlight)
	}
	got := testenv.Drain(t, c, q.DLQURL, 10*time.Second)
	if len(got) != 1 {
		t.Fatalf("DLQ holds %d messages, want the one copy", len(got))
	}
	l := dlqattr.ReadLineage(got[0].MessageAttributes)
	if l.OriginalMessageID != "orig-hello" || l.ReplayedFrom == "" || l.ReplayedFrom == aws.ToString(got[0].MessageId) {
		t.Errorf("copy's lineage = %+v, want original orig-hello and the DLQ id it was replayed from", l)
	}
}

// TestReplayByIDAndInterrupted replays two messages chosen by id, one by its DLQ id and one by
// its original id, then interrupts a replay mid-walk: nothing is left in flight.
func TestReplayByIDAndInterrupted(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	c := emu.Client()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	var letters []testenv.Letter
	for i := range 25 {
		attrs, _ := dlqattr.With(nil, dlqattr.Cause{Reason: "r", SourceQueue: q.URL, Attempts: 1,
			Lineage: dlqattr.Lineage{OriginalMessageID: "orig-" + string(rune('a'+i))}})
		letters = append(letters, testenv.Letter{Body: "m-" + string(rune('a'+i)), Attributes: attrs})
	}
	testenv.DeadLetter(t, c, q, letters...)
	queues, err := deadletter.Locate(t.Context(), c, deadletter.Location{QueueURL: q.URL})
	if err != nil {
		t.Fatal(err)
	}

	// The DLQ id of m-c, found as peek would find it.
	var idC string
	if _, err := deadletter.Peek(t.Context(), c, queues, 25, func(m deadletter.Message) error {
		if m.Body == "m-c" {
			idC = m.ID
		}
		return nil
	}); err != nil || idC == "" {
		t.Fatalf("peek found no m-c: %v", err)
	}
	cfg := deadletter.DefaultReplayConfig()
	cfg.Hold = time.Minute
	cfg.IDs = []string{idC, "orig-q", "no-such-id"}
	sum, err := deadletter.Replay(t.Context(), c, queues, cfg)
	if err != nil || sum.Replayed != 2 || len(sum.NotFound) != 1 || sum.NotFound[0] != "no-such-id" {
		t.Fatalf("replay --id = %+v, %v; want 2 replayed, no-such-id not found", sum, err)
	}
	if err := sum.Err(); err == nil || !strings.Contains(err.Error(), "IDs no-such-id") {
		t.Errorf("summary error %v does not name the missing id", err)
	}
	bodies := map[string]bool{}
	for _, m := range testenv.Drain(t, c, q.URL, 10*time.Second) {
		bodies[aws.ToString(m.Body)] = true
	}
	if len(bodies) != 2 || !bodies["m-c"] || !bodies["m-q"] {
		t.Fatalf("source got %v, want m-c and m-q", bodies)
	}

	// Interrupted after the first part: a send under way completes, what is held is released.
	ctx, cancel := context.WithCancel(t.Context())
	cfg = deadletter.DefaultReplayConfig()
	cfg.Hold = time.Minute
	cfg.Rate = 5
	cfg.Progress = &waitingProgress{wait: cancel}
	sum, err = deadletter.Replay(ctx, c, queues, cfg)
	if err != context.Canceled || sum.Replayed == 0 || sum.Replayed >= 23 {
		t.Fatalf("interrupted replay = %+v, %v; want some replayed and context.Canceled", sum, err)
	}
	dlq := testenv.Depth(t, c, q.DLQURL)
	if dlq.InFlight != 0 || dlq.Visible != int64(23-sum.Replayed) {
		t.Errorf("DLQ after the interrupt: %+v, want %d visible and none in flight", dlq, 23-sum.Replayed)
	}
	if src := testenv.Depth(t, c, q.URL); src.Visible != int64(sum.Replayed) {
		t.Errorf("source after the interrupt: %+v, want %d visible", src, sum.Replayed)
	}
}
