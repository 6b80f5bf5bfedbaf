package main

import (
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/watchbot/watchbot/app"
	"github.com/watchbot/watchbot/backoff"
	"github.com/watchbot/watchbot/internal/awsenv"
	"github.com/watchbot/watchbot/internal/ecsagent"
	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/internal/setting"
	"github.com/watchbot/watchbot/progress"
	"github.com/watchbot/watchbot/supervisor"
)

func listenCommand(abort <-chan struct{}) *cli.Command {
	def := supervisor.DefaultConfig()
	return &cli.Command{
		Name:      "listen",
		Usage:     "long-poll a queue and run a worker command per message",
		ArgsUsage: "-- COMMAND [ARG...]",
		Description: "The command is exec'd directly (no shell; use -- sh -c '...' for one) in its own process group,\n" +
			"with the message in its environment, on stdin and in $WATCHBOT_MESSAGE_FILE. Exit 0 deletes the\n" +
			"message, 3 rejects it (dead-letter), 4 releases it for a retry, anything else retries with backoff.",
		Flags: append(append(queueFlags(def),
			&cli.IntFlag{Name: "concurrency", Value: def.Concurrency, Usage: "worker processes running at once (1..1000)", EnvVars: []string{"WATCHBOT_CONCURRENCY"}},
			&cli.IntFlag{Name: "max-attempts", Usage: "attempts before a message is dead-lettered", DefaultText: "the queue's maxReceiveCount", EnvVars: []string{"WATCHBOT_MAX_ATTEMPTS"}},
			&cli.BoolFlag{Name: "allow-no-dlq", Usage: "run on a queue without a redrive policy (dead-letters are logged, then deleted)"},
			durationFlag("visibility-timeout", def.VisibilityTimeout, "lease taken on receive and renewed by the heartbeat"),
			withDefaultText(durationFlag("receive-visibility", def.ReceiveVisibility, "the lease a receive takes, extended once a message is held (≥ --kill-grace + 3s)"),
				"min(visibility timeout, max(20s, kill grace + 15s))"),
			durationFlag("kill-grace", def.KillGrace, "wait between SIGTERM and SIGKILL when a worker is stopped"),
			durationFlag("shutdown-timeout", def.ShutdownTimeout, "how long running workers may finish after SIGTERM"),
			&cli.StringFlag{Name: "on-reject", Value: string(def.OnReject), Usage: "what exit 3 does: dead-letter or delete"},
			durationFlag("max-message-age", 0, "dead-letter unrun the messages sent longer ago than this (0 = off)"),
			withDefaultText(durationFlag("retry-delay", 0, "one delay for every retry the worker does not time, instead of the backoff"), "the backoff"),
			&cli.StringFlag{Name: "volumes", Usage: "comma-separated directories emptied after every job (needs --concurrency 1)", EnvVars: []string{"Volumes"}},
			&cli.BoolFlag{Name: "once", Usage: "process one message, then exit", EnvVars: []string{"writableFilesystem"}},
			logFormatFlag(),
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error"},
			&cli.BoolFlag{Name: "log-bodies", Usage: "include message bodies in log lines (off: bodies may hold secrets)"},
			&cli.StringFlag{Name: "temp-dir", Usage: "writable directory for the jobs' message and result files (checked at start)", DefaultText: "/dev/shm, spilling to $TMPDIR; else $TMPDIR"},
			&cli.StringFlag{Name: "endpoint-url", Usage: "SQS endpoint, for local emulators", EnvVars: []string{"AWS_ENDPOINT_URL_SQS"}},
			&cli.StringFlag{Name: "scale-in-protection", Value: app.ProtectAuto, Usage: "protect the ECS task from scale-in while it holds messages: auto, on or off"},
			durationFlag("scale-in-protection-idle", def.ProtectionIdle, "how long an idle task stays protected after its last message"),
			&cli.StringFlag{Name: "brake", Value: "on", Usage: "when nearly every run fails, probe with one message until one succeeds: on, off"},
			&cli.Float64Flag{Name: "brake-threshold", Value: def.Brake.Threshold, Usage: "share of failed runs in the window that brakes (0..1]"},
			&cli.IntFlag{Name: "brake-window", Value: def.Brake.Window, Usage: "how many of the latest runs (of the last 10 minutes) the brake judges"},
			&cli.IntFlag{Name: "brake-min-runs", Value: def.Brake.MinRuns, Usage: "runs the window must hold before the brake judges it"},
			durationFlag("brake-probe-max", def.Brake.ProbeMax, "longest interval between probes while braking (from 2s, doubling)"),
			&cli.StringFlag{Name: "http-addr", Usage: "serve /healthz, /readyz and /metrics on `ADDR` (127.0.0.1:9090, :9090)", EnvVars: []string{"WATCHBOT_HTTP_ADDR"}, DefaultText: "off"},
			durationFlag("health-grace", def.HealthGrace, "how long receives may fail without a break before /healthz reports unhealthy"),
			&cli.StringFlag{Name: "http-worker", Usage: "POST each message to this `URL` instead of running a command", EnvVars: []string{"WATCHBOT_HTTP_WORKER"}},
			&cli.StringFlag{Name: "http-content-type", Value: def.HTTP.ContentType, Usage: "Content-Type of the POSTs"},
			durationFlag("http-timeout", def.HTTP.Timeout, "how long the application may take to answer a POST"),
			durationFlag("http-connect-timeout", def.HTTP.ConnectTimeout, "how long a connection to the application may take to open"),
			&cli.StringFlag{Name: "http-health-path", Usage: "`PATH` on the application that answers 2xx once it is up", DefaultText: "its port accepting connections"},
			durationFlag("http-startup-timeout", def.HTTP.StartupTimeout, "how long startup waits for the application before it gives up (exit 2)"),
			&cli.StringFlag{Name: "dedupe-table", Usage: "run each key once: claim it in this DynamoDB `TABLE` (name or ARN) first", EnvVars: []string{"WATCHBOT_DEDUPE_TABLE"}, DefaultText: "off"},
			&cli.StringFlag{Name: "dedupe-key", Value: def.Dedupe.Key, Usage: "a message's key: message-id, or attr:NAME (an idempotency key attribute)"},
			withDefaultText(durationFlag("dedupe-ttl", def.Dedupe.TTL, "how long a completed key is remembered"), "the queue's message retention period"),
			&cli.StringFlag{Name: "limits-table", Usage: "share the limits and pauses with every task naming this DynamoDB `TABLE`", EnvVars: []string{"WATCHBOT_LIMITS_TABLE"}, DefaultText: "per task"},
			&cli.StringSliceFlag{Name: "payload-bucket", Usage: "fetch S3 payload pointers (SQS Extended Client) from this `BUCKET` alone; repeatable", EnvVars: []string{"WATCHBOT_PAYLOAD_BUCKETS"}, DefaultText: "pointers passed through"},
			&cli.BoolFlag{Name: "keep-payloads", Usage: "keep each S3 payload after its message succeeded (by default it is deleted)"},
		), append(append(tuningFlags(def, true), limitFlags(def)...), metricsFlags()...)...),
		Action: func(c *cli.Context) error {
			if err := supervisor.PlatformError("listen", runtime.GOOS); err != nil {
				return err
			}
			opts, err := listenOptions(c, os.Getenv(ecsagent.EnvURI))
			if err != nil {
				return err
			}
			opts.Abort = abort
			return app.Run(c.Context, opts)
		},
	}
}

