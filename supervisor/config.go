package supervisor

import (
	"fmt"
	"time"

	"github.com/watchbot/watchbot/backoff"
	"github.com/watchbot/watchbot/dedupe"
	"github.com/watchbot/watchbot/internal/ecsagent"
	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/internal/setting"
	"github.com/watchbot/watchbot/internal/sqsspec"
	"github.com/watchbot/watchbot/worker"
)

// RejectAction is what exit code 3 does (--on-reject).
type RejectAction string

// The --on-reject values.
const (
	// RejectDeadLetter sends the message to the DLQ with a reason, then deletes it.
	RejectDeadLetter RejectAction = "dead-letter"
	// RejectDelete deletes the message, as Mapbox's Watchbot does.
	RejectDelete RejectAction = "delete"
)

// Config is everything `watchbot listen` is told. The zero value is not valid: start from
// DefaultConfig.
type Config struct {
	// QueueURL is the work queue (--queue-url).
	QueueURL string
	// Command is the worker, exec'd directly with no shell (the words after --).
	Command []string
	// Concurrency is how many workers run at once (1..1000).
	Concurrency int
	// MaxAttempts is how many attempts a message gets; 0 means the queue's maxReceiveCount
	// (or 10 with AllowNoDLQ and no redrive policy).
	MaxAttempts int
	// AllowNoDLQ permits a queue without a redrive policy.
	AllowNoDLQ bool
	// Backoff is the delay after a failed attempt.
	Backoff backoff.Exponential
	// VisibilityTimeout is the lease taken on receive and renewed by the heartbeat.
	VisibilityTimeout time.Duration
	// ReceiveVisibility is the lease a receive takes, shorter than VisibilityTimeout, which
	// the heartbeat gives a message once it has been held for a third of it; 0 means
	// min(VisibilityTimeout, max(20s, KillGrace+15s)). A message whose receive answer never
	// arrived (lost, or a long poll cancelled by a second stop request) is out of reach only
	// this long.
	ReceiveVisibility time.Duration
	// HeartbeatInterval is how often running messages' leases are renewed; 0 means
	// VisibilityTimeout/2.
	HeartbeatInterval time.Duration
	// MaxJobDuration stops a worker that runs longer (0: no limit).
	MaxJobDuration time.Duration
	// KillGrace is the wait between SIGTERM and SIGKILL when a worker is stopped.
	KillGrace time.Duration
	// ShutdownTimeout is how long running workers may go on after a stop request.
	ShutdownTimeout time.Duration
	// OnReject is what exit code 3 does.
	OnReject RejectAction
	// MaxMessageAge dead-letters messages sent longer ago without running them (0: off).
	MaxMessageAge time.Duration
	// Volumes are directories emptied after every job (Watchbot's Volumes).
	Volumes []string
	// Once processes a single message, then returns.
	Once bool
	// LogBodies adds message bodies to log lines (off by default: bodies may hold secrets).
	LogBodies bool
	// WaitTime is the receive long poll, whole seconds from 1s to 20s: an idle stop lasts up to
	// one wait, and a shorter wait sends more ReceiveMessage requests (0, short polling, answers
	// empty from a sample of the servers, so it is refused).
	WaitTime time.Duration
	// AckTimeout bounds each delete, visibility change or dead-letter send, which run on a
	// context detached from shutdown.
	AckTimeout time.Duration
	// AckLinger is how long deletes and visibility changes wait to be batched.
	AckLinger time.Duration
	// ReceiveGather is how long the loop waits for more slots to free up before it receives
	// fewer than 10 messages, trading a little latency for fewer SQS requests.
	ReceiveGather time.Duration
	// BatchSize > 1 hands up to this many messages to one worker run (batch mode, 1..100).
	BatchSize int
	// BatchWindow is how long a batch may wait to fill after its first message (0..30 s).
	BatchWindow time.Duration
	// RetryDelay, when set, is the delay of every retry the worker does not time itself,
	// instead of the backoff policy (--retry-delay).
	RetryDelay time.Duration
	// TempDir holds each job's message and result files (--temp-dir). "" means /dev/shm when
	// it takes files, spilling to $TMPDIR when it is full, or else $TMPDIR. Run refuses one
	// that cannot take a file.
	TempDir string
	// ProtectionIdle is how long the task stays protected from scale-in after watchbot last
	// held a message (--scale-in-protection-idle), when Deps.Protection is set.
	ProtectionIdle time.Duration
	// Brake limits concurrency to a probe when nearly every run fails (--brake-*).
	Brake BrakeConfig
	// HTTP, when its URL is set, POSTs each message to an application instead of running
	// Command (--http-worker and --http-*).
	HTTP worker.HTTPWorker
	// Lambda, when enabled, runs Command as a Lambda runtime served the Runtime API
	// (--lambda and --lambda-*).
	Lambda worker.LambdaWorker
	// HealthGrace is how long receives may fail without a break before Health reports
	// watchbot unhealthy (--health-grace).
	HealthGrace time.Duration
	// Dedupe is duplicate suppression (--dedupe-*), with Deps.Dedupe.
	Dedupe DedupeConfig
	// Limits limit job starts across the task or the fleet, and carry the pauses workers ask
	// for (--rate-limit, --fleet-concurrency, --limit-*, --max-pause): docs/limits.md.
	Limits LimitsConfig
	// Queues are the queues after QueueURL when listen serves several (--queue-url given
	// again), and how they share the Concurrency slots.
	Queues Queues
	// Payload is how SQS Extended Client pointers are resolved (--payload-bucket,
	// --keep-payloads), with Deps.S3.
	Payload PayloadConfig
	// InFlightLimit is SQS's longest time in flight after a receive, sqsspec.MaxInFlight (0
	// means it too). Tests against a fake SQS that enforces a scaled-down limit set it
	// (WATCHBOT_SQS_MAX_IN_FLIGHT): no SQS has another.
	InFlightLimit time.Duration
}

