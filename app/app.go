// Package app runs `watchbot listen` as a process, as alertmanager's app runs alertmanager:
// given the options the command line filled in, it builds the AWS clients, the metrics
// publisher, the health and metrics server and scale-in protection around the supervisor,
// runs it, and stops them in order after the drain. The command line only translates flags
// into Options; the packages decide.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/dedupe"
	"github.com/watchbot/watchbot/internal/awsenv"
	"github.com/watchbot/watchbot/internal/ecsagent"
	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/internal/setting"
	"github.com/watchbot/watchbot/internal/tracing"
	"github.com/watchbot/watchbot/limits"
	"github.com/watchbot/watchbot/payload"
	"github.com/watchbot/watchbot/progress"
	"github.com/watchbot/watchbot/supervisor"
)

// Options are everything a listen process is told.
type Options struct {
	// Listen is the supervisor's configuration, which Run trusts: the caller validates it
	// (supervisor.Config.Validate), as listen does when it reads its flags.
	Listen supervisor.Config
	// Logger receives every log line; Run adds the queue's name to it. nil discards them.
	Logger *slog.Logger
	// Metrics configures the publisher (--metrics*), from alarms.DefaultPublisherConfig,
	// validated by the caller as Listen is. Run adds the samplers of the supervisor's load, the dead-letter queue's depth and the
	// CloudWatch client.
	Metrics alarms.PublisherConfig
	// HTTPAddr, when set, serves /healthz, /readyz and /metrics there (--http-addr).
	HTTPAddr string
	// Endpoint, when set, takes every queue's SQS requests (--endpoint-url: an emulator, a
	// proxy); "" sends each queue's to the endpoint and region its URL gives
	// (awsenv.QueueSQS).
	Endpoint string
	// Protection is the ECS agent's task protection, from ScaleInProtection; nil is off.
	Protection supervisor.ProtectionAPI
	// DedupeTable is the table of duplicate suppression (--dedupe-table); its name is
	// Listen.Dedupe.Table, and its region, when an ARN gave one, that of its client.
	DedupeTable progress.Table
	// LimitsTable is the table the limits are shared through (--limits-table), as
	// DedupeTable is; its name is Listen.Limits.Fleet.Table. Unset, they hold per task.
	LimitsTable progress.Table
	// Abort, when closed, stops the drain at once (a second signal).
	Abort <-chan struct{}
}

// Run runs listen until ctx is done and the drain has ended, then stops the publisher after
// its last flush and the server last. o comes validated, and Run checks it no more. Its errors
// are the supervisor's (a setting.Error for a failed startup check).
func Run(ctx context.Context, o Options) error {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	queues := newQueueViews(o.Listen)
	// With several queues, the supervisor names each queue on its own lines.
	log := o.Logger
	if len(queues) == 1 {
		log = log.With("queue", queues[0].name)
	}
	o.Metrics.Logger = log
	awsCfg, err := awsenv.Load(ctx, awsenv.Options{QueueURL: o.Listen.QueueURL, Logger: log})
	if err != nil {
		return err
	}
	connectQueues(queues, awsCfg, o.Endpoint, log)
	lim, err := newLimiter(ctx, o.Listen.Limits, o.LimitsTable, o.Listen.QueueURL, log)
	if err != nil {
		return err
	}
	var prom []alarms.Recorder
	var tenants *supervisor.Tenants // counted only for /metrics
	if o.HTTPAddr != "" {
		tenants = supervisor.NewTenants()
		srv, recs, err := startStatusServer(o.HTTPAddr, queues, tenants, lim, log)
		if err != nil {
			return err
		}
		// Deferred first, so it stops last: after the drain and the final flush.
		defer srv.stop()
		prom = recs
	}
	dedupeStore, err := dedupeStores(ctx, o.DedupeTable, o.Listen.QueueURL, log)
	if err != nil {
		return err
	}
	// Each queue's metrics carry its name (the QueueName dimension) and its own DLQ's depth.
	perQueue := map[string]supervisor.QueueDeps{}
	for i, q := range queues {
		metrics, stopMetrics, err := startMetrics(ctx, forQueue(o.Metrics, q.name, len(queues)), q.load, lim, awsCfg, q.sqs, q.url)
		if err != nil {
			return err
		}
		// Stopped after the drain, so the last flush counts the last jobs.
		defer stopMetrics()
		if prom != nil {
			metrics = alarms.Tee(metrics, prom[i])
		}
		perQueue[q.name] = supervisor.QueueDeps{SQS: q.sqs, Load: q.load, Health: q.health, Metrics: metrics, Dedupe: dedupeStore(q.url)}
	}
	tracer, stopTracing, err := tracing.Setup(ctx, "watchbot", log)
	if err != nil {
		// The OTEL_* variables are configuration: a value watchbot cannot use is refused.
		return setting.Error{Reason: "tracing: " + err.Error()}
	}
	defer flushSpans(ctx, stopTracing, o.Listen.ShutdownTimeout, log)()
	first := perQueue[queues[0].name]
	deps := supervisor.Deps{SQS: first.SQS, Logger: log, Metrics: first.Metrics, Abort: o.Abort, PerQueue: perQueue,
		Protection: o.Protection, Dedupe: first.Dedupe, Tracer: tracer, Tenants: tenants, Limiter: lim, S3: payloadStore(o.Listen.Payload, awsCfg)}
	return supervisor.Run(ctx, o.Listen, deps)
}