// listenOptions copies the flags into validated app.Options; agentURI is the ECS agent's
// (ecsagent.EnvURI), which --scale-in-protection auto follows.
func listenOptions(c *cli.Context, agentURI string) (app.Options, error) {
	cfg, table, err := listenConfig(c)
	if err != nil {
		return app.Options{}, err
	}
	limitsTable, err := stateTable(c.String("limits-table"), listenspec.SettingLimitsTable)
	if err != nil {
		return app.Options{}, err
	}
	log, err := newLogger(c, logFormat(c), c.String("log-level"))
	if err != nil {
		return app.Options{}, err
	}
	metrics, err := metricsConfig(c, cfg.QueueURL, log)
	if err != nil {
		return app.Options{}, err
	}
	protection, err := app.ScaleInProtection(c.String("scale-in-protection"), agentURI)
	if err != nil {
		return app.Options{}, err
	}
	endpoint := awsenv.Options{Endpoint: c.String("endpoint-url"), QueueURL: cfg.QueueURL}
	if err := withSQSEndpoint(&endpoint, log.With("queue", queueattr.NameFromURL(cfg.QueueURL))); err != nil {
		return app.Options{}, err
	}
	return app.Options{Listen: cfg, Logger: log, Metrics: metrics, HTTPAddr: c.String("http-addr"),
		Endpoint: endpoint.Endpoint, Protection: protection, DedupeTable: table, LimitsTable: limitsTable}, nil
}