// DefaultConfig returns listen's defaults, as docs/listen.md's flag table lists them.
func DefaultConfig() Config {
	return Config{
		Concurrency:       listenspec.DefaultConcurrency,
		BatchSize:         listenspec.DefaultBatchSize,
		Backoff:           backoff.Default(),
		VisibilityTimeout: listenspec.DefaultVisibilityTimeout,
		KillGrace:         listenspec.DefaultKillGrace,
		ShutdownTimeout:   listenspec.DefaultShutdownTimeout,
		OnReject:          RejectDeadLetter,
		WaitTime:          sqsspec.MaxWait,
		AckTimeout:        15 * time.Second,
		AckLinger:         20 * time.Millisecond,
		ReceiveGather:     20 * time.Millisecond,
		ProtectionIdle:    10 * time.Second,
		Brake:             DefaultBrake(),
		HealthGrace:       time.Minute,
		HTTP:              worker.DefaultHTTPWorker(),
		Lambda:            worker.DefaultLambdaWorker(),
		Dedupe:            DedupeConfig{Key: dedupe.MessageIDKey},
		Limits:            DefaultLimits(),
		Queues:            Queues{Policy: PolicyWeighted},
		InFlightLimit:     sqsspec.MaxInFlight,
	}
}

// inFlight returns SQS's in-flight limit: InFlightLimit, or sqsspec.MaxInFlight.
func (c Config) inFlight() time.Duration {
	if c.InFlightLimit > 0 {
		return c.InFlightLimit
	}
	return sqsspec.MaxInFlight
}

// Validate checks the configuration without any I/O, cross-field rules included. Its errors
// are setting.Errors, which name the setting refused and its value; the command line names
// the flag. It is called once, where a configuration is read (listen's flags, Try); Run and
// the components it builds trust what passed.
func (c Config) Validate() error {
	refuse := func(s setting.Name, v any, reason string) error { return setting.Refuse(s, v, reason) }
	if c.QueueURL == "" {
		return refuse(setting.QueueURL, nil, "is required (or set WATCHBOT_QUEUE_URL / QueueUrl)")
	}
	if err := queueattr.ValidateURL(c.QueueURL); err != nil {
		return refuse(setting.QueueURL, nil, err.Error())
	}
	if err := c.checkWorker(); err != nil {
		return err
	}
	for _, err := range []error{
		listenspec.Concurrency(c.Concurrency),
		listenspec.Attempts(c.MaxAttempts),
		c.Backoff.Validate(),
		listenspec.Lease(c.VisibilityTimeout, c.HeartbeatInterval),
		listenspec.JobDuration(c.MaxJobDuration, c.inFlight(), c.Dedupe.Table != ""),
		listenspec.Batch(c.BatchSize, c.BatchWindow),
		listenspec.Volumes(c.Volumes, c.Concurrency),
		CheckBrake(c.Brake),
		CheckDedupe(c.Dedupe),
		CheckLimits(c.Limits, c.BatchSize),
		c.checkQueues(),
		CheckPayload(c.Payload),
	} {
		if err != nil {
			return err
		}
	}
	if c.KillGrace < 0 {
		return refuse(listenspec.SettingKillGrace, c.KillGrace, "must not be negative")
	}
	if v := c.ReceiveVisibility; v != 0 && v != c.VisibilityTimeout {
		if floor := c.KillGrace + lapseMargin + minRenewWindow; v < floor || v > c.VisibilityTimeout {
			return refuse(listenspec.SettingReceiveVisibility, v, fmt.Sprintf("must be between %s + %v (%v) and %s (%v): a job whose first renewal fails must still be stopped before its lease lapses",
				setting.Ref(listenspec.SettingKillGrace), lapseMargin+minRenewWindow, floor, setting.Ref(listenspec.SettingVisibilityTimeout), c.VisibilityTimeout))
		}
	}
	if c.ShutdownTimeout < 0 {
		return refuse(listenspec.SettingShutdownTimeout, c.ShutdownTimeout, "must not be negative")
	}
	if c.OnReject != RejectDeadLetter && c.OnReject != RejectDelete {
		return refuse(listenspec.SettingOnReject, string(c.OnReject), "must be dead-letter or delete")
	}
	if c.MaxMessageAge < 0 {
		return refuse(listenspec.SettingMaxMessageAge, c.MaxMessageAge, "must not be negative")
	}
	if c.WaitTime < time.Second || c.WaitTime > sqsspec.MaxWait || c.WaitTime%time.Second != 0 {
		return refuse(listenspec.SettingWaitTime, c.WaitTime, fmt.Sprintf("must be whole seconds between 1s and %v", sqsspec.MaxWait))
	}
	if c.AckTimeout <= 0 || c.AckLinger < 0 || c.ReceiveGather < 0 {
		return refuse("", nil, "ack timeout must be positive and linger/gather not negative")
	}
	if c.RetryDelay < 0 || c.RetryDelay > sqsspec.MaxInFlight {
		return refuse(listenspec.SettingRetryDelay, c.RetryDelay, "must be between 0 and 12h")
	}
	if c.HealthGrace < time.Second || c.HealthGrace > time.Hour {
		return refuse(listenspec.SettingHealthGrace, c.HealthGrace, "must be between 1s and 1h")
	}
	if c.ProtectionIdle < 0 || c.ProtectionIdle > MaxProtectionIdle {
		return refuse(listenspec.SettingProtectionIdle, c.ProtectionIdle, fmt.Sprintf("must be between 0 and %v", MaxProtectionIdle))
	}
	return nil
}