// newQueueViews returns the views of cfg's queues, in order, each with its own gauges
// and health.
func newQueueViews(cfg supervisor.Config) []queueView {
	urls := cfg.URLs()
	queues := make([]queueView, len(urls))
	for i, u := range urls {
		queues[i] = queueView{url: u, name: queueattr.NameFromURL(u), load: supervisor.NewLoad(), health: supervisor.NewHealth(cfg)}
	}
	return queues
}

// connectQueues gives each queue its SQS client (awsenv.QueueSQS): its requests go to
// endpoint when it is set, for every queue; else to the endpoint and region the queue's URL
// gives, so one listen serves queues on several endpoints or in several regions. A queue whose
// URL's host is its endpoint says so, since no setting named it.
func connectQueues(queues []queueView, cfg aws.Config, endpoint string, log *slog.Logger) {
	for i := range queues {
		q := &queues[i]
		client, own := awsenv.QueueSQS(cfg, awsenv.Options{Endpoint: endpoint, QueueURL: q.url, Logger: log}, os.Getenv)
		if own != "" {
			qlog := log
			if len(queues) > 1 {
				qlog = log.With("queue", q.name)
			}
			qlog.Info("SQS endpoint taken from the queue URL's host", "endpoint", own)
		}
		q.sqs = client
	}
}

// dedupeStores returns the function giving each queue's store in the dedupe table, or nil
// for every queue without one. One client serves every queue's store: a table shared by
// several queues keeps their keys apart by queue name (the store's scope).
func dedupeStores(ctx context.Context, table progress.Table, queueURL string, log *slog.Logger) (func(queueURL string) supervisor.DedupeAPI, error) {
	if table.Name == "" {
		return func(string) supervisor.DedupeAPI { return nil }, nil
	}
	api, err := tableClient(ctx, table, queueURL, log)
	if err != nil {
		return nil, err
	}
	return func(queueURL string) supervisor.DedupeAPI {
		return dedupe.NewStore(api, table.Name, queueattr.NameFromURL(queueURL))
	}, nil
}

// payloadStore returns the S3 client that fetches the payloads of pointer messages, or nil
// when cfg allows no bucket. An allowed bucket may be in another region than the task's: S3
// names it when it refuses the first request, and the follower asks there.
func payloadStore(cfg supervisor.PayloadConfig, awsCfg aws.Config) supervisor.PayloadAPI {
	if len(cfg.Buckets) == 0 {
		return nil
	}
	return &payload.RegionFollower{API: awsenv.S3(awsCfg, os.Getenv)}
}

