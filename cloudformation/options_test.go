package cloudformation

import (
	"strings"
	"testing"
	"time"

	"github.com/watchbot/watchbot/alarms"
)

func validOptions() Options {
	o := DefaultOptions()
	o.Command = []string{"/app/worker"}
	return o
}

func TestDefaultOptionsNeedOnlyACommand(t *testing.T) {
	if err := DefaultOptions().Validate(); err == nil || !strings.Contains(err.Error(), "worker command is required") {
		t.Errorf("DefaultOptions().Validate() = %v, want the missing command", err)
	}
	if err := validOptions().Validate(); err != nil {
		t.Errorf("defaults with a command: %v", err)
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		name   string
		modify func(*Options)
		want   string // "" = valid
	}{
		{"max attempts 0", func(o *Options) { o.MaxAttempts = 0 }, "MaxAttempts (0) must be between 1 and 1000"},
		{"max attempts 1", func(o *Options) { o.MaxAttempts = 1 }, ""},
		{"max attempts 1000", func(o *Options) { o.MaxAttempts = 1000 }, ""},
		{"max attempts 1001", func(o *Options) { o.MaxAttempts = 1001 }, "MaxAttempts (1001) must be between 1 and 1000"},
		{"max attempts negative", func(o *Options) { o.MaxAttempts = -3 }, "MaxAttempts (-3)"},
		{"visibility 0", func(o *Options) { o.VisibilityTimeout = 0 }, "VisibilityTimeout (0s) must be between 1s and 12h"},
		{"visibility negative", func(o *Options) { o.VisibilityTimeout = -time.Second }, "VisibilityTimeout (-1s)"},
		{"visibility 12h", func(o *Options) { o.VisibilityTimeout = 12 * time.Hour }, ""},
		{"visibility over 12h", func(o *Options) { o.VisibilityTimeout = 12*time.Hour + time.Second }, "VisibilityTimeout (12h0m1s) must be between 1s and 12h"},
		{"visibility fraction", func(o *Options) { o.VisibilityTimeout = 1500 * time.Millisecond }, "VisibilityTimeout (1.5s) must be a whole number of seconds"},
		{"retention 14 days", func(o *Options) { o.QueueRetention = 14 * 24 * time.Hour }, "QueueRetention (336h0m0s) must be at least 1m and shorter than 14 days"},
		{"retention just under 14 days", func(o *Options) { o.QueueRetention = 14*24*time.Hour - time.Second }, ""},
		{"retention 59s", func(o *Options) { o.QueueRetention = 59 * time.Second }, "QueueRetention (59s)"},
		{"no command", func(o *Options) { o.Command = nil }, "the worker command is required"},
		{"empty command", func(o *Options) { o.Command = []string{""} }, "the worker command is required"},
		{"fifo with plain name", func(o *Options) { o.FIFO = true; o.QueueName = "orders" }, `QueueName ("orders") must end in .fifo with FIFO`},
		{"fifo name without fifo", func(o *Options) { o.QueueName = "orders.fifo" }, `QueueName ("orders.fifo") ends in .fifo: add FIFO`},
		{"fifo with fifo name", func(o *Options) { o.FIFO = true; o.QueueName = "orders.fifo" }, ""},
		{"queue name characters", func(o *Options) { o.QueueName = "my queue" }, `QueueName ("my queue") may contain only`},
		{"queue name too long", func(o *Options) { o.QueueName = strings.Repeat("q", 64) }, "QueueName"},
		{"queue name longest", func(o *Options) { o.QueueName = strings.Repeat("q", 63) }, ""},
		{"prefix characters", func(o *Options) { o.NamePrefix = "a/b" }, `NamePrefix ("a/b")`},
		{"prefix too long", func(o *Options) { o.NamePrefix = strings.Repeat("p", 58) }, "NamePrefix"},
		{"prefix longest", func(o *Options) { o.NamePrefix = strings.Repeat("p", 57); o.FIFO = true }, ""},
		{"concurrency 0", func(o *Options) { o.Concurrency = 0 }, "Concurrency (0) must be between 1 and 1000"},
		{"batch size 101", func(o *Options) { o.BatchSize = 101 }, "BatchSize (101) must be between 1 and 100"},
		{"batch window without batch size", func(o *Options) { o.BatchWindow = time.Second }, "BatchWindow (1s) needs BatchSize above 1"},
		{"heartbeat not shorter than the lease", func(o *Options) { o.HeartbeatInterval = o.VisibilityTimeout }, "HeartbeatInterval (3m0s) must be shorter than VisibilityTimeout (3m0s)"},
		{"max job duration over 12h", func(o *Options) { o.MaxJobDuration = 13 * time.Hour }, "MaxJobDuration (13h0m0s) must not exceed 12h"},
		{"max job duration over 12h, relayed", func(o *Options) { o.MaxJobDuration, o.Dedupe = 13*time.Hour, true }, ""},
		{"max job duration past any redrive policy", func(o *Options) { o.MaxJobDuration, o.Dedupe, o.MaxAttempts = 12*991*time.Hour, true, 10 },
			"MaxJobDuration (11892h0m0s) is longer than a queue allows a relayed job with MaxAttempts 10: at most (1000 − 10) × 12h0m0s = 11880h0m0s"},
		{"backoff max over 12h", func(o *Options) { o.Backoff.Max = 13 * time.Hour }, "Backoff.Max (13h0m0s) must be between 1s and 12h"},
		{"backoff jitter", func(o *Options) { o.Backoff.Jitter = "lots" }, "Backoff.Jitter"},
		{"relative volume", func(o *Options) { o.Environment = map[string]string{"Volumes": "work"} }, "Volumes (\"work\") must be an absolute directory path"},
		{"cpu not fargate", func(o *Options) { o.CPU = 300 }, "CPU (300) must be one of Fargate's sizes"},
		{"memory not for cpu", func(o *Options) { o.CPU, o.Memory = 256, 4096 }, "Memory (4096) is not a Fargate size for CPU 256: use one of 512, 1024, 2048 (MiB)"},
		{"memory for cpu", func(o *Options) { o.CPU, o.Memory = 4096, 30720 }, ""},
		{"memory step", func(o *Options) { o.CPU, o.Memory = 8192, 20000 }, "Memory (20000)"},
		{"max tasks 0", func(o *Options) { o.MinTasks, o.MaxTasks = 0, 0 }, "MaxTasks (0) must be between 1 and 5000"},
		{"min over max", func(o *Options) { o.MinTasks, o.MaxTasks = 5, 4 }, "MinTasks (5) must be between 0 and MaxTasks (4)"},
		{"min negative", func(o *Options) { o.MinTasks = -1 }, "MinTasks (-1)"},
		{"metrics unknown", func(o *Options) { o.Metrics = "statsd" }, `Metrics ("statsd") must be emf, cloudwatch or none`},
		{"target latency 59s", func(o *Options) { o.TargetLatency = 59 * time.Second }, "TargetLatency (59s) must be a whole number of seconds, at least 1m0s"},
		{"target latency without metrics", func(o *Options) { o.Metrics, o.TargetLatency = MetricsNone, 10*time.Minute }, "TargetLatency needs watchbot's metrics (Metrics emf or cloudwatch)"},
		{"job duration without metrics", func(o *Options) { o.Metrics, o.ExpectedJobDuration = MetricsNone, 2*time.Minute }, "ExpectedJobDuration needs watchbot's metrics"},
		{"backlog defaults without metrics", func(o *Options) { o.Metrics = MetricsNone }, ""},
		{"target latency 1m", func(o *Options) { o.TargetLatency = time.Minute }, ""},
		{"target latency fraction", func(o *Options) { o.TargetLatency = 90*time.Second + time.Millisecond }, "TargetLatency (1m30.001s)"},
		{"target latency as long as retention", func(o *Options) { o.TargetLatency = o.QueueRetention }, "TargetLatency (96h0m0s) must be shorter than QueueRetention (96h0m0s)"},
		// Without watchbot's metrics the latency is unused: a short retention stays valid.
		{"short retention without metrics", func(o *Options) { o.QueueRetention, o.Metrics = 2*time.Minute, MetricsNone }, ""},
		{"target latency below a job", func(o *Options) { o.TargetLatency, o.ExpectedJobDuration = time.Minute, time.Hour }, ""},
		{"job duration 0", func(o *Options) { o.ExpectedJobDuration = 0 }, "ExpectedJobDuration (0s) must be a whole number of seconds between 1s and 12h0m0s"},
		{"job duration fraction", func(o *Options) { o.ExpectedJobDuration = 1500 * time.Millisecond }, "ExpectedJobDuration (1.5s)"},
		{"job duration 12h", func(o *Options) { o.ExpectedJobDuration = 12 * time.Hour }, ""},
		{"job duration over 12h", func(o *Options) { o.ExpectedJobDuration = 12*time.Hour + time.Second }, "ExpectedJobDuration (12h0m1s)"},
		{"namespace AWS", func(o *Options) { o.MetricsNamespace = "AWS/SQS" }, `MetricsNamespace ("AWS/SQS")`},
		{"namespace empty", func(o *Options) { o.MetricsNamespace = "" }, "MetricsNamespace: must not be empty"},
		{"otel endpoint ok", func(o *Options) { o.OTelEndpoint = "https://otlp.example.com:4318" }, ""},
		{"otel endpoint and protocol ok", func(o *Options) { o.OTelEndpoint, o.OTelProtocol = "http://localhost:4317", "grpc" }, ""},
		{"otel endpoint not a URL", func(o *Options) { o.OTelEndpoint = "localhost:4318" }, `OTelEndpoint ("localhost:4318") must be an http:// or https:// URL`},
		{"otel endpoint no host", func(o *Options) { o.OTelEndpoint = "http:///v1/traces" }, `OTelEndpoint ("http:///v1/traces") must be an http:// or https:// URL`},
		{"otel protocol unknown", func(o *Options) { o.OTelEndpoint, o.OTelProtocol = "http://localhost:4318", "http/json" }, `OTelProtocol ("http/json") must be http/protobuf or grpc`},
		{"otel protocol without endpoint", func(o *Options) { o.OTelProtocol = "grpc" }, `OTelProtocol ("grpc") needs OTelEndpoint`},
		{"otel env clash", func(o *Options) {
			o.OTelEndpoint = "http://localhost:4318"
			o.Environment = map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://other:4318"}
		}, `Environment ("OTEL_EXPORTER_OTLP_ENDPOINT") is set by the template itself with OTelEndpoint`},
		{"otel env without endpoint ok", func(o *Options) {
			o.Environment = map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://other:4318"}
		}, ""},
		{"env name", func(o *Options) { o.Environment = map[string]string{"1BAD": "x"} }, `Environment ("1BAD") is not a variable name`},
		{"env reserved", func(o *Options) { o.Environment = map[string]string{"QueueUrl": "x"} }, `Environment ("QueueUrl") is set by the template itself`},
		{"env ok", func(o *Options) { o.Environment = map[string]string{"Volumes": "/tmp/work", "TMPDIR": "/tmp/x"} }, ""},
		// With --reduce the template names the progress table; without, --env may name another.
		{"env progress table with reduce", func(o *Options) { o.Reduce = true; o.Environment = map[string]string{"ProgressTable": "t"} },
			`Environment ("ProgressTable") is set by the template itself: with --reduce it names its own table to the container`},
		{"env progress table alias with reduce", func(o *Options) { o.Reduce = true; o.Environment = map[string]string{"WATCHBOT_PROGRESS_TABLE": "t"} },
			`Environment ("WATCHBOT_PROGRESS_TABLE") is set by the template itself: with --reduce`},
		{"env progress table without reduce", func(o *Options) { o.Environment = map[string]string{"ProgressTable": "jobs"} }, ""},
		// With --dedupe the template passes listen --dedupe-table, which would silently beat
		// the variable.
		{"env dedupe table with dedupe", func(o *Options) { o.Dedupe = true; o.Environment = map[string]string{"WATCHBOT_DEDUPE_TABLE": "t"} },
			`Environment ("WATCHBOT_DEDUPE_TABLE") is set by the template itself: with --dedupe it names its own table to the container`},
		{"env dedupe table without dedupe", func(o *Options) { o.Environment = map[string]string{"WATCHBOT_DEDUPE_TABLE": "jobs"} }, ""},
		{"volumes with concurrency", func(o *Options) { o.Environment = map[string]string{"Volumes": "/tmp/work"}; o.Concurrency = 2 }, "Volumes: needs Concurrency 1"},
		{"extra statement", func(o *Options) { o.ExtraStatements = []Statement{{Effect: "Allow", Action: []string{"s3:GetObject"}}} }, "ExtraStatements: statement 1: one of Resource and NotResource is required"},
		{"alarm threshold", func(o *Options) {
			o.Alarms = alarms.Thresholds{WorkerErrorsPerMinute: -1, OldestMessageAgeSeconds: 600, BrakingMinutes: 10}
		}, "Alarms: worker-errors threshold (-1) must not be negative"},
		{"oldest age", func(o *Options) { o.Alarms.OldestMessageAgeSeconds = 30 }, "Alarms: oldest-message-age threshold (30s)"},
		{"log retention", func(o *Options) { o.LogRetentionDays = 2 }, "LogRetentionDays (2) must be one of"},
		{"kill grace negative", func(o *Options) { o.KillGrace = -time.Second }, "KillGrace (-1s)"},
		{"shutdown fraction", func(o *Options) { o.ShutdownTimeout = 1500 * time.Millisecond }, "ShutdownTimeout (1.5s)"},
		{"stop timeout too long", func(o *Options) { o.ShutdownTimeout, o.KillGrace = 100*time.Second, 16*time.Second }, "must fit in Fargate's longest stop timeout (2m0s)"},
		{"stop timeout longest", func(o *Options) { o.ShutdownTimeout, o.KillGrace = 100*time.Second, 15*time.Second }, ""},
		{"http addr every interface", func(o *Options) { o.HTTPAddr = ":9464" }, ""},
		{"http addr 0.0.0.0", func(o *Options) { o.HTTPAddr = "0.0.0.0:9090" }, ""},
		{"http addr ::", func(o *Options) { o.HTTPAddr = "[::]:9090" }, ""},
		{"http addr ::1", func(o *Options) { o.HTTPAddr = "[::1]:9090" }, ""},
		{"http addr loopback net", func(o *Options) { o.HTTPAddr = "127.0.0.2:9090" }, ""},
		{"http addr empty", func(o *Options) { o.HTTPAddr = "" }, `HTTPAddr ("") must be HOST:PORT`},
		{"http addr without port", func(o *Options) { o.HTTPAddr = "127.0.0.1" }, `HTTPAddr ("127.0.0.1") must be HOST:PORT`},
		{"http addr port 0", func(o *Options) { o.HTTPAddr = "127.0.0.1:0" }, `HTTPAddr ("127.0.0.1:0") must have a port from 1 to 65535`},
		{"http addr named port", func(o *Options) { o.HTTPAddr = "127.0.0.1:http" }, "must have a port from 1 to 65535"},
		{"http addr port too high", func(o *Options) { o.HTTPAddr = ":65536" }, "must have a port from 1 to 65535"},
		{"http addr the task's own", func(o *Options) { o.HTTPAddr = "10.0.1.7:9090" }, `HTTPAddr ("10.0.1.7:9090") must have a loopback IP`},
		{"http addr a name", func(o *Options) { o.HTTPAddr = "localhost:9090" }, "must have a loopback IP"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := validOptions()
			c.modify(&o)
			err := o.Validate()
			switch {
			case c.want == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("Validate() = %v, want %q", err, c.want)
			}
		})
	}
}