// checkWorker checks the worker the configuration names: a command after --, an HTTP worker
// or a Lambda runtime, exactly one, each with its own settings.
func (c Config) checkWorker() error {
	refuse := func(s setting.Name, v any, reason string) error { return setting.Refuse(s, v, reason) }
	switch {
	case c.Lambda.Enabled && c.HTTP.URL != "":
		return refuse(listenspec.SettingLambda, nil, "cannot be combined with "+setting.Ref(listenspec.SettingHTTPWorker)+": a Lambda runtime is the command after --")
	case c.Lambda.Enabled && (len(c.Command) == 0 || c.Command[0] == ""):
		return refuse(listenspec.SettingLambda, nil, "needs the runtime's command after --, e.g. watchbot listen --lambda --queue-url URL -- ./bootstrap")
	case c.Lambda.Enabled:
		if err := c.Lambda.Check(); err != nil {
			return err
		}
	case c.HTTP.URL != "" && len(c.Command) > 0:
		return refuse(listenspec.SettingHTTPWorker, nil, "cannot be combined with a worker command after --: give one or the other")
	case c.HTTP.URL != "":
		if err := c.HTTP.Check(); err != nil {
			return err
		}
		if err := listenspec.WithinFlight(listenspec.SettingHTTPTimeout, c.HTTP.Timeout, c.inFlight(), c.Dedupe.Table != ""); err != nil {
			return err
		}
	case len(c.Command) == 0 || c.Command[0] == "":
		return refuse("", nil, "no worker command: give it after --, e.g. watchbot listen --queue-url URL -- ./worker.sh, or "+setting.Ref(listenspec.SettingHTTPWorker)+" URL")
	}
	return nil
}

// MaxProtectionIdle is the longest --scale-in-protection-idle: an idle task kept from
// scale-in longer than this is a task the service pays for without need.
const MaxProtectionIdle = time.Hour

// protectionExpiry is how long each protection call protects the task: the lease, or
// --max-job-duration when it is shorter, plus a minute. A busy watchbot renews it when half
// is left; a watchbot that stops renewing (hung, or cut off from the agent) leaves the task
// unprotected within that time, as its messages' leases lapse, instead of keeping it forever.
func (c Config) protectionExpiry() time.Duration {
	d := c.VisibilityTimeout
	if c.MaxJobDuration > 0 {
		d = min(d, c.MaxJobDuration)
	}
	return min(max(d+time.Minute, ecsagent.MinExpiry), ecsagent.MaxExpiry)
}

// minRenewWindow is the least time a receive's lease leaves, beyond --kill-grace and the
// stop margin, for the first renewal to succeed in: it is sent halfway through that time at
// the latest and retried until its end.
const minRenewWindow = time.Second

// receiveVisibility returns the effective ReceiveVisibility.
func (c Config) receiveVisibility() time.Duration {
	if c.ReceiveVisibility != 0 {
		return c.ReceiveVisibility
	}
	return min(c.VisibilityTimeout, max(20*time.Second, c.KillGrace+15*time.Second))
}

// heartbeat returns the effective heartbeat interval.
func (c Config) heartbeat() time.Duration {
	if c.HeartbeatInterval == 0 {
		return c.VisibilityTimeout / 2
	}
	return c.HeartbeatInterval
}
