package deadletter_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/backoff"
	"github.com/watchbot/watchbot/deadletter"
	"github.com/watchbot/watchbot/internal/testing/testenv"
	"github.com/watchbot/watchbot/payload"
	"github.com/watchbot/watchbot/supervisor"
)

// TestReplayKeepsThePayload: a pointer message dead-lettered by its worker keeps its S3
// object; replayed, its copy carries the same pointer and size attribute, runs with the whole
// body, and once it succeeds the object is deleted.
func TestReplayKeepsThePayload(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	c, s3c := emu.Client(), emu.S3()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	bucket := emu.NewBucket(t)
	p := payload.Pointer{Bucket: bucket, Key: payload.NewKey()}
	body := []byte("a payload too large for SQS, in spirit")
	testenv.PutObject(t, s3c, bucket, p.Key, body)
	_, err := c.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(q.URL), MessageBody: aws.String(p.Encode()),
		MessageAttributes: map[string]types.MessageAttributeValue{payload.SizeAttribute: {
			DataType: aws.String(payload.SizeAttributeType), StringValue: aws.String(payload.SizeValue(int64(len(body))))}}})
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	ok, got := filepath.Join(dir, "ok"), filepath.Join(dir, "got")
	cfg := supervisor.DefaultConfig()
	cfg.QueueURL = q.URL
	cfg.Command = []string{"/bin/sh", "-c", `if [ -f "` + ok + `" ]; then cat > "` + got + `"; else exit 3; fi`}
	cfg.Backoff = backoff.Exponential{Base: time.Second, Max: time.Minute, Jitter: backoff.None}
	cfg.WaitTime, cfg.VisibilityTimeout, cfg.ShutdownTimeout, cfg.KillGrace = time.Second, 30*time.Second, 5*time.Second, time.Second
	cfg.Payload = supervisor.PayloadConfig{Buckets: []string{bucket}}
	logs := &testenv.Buffer{}
	stop := testenv.Run(t, "listener", 60*time.Second, func(ctx context.Context) error {
		return supervisor.Run(ctx, cfg, supervisor.Deps{SQS: c, S3: s3c, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	}, logs.String)
	defer func() { _ = stop() }()

	testenv.Eventually(t, "the rejected message in the DLQ", 30*time.Second, func() bool {
		return testenv.Depth(t, c, q.DLQURL).Visible == 1
	}, logs.String)
	if !testenv.ObjectExists(t, s3c, bucket, p.Key) {
		t.Fatal("the dead-lettered message's object was deleted")
	}

	if err := os.WriteFile(ok, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	queues, err := deadletter.Locate(t.Context(), c, deadletter.Location{QueueURL: q.URL})
	if err != nil {
		t.Fatal(err)
	}
	rc := deadletter.DefaultReplayConfig()
	rc.Hold = time.Minute
	if sum, err := deadletter.Replay(t.Context(), c, queues, rc); err != nil || sum.Replayed != 1 {
		t.Fatalf("replay = %+v, %v", sum, err)
	}
	testenv.Eventually(t, "the replayed copy done", 30*time.Second, func() bool {
		b, _ := os.ReadFile(got)
		return string(b) == string(body) && testenv.Depth(t, c, q.URL).Total() == 0
	}, logs.String)
	testenv.Eventually(t, "the object deleted", 10*time.Second, func() bool {
		return !testenv.ObjectExists(t, s3c, bucket, p.Key)
	}, logs.String)
	if d := testenv.Depth(t, c, q.DLQURL); d.Total() != 0 {
		t.Errorf("DLQ holds %+v", d)
	}
}