func TestFargateSizes(t *testing.T) {
	for cpu, want := range map[int]struct{ first, last, n int }{
		256: {512, 2048, 3}, 512: {1024, 4096, 4}, 1024: {2048, 8192, 7}, 2048: {4096, 16384, 13},
		4096: {8192, 30720, 23}, 8192: {16384, 61440, 12}, 16384: {32768, 122880, 12},
	} {
		got := FargateSizes[cpu]
		if len(got) != want.n || got[0] != want.first || got[len(got)-1] != want.last {
			t.Errorf("cpu %d: %v", cpu, got)
		}
	}
}

func TestBacklogPerSlot(t *testing.T) {
	for _, c := range []struct {
		latency, job time.Duration
		want         float64
	}{
		{5 * time.Minute, time.Minute, 5},
		{5 * time.Minute, 30 * time.Second, 10},
		{5 * time.Minute, 90 * time.Second, 3.333},
		{time.Hour, 7 * time.Second, 514.286},
		{5 * time.Minute, 5 * time.Minute, 1},
		// A latency shorter than a job asks for a slot for every waiting message, no more.
		{5 * time.Minute, 20 * time.Minute, 1},
	} {
		o := validOptions()
		o.TargetLatency, o.ExpectedJobDuration = c.latency, c.job
		if got := o.BacklogPerSlot(); got != c.want {
			t.Errorf("latency %v, job %v: BacklogPerSlot() = %v, want %v", c.latency, c.job, got, c.want)
		}
	}
}
