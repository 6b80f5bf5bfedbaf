package supervisor

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/watchbot/watchbot/internal/setting"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	valid := DefaultConfig()
	valid.QueueURL = "https://sqs.us-east-1.amazonaws.com/123456789012/jobs"
	valid.Command = []string{"./worker.sh"}
	tests := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"defaults", func(*Config) {}, ""},
		{"missing queue", func(c *Config) { c.QueueURL = "" }, "QueueURL: is required (or set WATCHBOT_QUEUE_URL / QueueUrl)"},
		{"queue not a URL", func(c *Config) { c.QueueURL = "jobs" }, `QueueURL: "jobs" is not a queue URL (want https://sqs.REGION.amazonaws.com/ACCOUNT/NAME)`},
		{"no command", func(c *Config) { c.Command = nil }, "no worker command: give it after --, e.g. watchbot listen --queue-url URL -- ./worker.sh, or HTTP.URL URL"},
		{"command and HTTP worker", func(c *Config) { c.HTTP.URL = "http://127.0.0.1:8080/" }, "HTTP.URL: cannot be combined with a worker command after --: give one or the other"},
		{"HTTP worker not a URL", func(c *Config) { c.Command, c.HTTP.URL = nil, "localhost:8080" }, `HTTP.URL ("localhost:8080") must be an http:// or https:// URL with a host`},
		{"HTTP timeout", func(c *Config) { c.Command, c.HTTP.URL, c.HTTP.Timeout = nil, "http://127.0.0.1:8080/", 0 }, "HTTP.Timeout (0s) must be positive"},
		{"HTTP timeout past 12h", func(c *Config) { c.Command, c.HTTP.URL, c.HTTP.Timeout = nil, "http://127.0.0.1:8080/", 13*time.Hour },
			"HTTP.Timeout (13h0m0s) must not exceed 12h0m0s, SQS's longest time in flight, without Dedupe.Table: a longer job keeps its message only when whoever receives it again relays it to the job through the dedupe table"},
		{"HTTP timeout past 12h, relayed", func(c *Config) {
			c.Command, c.HTTP.URL, c.HTTP.Timeout, c.Dedupe.Table = nil, "http://127.0.0.1:8080/", 13*time.Hour, "jobs"
		}, ""},
		{"HTTP health path", func(c *Config) { c.Command, c.HTTP.URL, c.HTTP.HealthPath = nil, "http://127.0.0.1:8080/", "health" }, `HTTP.HealthPath ("health") must start with /`},
		{"health grace", func(c *Config) { c.HealthGrace = 0 }, "HealthGrace (0s) must be between 1s and 1h"},
		{"concurrency 0", func(c *Config) { c.Concurrency = 0 }, "Concurrency (0) must be between 1 and 1000"},
		{"concurrency 1001", func(c *Config) { c.Concurrency = 1001 }, "Concurrency (1001) must be between 1 and 1000"},
		{"negative attempts", func(c *Config) { c.MaxAttempts = -1 }, "MaxAttempts (-1) must be between 1 and 1000 (0 = the queue's maxReceiveCount)"},
		{"heartbeat equal to visibility", func(c *Config) { c.VisibilityTimeout = time.Minute; c.HeartbeatInterval = time.Minute },
			"HeartbeatInterval (1m0s) must be shorter than VisibilityTimeout (1m0s)"},
		{"heartbeat above visibility", func(c *Config) { c.VisibilityTimeout = time.Minute; c.HeartbeatInterval = 2 * time.Minute },
			"HeartbeatInterval (2m0s) must be shorter than VisibilityTimeout (1m0s)"},
		{"visibility above 12h", func(c *Config) { c.VisibilityTimeout = 13 * time.Hour }, "VisibilityTimeout (13h0m0s) must be between 1s and 12h"},
		{"visibility below 1s", func(c *Config) { c.VisibilityTimeout = 500 * time.Millisecond }, "VisibilityTimeout (500ms) must be between 1s and 12h"},
		{"backoff", func(c *Config) { c.Backoff.Base = 0 }, "Backoff.Base (0s) must be positive"},
		{"on-reject", func(c *Config) { c.OnReject = "keep" }, `OnReject ("keep") must be dead-letter or delete`},
		{"negative max job duration", func(c *Config) { c.MaxJobDuration = -time.Second }, "MaxJobDuration (-1s) must not be negative"},
		{"max job duration above 12h", func(c *Config) { c.MaxJobDuration = 13 * time.Hour },
			"MaxJobDuration (13h0m0s) must not exceed 12h0m0s, SQS's longest time in flight, without Dedupe.Table: a longer job keeps its message only when whoever receives it again relays it to the job through the dedupe table"},
		{"max job duration above 12h, relayed", func(c *Config) { c.MaxJobDuration, c.Dedupe.Table = 13*time.Hour, "jobs" }, ""},
		{"max job duration above a scaled limit", func(c *Config) { c.MaxJobDuration, c.InFlightLimit = 4*time.Second, 3*time.Second },
			"MaxJobDuration (4s) must not exceed 3s, SQS's longest time in flight, without Dedupe.Table: a longer job keeps its message only when whoever receives it again relays it to the job through the dedupe table"},
		{"negative kill grace", func(c *Config) { c.KillGrace = -1 }, "KillGrace (-1ns) must not be negative"},
		{"negative shutdown", func(c *Config) { c.ShutdownTimeout = -1 }, "ShutdownTimeout (-1ns) must not be negative"},
		{"negative message age", func(c *Config) { c.MaxMessageAge = -1 }, "MaxMessageAge (-1ns) must not be negative"},
		{"volume root", func(c *Config) { c.Volumes = []string{"/"} }, `Volumes ("/") is a system directory, which must never be emptied after every job`},
		{"volume /etc", func(c *Config) { c.Volumes = []string{"/etc/"} }, `Volumes ("/etc/") is a system directory, which must never be emptied after every job`},
		{"volume relative", func(c *Config) { c.Volumes = []string{"data"} }, `Volumes ("data") must be an absolute directory path`},
		{"volumes with concurrency", func(c *Config) { c.Volumes = []string{"/scratch"}; c.Concurrency = 2 },
			"Volumes: needs Concurrency 1: emptying them after one job would delete the files of the others still running"},
		{"batch size 0", func(c *Config) { c.BatchSize = 0 }, "BatchSize (0) must be between 1 and 100"},
		{"batch size 100", func(c *Config) { c.BatchSize = 100; c.BatchWindow = 30 * time.Second }, ""},
		{"batch window 31s", func(c *Config) { c.BatchSize = 10; c.BatchWindow = 31 * time.Second }, "BatchWindow (31s) must be between 0 and 30s"},
		{"batch window alone", func(c *Config) { c.BatchWindow = time.Second }, "BatchWindow (1s) needs BatchSize above 1"},
		{"retry delay above 12h", func(c *Config) { c.RetryDelay = 13 * time.Hour }, "RetryDelay (13h0m0s) must be between 0 and 12h"},
		{"volume ok", func(c *Config) { c.Volumes = []string{"/scratch", "/tmp/work"} }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid
			tt.edit(&c)
			err := c.Validate()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Fatalf("Validate() = %q, want %q", got, tt.want)
			}
		})
	}
}

