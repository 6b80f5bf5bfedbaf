package main

import (
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/app"
	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/setting"
	"github.com/watchbot/watchbot/supervisor"
)

// listenSettings is listen's command line, one row a flag, in --help's order: each row is the
// one place that says the flag's name, environment variables, usage and default (its
// field's value in defaultListenArgs), which field it sets, and which setting a rule refusing
// that field names (the flag that words a setting.Error).
var listenSettings = []listenSetting{
	{name: "queue-url", setting: setting.QueueURL, bind: bindQueueURLs,
		flag: func() cli.Flag {
			return &cli.GenericFlag{Name: "queue-url", Value: &repeated{}, EnvVars: queueURLEnv,
				Usage: "the work queue's `URL`; repeat it, or separate URLs with commas, for several queues"}
		}},
	{name: "queue-policy", setting: listenspec.SettingQueuePolicy, field: func(a *listenArgs) any { return &a.Listen.Queues.Policy },
		usage: "how free slots go to queues with work: weighted, or strict (in the order given)"},
	{name: "queue-weight", setting: listenspec.SettingQueueWeight, bind: bindNamedCounts(func(a *listenArgs) *map[string]int { return &a.Listen.Queues.Weights }),
		flag: func() cli.Flag {
			return &cli.GenericFlag{Name: "queue-weight", Value: &repeated{}, DefaultText: "1 for each queue",
				Usage: "`NAME=N`: queue NAME's weight under --queue-policy weighted (repeatable)"}
		}},
	{name: "queue-reserve", setting: listenspec.SettingQueueReserve, bind: bindNamedCounts(func(a *listenArgs) *map[string]int { return &a.Listen.Queues.Reserve }),
		flag: func() cli.Flag {
			return &cli.GenericFlag{Name: "queue-reserve", Value: &repeated{}, DefaultText: "none",
				Usage: "`NAME=N`: keep N slots for queue NAME, which other queues never use (repeatable)"}
		}},
	{name: "concurrency", setting: listenspec.SettingConcurrency, field: func(a *listenArgs) any { return &a.Listen.Concurrency },
		usage: "worker processes running at once (1..1000)", env: []string{"WATCHBOT_CONCURRENCY"}},
	{name: "max-attempts", setting: listenspec.SettingMaxAttempts, field: func(a *listenArgs) any { return &a.Listen.MaxAttempts },
		usage: "attempts before a message is dead-lettered", defaultText: "the queue's maxReceiveCount", env: []string{"WATCHBOT_MAX_ATTEMPTS"}},
	{name: "allow-no-dlq", field: func(a *listenArgs) any { return &a.Listen.AllowNoDLQ },
		usage: "run on a queue without a redrive policy (dead-letters are logged, then deleted)"},
	{name: "visibility-timeout", setting: listenspec.SettingVisibilityTimeout, field: func(a *listenArgs) any { return &a.Listen.VisibilityTimeout },
		usage: "lease taken on receive and renewed by the heartbeat"},
	{name: "receive-visibility", setting: listenspec.SettingReceiveVisibility, field: func(a *listenArgs) any { return &a.Listen.ReceiveVisibility },
		usage: "the lease a receive takes, extended once a message is held (≥ --kill-grace + 3s)", defaultText: "min(visibility timeout, max(20s, kill grace + 15s))"},
	{name: "wait-time", setting: listenspec.SettingWaitTime, field: func(a *listenArgs) any { return &a.Listen.WaitTime },
		usage: "each receive's long poll, whole seconds 1s..20s: an idle stop takes up to this long", env: []string{"WATCHBOT_WAIT_TIME"}},
	{name: "kill-grace", try: true, setting: listenspec.SettingKillGrace, field: func(a *listenArgs) any { return &a.Listen.KillGrace },
		usage: "wait between SIGTERM and SIGKILL when a worker is stopped"},
	{name: "shutdown-timeout", setting: listenspec.SettingShutdownTimeout, field: func(a *listenArgs) any { return &a.Listen.ShutdownTimeout },
		usage: "how long running workers may finish after SIGTERM"},
	{name: "on-reject", try: true, setting: listenspec.SettingOnReject, field: func(a *listenArgs) any { return &a.Listen.OnReject },
		usage: "what exit 3 does: dead-letter or delete"},
	{name: "max-message-age", setting: listenspec.SettingMaxMessageAge, field: func(a *listenArgs) any { return &a.Listen.MaxMessageAge },
		usage: "dead-letter unrun the messages sent longer ago than this (0 = off)"},
	{name: "retry-delay", try: true, setting: listenspec.SettingRetryDelay, field: func(a *listenArgs) any { return &a.Listen.RetryDelay },
		usage: "one delay for every retry the worker does not time, instead of the backoff", defaultText: "the backoff"},
	{name: "volumes", setting: listenspec.SettingVolumes, bind: bindVolumes,
		flag: func() cli.Flag {
			return &cli.StringFlag{Name: "volumes", Usage: "comma-separated directories emptied after every job (needs --concurrency 1)", EnvVars: []string{"Volumes"}}
		}},
	{name: "once", field: func(a *listenArgs) any { return &a.Listen.Once },
		usage: "process one message, then exit", env: []string{"writableFilesystem"}},
	{name: "log-format", flag: logFormatFlag, bind: func(_ listenSetting, c *cli.Context, a *listenArgs) error { a.logFormat = logFormat(c); return nil }},
	{name: "log-level", field: func(a *listenArgs) any { return &a.logLevel }, usage: "debug, info, warn or error"},
	{name: "log-bodies", field: func(a *listenArgs) any { return &a.Listen.LogBodies },
		usage: "include message bodies in log lines (off: bodies may hold secrets)"},
	{name: "temp-dir", setting: listenspec.SettingTempDir, field: func(a *listenArgs) any { return &a.Listen.TempDir },
		usage: "writable directory for the jobs' message and result files (checked at start)", defaultText: "/dev/shm, spilling to $TMPDIR; else $TMPDIR"},
	{name: "endpoint-url", field: func(a *listenArgs) any { return &a.Endpoint },
		usage: "SQS endpoint, for local emulators", env: []string{"AWS_ENDPOINT_URL_SQS"}},
	{name: "scale-in-protection", setting: listenspec.SettingScaleInProtection, field: func(a *listenArgs) any { return &a.protection },
		usage: "protect the ECS task from scale-in while it holds messages: auto, on or off"},
	{name: "scale-in-protection-idle", setting: listenspec.SettingProtectionIdle, field: func(a *listenArgs) any { return &a.Listen.ProtectionIdle },
		usage: "how long an idle task stays protected after its last message"},
	{name: "brake", setting: listenspec.SettingBrake, bind: bindBrake,
		flag: func() cli.Flag {
			return &cli.StringFlag{Name: "brake", Value: onOff(supervisor.DefaultBrake().Enabled),
				Usage: "when nearly every run fails, probe with one message until one succeeds: on, off"}
		}},
	{name: "brake-threshold", setting: listenspec.SettingBrakeThreshold, field: func(a *listenArgs) any { return &a.Listen.Brake.Threshold },
		usage: "share of failed runs in the window that brakes (0..1]"},
	{name: "brake-window", setting: listenspec.SettingBrakeWindow, field: func(a *listenArgs) any { return &a.Listen.Brake.Window },
		usage: "how many of the latest runs (of the last 10 minutes) the brake judges"},
	{name: "brake-min-runs", setting: listenspec.SettingBrakeMinRuns, field: func(a *listenArgs) any { return &a.Listen.Brake.MinRuns },
		usage: "runs the window must hold before the brake judges it"},
	{name: "brake-probe-max", setting: listenspec.SettingBrakeProbeMax, field: func(a *listenArgs) any { return &a.Listen.Brake.ProbeMax },
		usage: "longest interval between probes while braking (from 2s, doubling)"},
	{name: "http-addr", setting: listenspec.SettingHTTPAddr, field: func(a *listenArgs) any { return &a.HTTPAddr },
		usage: "serve /healthz, /readyz and /metrics on `ADDR` (127.0.0.1:9090, :9090)", env: []string{"WATCHBOT_HTTP_ADDR"}, defaultText: "off"},
	{name: "health-grace", setting: listenspec.SettingHealthGrace, field: func(a *listenArgs) any { return &a.Listen.HealthGrace },
		usage: "how long receives may fail without a break before /healthz reports unhealthy"},
	{name: "http-worker", setting: listenspec.SettingHTTPWorker, field: func(a *listenArgs) any { return &a.Listen.HTTP.URL }, trim: true,
		usage: "POST each message to this `URL` instead of running a command", env: []string{"WATCHBOT_HTTP_WORKER"}},
	{name: "http-content-type", setting: listenspec.SettingHTTPContentType, field: func(a *listenArgs) any { return &a.Listen.HTTP.ContentType },
		usage: "Content-Type of the POSTs"},
	{name: "http-timeout", setting: listenspec.SettingHTTPTimeout, field: func(a *listenArgs) any { return &a.Listen.HTTP.Timeout },
		usage: "how long the application may take to answer a POST"},
	{name: "http-connect-timeout", setting: listenspec.SettingHTTPConnect, field: func(a *listenArgs) any { return &a.Listen.HTTP.ConnectTimeout },
		usage: "how long a connection to the application may take to open"},
	{name: "http-health-path", setting: listenspec.SettingHTTPHealthPath, field: func(a *listenArgs) any { return &a.Listen.HTTP.HealthPath },
		usage: "`PATH` on the application that answers 2xx once it is up", defaultText: "its port accepting connections"},
	{name: "http-startup-timeout", setting: listenspec.SettingHTTPStartup, field: func(a *listenArgs) any { return &a.Listen.HTTP.StartupTimeout },
		usage: "how long startup waits for the application before it gives up (exit 2)"},
	{name: "lambda", try: true, setting: listenspec.SettingLambda, field: func(a *listenArgs) any { return &a.Listen.Lambda.Enabled },
		usage: "run the command after -- as a Lambda runtime, served the Runtime API", env: []string{"WATCHBOT_LAMBDA"}, template: templateArg},
	{name: "lambda-function-name", try: true, setting: listenspec.SettingLambdaFunction, field: func(a *listenArgs) any { return &a.Listen.Lambda.FunctionName }, trim: true,
		usage: "the function's `NAME`: AWS_LAMBDA_FUNCTION_NAME and the invoked ARN's", defaultText: "the queue's name", template: templateArg},
	{name: "lambda-handler", try: true, setting: listenspec.SettingLambdaHandler, field: func(a *listenArgs) any { return &a.Listen.Lambda.Handler }, trim: true,
		usage: "the `HANDLER` that runtimes read from _HANDLER (index.handler)", defaultText: "unset", template: templateArg},
	{name: "lambda-init-timeout", try: true, setting: listenspec.SettingLambdaInitTimeout, field: func(a *listenArgs) any { return &a.Listen.Lambda.InitTimeout },
		usage: "how long a runtime may take to ask for work before it is restarted", template: templateArg},
	{name: "dedupe-table", setting: listenspec.SettingDedupeTable, bind: bindDedupeTable,
		flag: func() cli.Flag {
			return &cli.StringFlag{Name: "dedupe-table", Usage: "run each key once: claim it in this DynamoDB `TABLE` (name or ARN) first",
				EnvVars: []string{"WATCHBOT_DEDUPE_TABLE"}, DefaultText: "off"}
		}},
	{name: "dedupe-key", setting: listenspec.SettingDedupeKey, field: func(a *listenArgs) any { return &a.Listen.Dedupe.Key },
		usage: "a message's key: message-id, or attr:NAME (an idempotency key attribute)"},
	{name: "dedupe-ttl", setting: listenspec.SettingDedupeTTL, field: func(a *listenArgs) any { return &a.Listen.Dedupe.TTL },
		usage: "how long a completed key is remembered", defaultText: "the queue's message retention period"},
	{name: "limits-table", setting: listenspec.SettingLimitsTable, bind: bindLimitsTable,
		flag: func() cli.Flag {
			return &cli.StringFlag{Name: "limits-table", Usage: "share the limits and pauses with every task naming this DynamoDB `TABLE`",
				EnvVars: []string{"WATCHBOT_LIMITS_TABLE"}, DefaultText: "per task"}
		}},
	{name: "payload-bucket", try: true, setting: listenspec.SettingPayloadBuckets, bind: bindPayloadBuckets,
		flag: func() cli.Flag {
			return &cli.StringSliceFlag{Name: "payload-bucket", Usage: "fetch S3 payload pointers (SQS Extended Client) from this `BUCKET` alone; repeatable",
				EnvVars: []string{"WATCHBOT_PAYLOAD_BUCKETS"}, DefaultText: "pointers passed through"}
		}},
	{name: "keep-payloads", setting: listenspec.SettingKeepPayloads, field: func(a *listenArgs) any { return &a.Listen.Payload.Keep },
		usage: "keep each S3 payload after its message succeeded (by default it is deleted)"},

	// The retry, lease and batch tuning, which `watchbot template` offers too.
	{name: "backoff-base", try: true, setting: listenspec.SettingBackoffBase, field: func(a *listenArgs) any { return &a.Listen.Backoff.Base }, template: templateOption,
		usage: "delay after failed attempt n is base·2^(n-1)"},
	{name: "backoff-min", try: true, setting: listenspec.SettingBackoffMin, field: func(a *listenArgs) any { return &a.Listen.Backoff.Min }, template: templateOption,
		usage: "shortest retry delay"},
	{name: "backoff-max", try: true, setting: listenspec.SettingBackoffMax, field: func(a *listenArgs) any { return &a.Listen.Backoff.Max }, template: templateOption,
		usage: "longest retry delay (at most 12h)"},
	{name: "backoff-jitter", try: true, setting: listenspec.SettingBackoffJitter, field: func(a *listenArgs) any { return &a.Listen.Backoff.Jitter }, template: templateOption,
		usage: "none, full or equal"},
	{name: "heartbeat-interval", setting: listenspec.SettingHeartbeatInterval, field: func(a *listenArgs) any { return &a.Listen.HeartbeatInterval }, template: templateOption,
		usage: "lease renewal period (sooner when a failed renewal needs time to retry)", defaultText: "visibility timeout / 2"},
	// try reads Watchbot's maxJobDuration from the environment as listen does; the template does not.
	{name: "max-job-duration", try: true, setting: listenspec.SettingMaxJobDuration, field: func(a *listenArgs) any { return &a.Listen.MaxJobDuration }, template: templateOption,
		usage: "stop a worker after this long (0 = no limit; over 12h needs --dedupe-table)", env: []string{"maxJobDuration"}},
	{name: "batch-size", try: true, setting: listenspec.SettingBatchSize, field: func(a *listenArgs) any { return &a.Listen.BatchSize }, template: templateOption,
		usage: "messages per worker run, as JSON Lines (1..100; 1: one message per run)", defaultText: "1; 10 with --lambda",
		tryDefaultText: "the number of messages given"},
	{name: "batch-window", setting: listenspec.SettingBatchWindow, field: func(a *listenArgs) any { return &a.Listen.BatchWindow }, template: templateOption,
		usage: "how long a batch may wait to fill after its first message (0..30s)"},

	// The limits (docs/limits.md) but --limits-table, which `watchbot template` passes on.
	{name: "rate-limit", setting: listenspec.SettingRateLimit, bind: bindRate(func(a *listenArgs) *float64 { return &a.Listen.Limits.Fleet.Rate }), template: templateArg,
		flag: func() cli.Flag {
			return &cli.StringFlag{Name: "rate-limit", Usage: "at most `N/s` (or N/m) job starts, with a burst of one second's worth", DefaultText: "none"}
		}},
	{name: "fleet-concurrency", setting: listenspec.SettingFleetConcurrency, field: func(a *listenArgs) any { return &a.Listen.Limits.Fleet.Concurrency }, template: templateArg,
		usage: "at most `N` jobs running at once (across the fleet with --limits-table)", defaultText: "none"},
	{name: "limit-key", setting: listenspec.SettingLimitKey, field: func(a *listenArgs) any { return &a.Listen.Limits.Key }, trim: true, template: templateArg,
		usage: "a message's key for the per-key limits: attr:NAME or group (its MessageGroupId)"},
	{name: "rate-limit-per-key", setting: listenspec.SettingRatePerKey, bind: bindRate(func(a *listenArgs) *float64 { return &a.Listen.Limits.Fleet.RatePerKey }), template: templateArg,
		flag: func() cli.Flag {
			return &cli.StringFlag{Name: "rate-limit-per-key", Usage: "at most `N/s` (or N/m) job starts per key", DefaultText: "none"}
		}},
	{name: "concurrency-per-key", setting: listenspec.SettingConcurrencyPerKey, field: func(a *listenArgs) any { return &a.Listen.Limits.Fleet.ConcurrencyPerKey }, template: templateArg,
		usage: "at most `N` jobs of one key running at once", defaultText: "none"},
	{name: "limit-wait", setting: listenspec.SettingLimitWait, field: func(a *listenArgs) any { return &a.Listen.Limits.Wait }, template: templateArg,
		usage: "how long a message whose key is full waits in place before it is released"},
	{name: "max-pause", setting: listenspec.SettingMaxPause, field: func(a *listenArgs) any { return &a.Listen.Limits.Fleet.MaxPause }, template: templateArg,
		usage: "the longest pause a worker may ask for (docs/limits.md)"},

	// The metrics.
	{name: "metrics", setting: listenspec.SettingMetrics, field: func(a *listenArgs) any { return &a.Metrics.Mode },
		usage: "emf (lines on stdout for the awslogs driver), cloudwatch (PutMetricData), none"},
	{name: "metrics-namespace", setting: listenspec.SettingMetricsNamespace, field: func(a *listenArgs) any { return &a.Metrics.Namespace },
		usage: "CloudWatch namespace of the metrics"},
	{name: "metrics-service", field: func(a *listenArgs) any { return &a.metricsService },
		usage: "adds a Service dimension with this value to every metric"},
}