// forQueue returns the publisher's configuration for the queue named name, one of n: its
// QueueName dimension names that queue, and its log lines do when there are several.
func forQueue(cfg alarms.PublisherConfig, name string, n int) alarms.PublisherConfig {
	cfg.Dimensions = slices.Clone(cfg.Dimensions)
	for i, d := range cfg.Dimensions {
		if d.Name == alarms.DimensionQueueName {
			cfg.Dimensions[i].Value = name
		}
	}
	if n > 1 && cfg.Logger != nil {
		cfg.Logger = cfg.Logger.With("queue", name)
	}
	return cfg
}

// flushSpans returns the function that flushes the spans still queued once the supervisor has
// drained. The flush ends with the drain's window: window after ctx ended (the stop), so
// exporting never holds the process past the time its stop allows; the spans it cannot send
// by then are dropped.
func flushSpans(ctx context.Context, shutdown func(context.Context) error, window time.Duration, log *slog.Logger) func() {
	var stoppedAt time.Time
	var mu sync.Mutex
	stopWatching := context.AfterFunc(ctx, func() {
		mu.Lock()
		stoppedAt = time.Now()
		mu.Unlock()
	})
	return func() {
		stopWatching()
		mu.Lock()
		at := stoppedAt
		mu.Unlock()
		if at.IsZero() {
			at = time.Now() // the supervisor ended on its own (--once, an error): the window starts now
		}
		deadline := at.Add(window)
		fctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
		defer cancel()
		if err := shutdown(fctx); err != nil {
			log.Warn("spans not exported before the drain's window ended", "error", err)
		}
	}
}

// startMetrics starts the publisher, sampling load's gauges and the dead-letter queue's
// depth. stop ends it after a last flush and waits for it.
func startMetrics(ctx context.Context, cfg alarms.PublisherConfig, load *supervisor.Load, lim *limits.Limiter, awsCfg aws.Config, api queueattr.API, queueURL string) (rec alarms.Recorder, stop func(), err error) {
	if cfg.Mode == alarms.ModeNone {
		return alarms.Discard, func() {}, nil
	}
	if cfg.Mode == alarms.ModeCloudWatch {
		cfg.CloudWatch = cloudwatch.NewFromConfig(awsCfg)
	}
	cfg.DLQDepth = alarms.DLQDepth(api, queueURL)
	cfg.Samplers = []alarms.Sampler{
		{Metric: alarms.WorkerSlots, Sample: func() float64 { return float64(load.Slots()) }},
		{Metric: alarms.BusySlots, Sample: load.BusySlots},
		{Metric: alarms.ConcurrencyLimit, Sample: func() float64 { return float64(load.Limit()) }},
		{Metric: alarms.BrakingSeconds, Sample: load.BrakingSeconds},
		{Metric: alarms.LimitPaused, Sample: func() float64 { return pausedSeconds(lim, time.Now()) }},
		{Metric: alarms.LimitFallback, Sample: func() float64 { return boolGauge(lim.Snapshot().Fallback) }},
		{Metric: alarms.LimitFallbackSeconds, Sample: fallbackSeconds(lim)},
		{Metric: alarms.Paused, Sample: fleetPaused(lim, queueattr.NameFromURL(queueURL))},
		{Metric: alarms.SettingsVersion, Sample: func() float64 { return float64(lim.Snapshot().ControlVersion) }},
	}
	p, err := alarms.NewPublisher(cfg)
	if err != nil {
		return nil, nil, err
	}
	// The publisher outlives the stop request: it flushes once more after the drain.
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { _ = p.Run(runCtx) })
	return p, func() { cancel(); wg.Wait() }, nil
}

// fallbackSeconds returns a sampler of the time lim spent in fallback since it last sampled.
func fallbackSeconds(lim *limits.Limiter) func() float64 {
	var mu sync.Mutex
	var last time.Duration
	return func() float64 {
		mu.Lock()
		defer mu.Unlock()
		total := lim.Snapshot().FallbackTotal
		d := total - last
		last = total
		return d.Seconds()
	}
}