// listenConfig copies the flags into a validated supervisor.Config, and returns the dedupe
// table they name.
func listenConfig(c *cli.Context) (supervisor.Config, progress.Table, error) {
	cfg := supervisor.DefaultConfig()
	if err := readQueues(c, &cfg); err != nil {
		return cfg, progress.Table{}, err
	}
	cfg.Command = c.Args().Slice()
	cfg.Concurrency = c.Int("concurrency")
	cfg.MaxAttempts = c.Int("max-attempts")
	cfg.AllowNoDLQ = c.Bool("allow-no-dlq")
	t := readTuning(c)
	cfg.Backoff, cfg.HeartbeatInterval, cfg.MaxJobDuration, cfg.BatchSize, cfg.BatchWindow = t.Backoff, t.HeartbeatInterval, t.MaxJobDuration, t.BatchSize, t.BatchWindow
	cfg.VisibilityTimeout = durationOf(c, "visibility-timeout")
	cfg.ReceiveVisibility = durationOf(c, "receive-visibility")
	cfg.KillGrace = durationOf(c, "kill-grace")
	cfg.ShutdownTimeout = durationOf(c, "shutdown-timeout")
	cfg.OnReject = supervisor.RejectAction(c.String("on-reject"))
	cfg.MaxMessageAge = durationOf(c, "max-message-age")
	cfg.RetryDelay = durationOf(c, "retry-delay")
	for _, v := range strings.Split(c.String("volumes"), ",") {
		if v = strings.TrimSpace(v); v != "" {
			cfg.Volumes = append(cfg.Volumes, v)
		}
	}
	cfg.Once = c.Bool("once")
	cfg.LogBodies = c.Bool("log-bodies")
	cfg.TempDir = c.String("temp-dir")
	cfg.ProtectionIdle = durationOf(c, "scale-in-protection-idle")
	cfg.HealthGrace = durationOf(c, "health-grace")
	cfg.HTTP.URL = strings.TrimSpace(c.String("http-worker"))
	cfg.HTTP.ContentType = c.String("http-content-type")
	cfg.HTTP.Timeout = durationOf(c, "http-timeout")
	cfg.HTTP.ConnectTimeout = durationOf(c, "http-connect-timeout")
	cfg.HTTP.HealthPath = c.String("http-health-path")
	cfg.HTTP.StartupTimeout = durationOf(c, "http-startup-timeout")
	table, err := stateTable(c.String("dedupe-table"), listenspec.SettingDedupeTable)
	if err != nil {
		return cfg, table, err
	}
	cfg.Dedupe = supervisor.DedupeConfig{Table: table.Name, Key: c.String("dedupe-key"), TTL: durationOf(c, "dedupe-ttl")}
	if cfg.Limits, err = limitsConfig(c); err != nil {
		return cfg, table, err
	}
	for _, b := range c.StringSlice("payload-bucket") {
		if b = strings.TrimSpace(b); b != "" {
			cfg.Payload.Buckets = append(cfg.Payload.Buckets, b)
		}
	}
	cfg.Payload.Keep = c.Bool("keep-payloads")
	brake, err := brakeOn(c)
	if err != nil {
		return cfg, table, err
	}
	if brake {
		cfg.Brake.Threshold, cfg.Brake.Window, cfg.Brake.MinRuns = c.Float64("brake-threshold"), c.Int("brake-window"), c.Int("brake-min-runs")
		cfg.Brake.ProbeMax = durationOf(c, "brake-probe-max")
	} else {
		cfg.Brake = supervisor.BrakeConfig{}
	}
	return cfg, table, cfg.Validate()
}

// brakeOn reads --brake, which listen and template share.
func brakeOn(c *cli.Context) (bool, error) {
	switch v := c.String("brake"); v {
	case "on", "off":
		return v == "on", nil
	default:
		return false, setting.Refuse(listenspec.SettingBrake, v, "must be on or off")
	}
}

// tuningFlags are listen's flags that `watchbot template` offers too and passes on to the
// listen command it generates, with listen's defaults. Only listen (listen true) reads
// Watchbot's maxJobDuration from the environment.
func tuningFlags(def supervisor.Config, listen bool) []cli.Flag {
	var jobEnv []string
	if listen {
		jobEnv = []string{"maxJobDuration"}
	}
	return []cli.Flag{
		durationFlag("backoff-base", def.Backoff.Base, "delay after failed attempt n is base·2^(n-1)"),
		durationFlag("backoff-min", def.Backoff.Min, "shortest retry delay"),
		durationFlag("backoff-max", def.Backoff.Max, "longest retry delay (at most 12h)"),
		&cli.StringFlag{Name: "backoff-jitter", Value: string(def.Backoff.Jitter), Usage: "none, full or equal"},
		withDefaultText(durationFlag("heartbeat-interval", def.HeartbeatInterval, "lease renewal period (sooner when a failed renewal needs time to retry)"), "visibility timeout / 2"),
		durationFlag("max-job-duration", def.MaxJobDuration, "stop a worker after this long (0 = no limit)", jobEnv...),
		&cli.IntFlag{Name: "batch-size", Value: def.BatchSize, Usage: "messages per worker run, as JSON Lines (1..100; 1: one message per run)"},
		durationFlag("batch-window", def.BatchWindow, "how long a batch may wait to fill after its first message (0..30s)"),
	}
}

// tuning is what tuningFlags set.
type tuning struct {
	Backoff                           backoff.Exponential
	HeartbeatInterval, MaxJobDuration time.Duration
	BatchSize                         int
	BatchWindow                       time.Duration
}

func readTuning(c *cli.Context) tuning {
	return tuning{
		Backoff: backoff.Exponential{
			Base:   durationOf(c, "backoff-base"),
			Min:    durationOf(c, "backoff-min"),
			Max:    durationOf(c, "backoff-max"),
			Jitter: backoff.Jitter(c.String("backoff-jitter")),
		},
		HeartbeatInterval: durationOf(c, "heartbeat-interval"),
		MaxJobDuration:    durationOf(c, "max-job-duration"),
		BatchSize:         c.Int("batch-size"),
		BatchWindow:       durationOf(c, "batch-window"),
	}
}