// attrQueue answers GetQueueAttributes with fixed attributes; everything else is fakeQueue's.
type attrQueue struct {
	*fakeQueue
	attrs map[string]string
}

func (q attrQueue) GetQueueAttributes(context.Context, *sqs.GetQueueAttributesInput, ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	return &sqs.GetQueueAttributesOutput{Attributes: q.attrs}, nil
}

func TestStartupRefusesFIFOQueueWithStandardDLQ(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.QueueURL = "http://sqs.us-east-1.localhost/000000000000/orders.fifo"
	cfg.Command = []string{"true"}
	// SQS refuses to create this pair, but a policy can be set before the DLQ is recreated
	// as a standard queue: watchbot must not start on it.
	api := attrQueue{newFakeQueue(), map[string]string{
		"FifoQueue":     "true",
		"RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:orders-dlq","maxReceiveCount":"3"}`,
	}}
	err := Run(t.Context(), cfg, Deps{SQS: api})
	var ce setting.Error
	if !errors.As(err, &ce) || ce.Setting != setting.QueueURL || !strings.Contains(err.Error(), "FIFO queue orders.fifo has a dead-letter queue that is not FIFO (orders-dlq)") {
		t.Fatalf("Run = %v, want a QueueURL error naming both queues", err)
	}
}