// tableClient returns the DynamoDB client of a state table (--dedupe-table, --limits-table),
// built as `watchbot progress` builds its own: the SDK's configuration (endpoint from
// AWS_ENDPOINT_URL_DYNAMODB), in the region an ARN names.
func tableClient(ctx context.Context, table progress.Table, queueURL string, log *slog.Logger, optFns ...func(*dynamodb.Options)) (*dynamodb.Client, error) {
	opts := awsenv.Options{QueueURL: queueURL, Region: table.Region, Logger: log}
	awsCfg, err := awsenv.Load(ctx, opts)
	if err != nil {
		return nil, err
	}
	return awsenv.DynamoDB(awsCfg, opts, optFns...), nil
}

// newLimiter builds the limiter of cfg: on the limits table when one is named (its client
// from tableClient), else per task. On a table it records cfg's limits
// there for status (one bounded write); the limiter itself makes no call until it runs.
func newLimiter(ctx context.Context, cfg supervisor.LimitsConfig, table progress.Table, queueURL string, log *slog.Logger) (*limits.Limiter, error) {
	var store limits.Store
	if table.Name != "" {
		api, err := tableClient(ctx, table, queueURL, log, limits.ClientOptions)
		if err != nil {
			return nil, err
		}
		store = limits.NewDynamoStore(api, table.Name)
		if err := writeLimitSettings(ctx, api, table.Name, LimitSettingsOf(cfg, cfg.Fleet.Task, time.Now()), log); err != nil {
			return nil, err
		}
	}
	return limits.New(cfg.Fleet, store, time.Now, log.With("component", "limits")), nil
}

// writeLimitSettings records the task's limits in the table for status, within
// limitSettingsWriteTimeout. It is also the table's startup check: a table that does not
// exist, or that the role may not write, is a configuration error (a mistyped name, a
// missing grant) that would otherwise leave every task on its smallest fallback share, so it
// stops the start. Any other failure is logged, and the limiter falls back until the table
// answers.
func writeLimitSettings(ctx context.Context, api LimitSettingsAPI, table string, s LimitSettings, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, limitSettingsWriteTimeout)
	defer cancel()
	err := WriteLimitSettings(ctx, api, table, s)
	var missing *types.ResourceNotFoundException
	code, denied := awsenv.Denied(err)
	switch {
	case err == nil:
	case errors.As(err, &missing):
		return setting.Refuse(listenspec.SettingLimitsTable, table, "does not exist in this account and region: create it (watchbot template --limits adds it; docs/limits.md gives its layout)")
	case denied:
		return setting.Refuse(listenspec.SettingLimitsTable, table, fmt.Sprintf("permission denied (%s): grant the role dynamodb:GetItem, PutItem and UpdateItem on it (docs/listen.md#iam-permissions)", code))
	default:
		log.Warn("limits: could not record this task's limits in the table for status; the limits hold, on the fallback share until the table answers", "error", err)
	}
	return nil
}

// The scale-in protection modes (--scale-in-protection).
const (
	ProtectAuto = "auto"
	ProtectOn   = "on"
	ProtectOff  = "off"
)

// ProtectCallTimeout bounds one HTTP call to the ECS agent; the supervisor bounds each call
// too.
const ProtectCallTimeout = 5 * time.Second

// ScaleInProtection returns the ECS agent's task protection in mode, given the agent's URI
// from the environment (ecsagent.EnvURI), or nil when it is off: auto turns it on inside an
// ECS task, where the agent sets the URI. It makes no call.
func ScaleInProtection(mode, agentURI string) (supervisor.ProtectionAPI, error) {
	switch mode {
	case ProtectOff:
		return nil, nil
	case ProtectAuto, ProtectOn:
	default:
		return nil, setting.Refuse(listenspec.SettingScaleInProtection, mode, "must be auto, on or off")
	}
	if agentURI == "" {
		if mode == ProtectOn {
			return nil, setting.Refuse(listenspec.SettingScaleInProtection, nil,
				"on needs "+ecsagent.EnvURI+", which the ECS agent sets in every container of a task; it is not set here")
		}
		return nil, nil
	}
	u, err := url.Parse(agentURI)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, setting.Refuse("", nil, fmt.Sprintf("%s (%q) is not an http URL; use %s off to run without task protection",
			ecsagent.EnvURI, agentURI, setting.Ref(listenspec.SettingScaleInProtection)))
	}
	return ecsagent.New(agentURI, ProtectCallTimeout), nil
}