// listenArgs is what listen's flags are read into: app.Run's options, and the values that
// become part of them once every flag is read (the logger, the metrics' Service dimension,
// scale-in protection).
type listenArgs struct {
	app.Options
	logFormat, logLevel, metricsService, protection string
}

// defaultListenArgs holds listen's defaults, which its flags show: the supervisor's
// (supervisor.DefaultConfig) and the publisher's, and the process's own.
func defaultListenArgs() listenArgs {
	return listenArgs{
		Options:  app.Options{Listen: supervisor.DefaultConfig(), Metrics: alarms.DefaultPublisherConfig()},
		logLevel: "info", protection: app.ProtectAuto,
	}
}

// bindBrake reads --brake: off turns the brake off, and its other settings with it.
func bindBrake(_ listenSetting, c *cli.Context, a *listenArgs) error {
	on, err := brakeOn(c.String("brake"))
	a.Listen.Brake.Enabled = on
	return err
}

// bindVolumes reads --volumes, a list of directories that commas separate (Watchbot's
// Volumes variable).
func bindVolumes(_ listenSetting, c *cli.Context, a *listenArgs) error {
	for v := range strings.SplitSeq(c.String("volumes"), ",") {
		if v = strings.TrimSpace(v); v != "" {
			a.Listen.Volumes = append(a.Listen.Volumes, v)
		}
	}
	return nil
}

// bindPayloadBuckets reads --payload-bucket, repeated or with commas.
func bindPayloadBuckets(_ listenSetting, c *cli.Context, a *listenArgs) error {
	for _, b := range c.StringSlice("payload-bucket") {
		if b = strings.TrimSpace(b); b != "" {
			a.Listen.Payload.Buckets = append(a.Listen.Payload.Buckets, b)
		}
	}
	return nil
}

// bindDedupeTable reads --dedupe-table, a table's name or ARN.
func bindDedupeTable(_ listenSetting, c *cli.Context, a *listenArgs) error {
	table, err := stateTable(c.String("dedupe-table"), listenspec.SettingDedupeTable)
	a.DedupeTable, a.Listen.Dedupe.Table = table, table.Name
	return err
}

// bindLimitsTable reads --limits-table, a table's name or ARN, where this process holds its
// slots as taskName.
func bindLimitsTable(_ listenSetting, c *cli.Context, a *listenArgs) error {
	table, err := stateTable(c.String("limits-table"), listenspec.SettingLimitsTable)
	a.LimitsTable = table
	if table.Name != "" {
		a.Listen.Limits.Fleet.Table, a.Listen.Limits.Fleet.Task = table.Name, taskName(c.Context)
	}
	return err
}
