package supervisor

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/watchbot/watchbot/backoff"
	"github.com/watchbot/watchbot/dedupe"
	"github.com/watchbot/watchbot/internal/ecsagent"
	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/internal/sqsspec"
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
	// arrived (lost, or a long poll cancelled by a stop) is out of reach only this long.
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
	// WaitTime is the receive long poll (SQS allows 0..20 s).
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
	// it is usable, spilling to $TMPDIR when it is full, or else $TMPDIR.
	TempDir string
	// ProtectionIdle is how long the task stays protected from scale-in after watchbot last
	// held a message (--scale-in-protection-idle), when Deps.Protection is set.
	ProtectionIdle time.Duration
	// Brake limits concurrency to a probe when nearly every run fails (--brake-*).
	Brake BrakeConfig
	// HTTP, when its URL is set, POSTs each message to an application instead of running
	// Command (--http-worker and --http-*).
	HTTP HTTPWorker
	// HealthGrace is how long receives may fail without a break before Health reports
	// watchbot unhealthy (--health-grace).
	HealthGrace time.Duration
	// Dedupe is duplicate suppression (--dedupe-*), with Deps.Dedupe.
	Dedupe DedupeConfig
}

// DefaultConfig returns listen's defaults, as the README's flag table lists them.
func DefaultConfig() Config {
	return Config{
		Concurrency:       1,
		BatchSize:         1,
		Backoff:           backoff.Default(),
		VisibilityTimeout: 3 * time.Minute,
		KillGrace:         5 * time.Second,
		ShutdownTimeout:   20 * time.Second,
		OnReject:          RejectDeadLetter,
		WaitTime:          sqsspec.MaxWait,
		AckTimeout:        15 * time.Second,
		AckLinger:         20 * time.Millisecond,
		ReceiveGather:     20 * time.Millisecond,
		ProtectionIdle:    10 * time.Second,
		Brake:             DefaultBrake(),
		HealthGrace:       time.Minute,
		HTTP:              DefaultHTTPWorker(),
		Dedupe:            DedupeConfig{Key: dedupe.MessageIDKey},
	}
}

// Validate checks the configuration without any I/O. Errors name the flag.
func (c Config) Validate() error {
	bad := func(flag, format string, args ...any) error {
		return ConfigError{Flag: flag, Msg: fmt.Sprintf(format, args...)}
	}
	if c.QueueURL == "" {
		return bad("--queue-url", "is required (or set WATCHBOT_QUEUE_URL / QueueUrl)")
	}
	if err := queueattr.ValidateURL(c.QueueURL); err != nil {
		return bad("--queue-url", "%v", err)
	}
	switch {
	case c.HTTP.URL != "" && len(c.Command) > 0:
		return bad("--http-worker", "cannot be combined with a worker command after --: give one or the other")
	case c.HTTP.URL != "":
		if err := c.HTTP.check(); err != nil {
			return err
		}
	case len(c.Command) == 0 || c.Command[0] == "":
		return bad("", "no worker command: give it after --, e.g. watchbot listen --queue-url URL -- ./worker.sh, or --http-worker URL")
	}
	for _, err := range []error{
		CheckConcurrency(c.Concurrency),
		CheckMaxAttempts(c.MaxAttempts),
		CheckBackoff(c.Backoff),
		CheckLease(c.VisibilityTimeout, c.HeartbeatInterval),
		CheckJobDuration(c.MaxJobDuration),
		CheckBatch(c.BatchSize, c.BatchWindow),
		CheckVolumes(c.Volumes, c.Concurrency),
		CheckBrake(c.Brake),
		CheckDedupe(c.Dedupe),
	} {
		if err != nil {
			return err
		}
	}
	if c.KillGrace < 0 {
		return bad("--kill-grace", "(%v) must not be negative", c.KillGrace)
	}
	if v := c.ReceiveVisibility; v != 0 && v != c.VisibilityTimeout {
		if floor := c.KillGrace + lapseMargin + minRenewWindow; v < floor || v > c.VisibilityTimeout {
			return bad("--receive-visibility", "(%v) must be between --kill-grace + %v (%v) and --visibility-timeout (%v): a job whose first renewal fails must still be stopped before its lease lapses",
				v, lapseMargin+minRenewWindow, floor, c.VisibilityTimeout)
		}
	}
	if c.ShutdownTimeout < 0 {
		return bad("--shutdown-timeout", "(%v) must not be negative", c.ShutdownTimeout)
	}
	if c.OnReject != RejectDeadLetter && c.OnReject != RejectDelete {
		return bad("--on-reject", "(%q) must be dead-letter or delete", c.OnReject)
	}
	if c.MaxMessageAge < 0 {
		return bad("--max-message-age", "(%v) must not be negative", c.MaxMessageAge)
	}
	if c.WaitTime < 0 || c.WaitTime > sqsspec.MaxWait {
		return bad("", "receive wait time (%v) must be between 0 and 20s", c.WaitTime)
	}
	if c.AckTimeout <= 0 || c.AckLinger < 0 || c.ReceiveGather < 0 {
		return bad("", "ack timeout must be positive and linger/gather not negative")
	}
	if c.RetryDelay < 0 || c.RetryDelay > sqsspec.MaxInFlight {
		return bad("--retry-delay", "(%v) must be between 0 and 12h", c.RetryDelay)
	}
	if c.HealthGrace < time.Second || c.HealthGrace > time.Hour {
		return bad("--health-grace", "(%v) must be between 1s and 1h", c.HealthGrace)
	}
	if c.ProtectionIdle < 0 || c.ProtectionIdle > MaxProtectionIdle {
		return bad("--scale-in-protection-idle", "(%v) must be between 0 and %v", c.ProtectionIdle, MaxProtectionIdle)
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

// The rules below are listen's, shared with `watchbot template`, which must never generate a
// listen command that refuses to start. Each returns a ConfigError naming listen's flag, or nil.

// Limits of listen's own, beyond SQS's.
const (
	// MaxConcurrency is the most worker processes one listen runs at once.
	MaxConcurrency = 1000
	// MaxAttempts is the most attempts --max-attempts allows (SQS's most maxReceiveCount).
	MaxAttempts = 1000
	// MaxBatchSize is the most messages one batch-mode worker run takes.
	MaxBatchSize = 100
	// MaxBatchWindow is the longest a batch waits to fill.
	MaxBatchWindow = 30 * time.Second
)

// CheckConcurrency checks --concurrency.
func CheckConcurrency(n int) error {
	if n < 1 || n > MaxConcurrency {
		return ConfigError{Flag: "--concurrency", Msg: fmt.Sprintf("(%d) must be between 1 and %d", n, MaxConcurrency)}
	}
	return nil
}

// CheckMaxAttempts checks --max-attempts; 0 stands for the queue's maxReceiveCount.
func CheckMaxAttempts(n int) error {
	if n < 0 || n > MaxAttempts {
		return ConfigError{Flag: "--max-attempts", Msg: fmt.Sprintf("(%d) must be between 1 and %d (0 = the queue's maxReceiveCount)", n, MaxAttempts)}
	}
	return nil
}

// CheckBackoff checks the --backoff-* flags.
func CheckBackoff(b backoff.Exponential) error {
	if err := b.Validate(); err != nil {
		return ConfigError{Msg: err.Error()}
	}
	return nil
}

// CheckLease checks --visibility-timeout and --heartbeat-interval (0 means half the
// visibility timeout).
func CheckLease(visibility, heartbeat time.Duration) error {
	if visibility < time.Second || visibility > sqsspec.MaxInFlight {
		return ConfigError{Flag: "--visibility-timeout", Msg: fmt.Sprintf("(%v) must be between 1s and 12h", visibility)}
	}
	if heartbeat == 0 {
		heartbeat = visibility / 2
	}
	if heartbeat <= 0 || heartbeat >= visibility {
		return ConfigError{Flag: "--heartbeat-interval", Msg: fmt.Sprintf("(%v) must be shorter than --visibility-timeout (%v)", heartbeat, visibility)}
	}
	return nil
}

// CheckJobDuration checks --max-job-duration (0: no limit).
func CheckJobDuration(d time.Duration) error {
	switch {
	case d < 0:
		return ConfigError{Flag: "--max-job-duration", Msg: fmt.Sprintf("(%v) must not be negative", d)}
	case d > sqsspec.MaxInFlight:
		return ConfigError{Flag: "--max-job-duration", Msg: fmt.Sprintf("(%v) must not exceed 12h, SQS's longest time in flight", d)}
	}
	return nil
}

// CheckBatch checks --batch-size and --batch-window.
func CheckBatch(size int, window time.Duration) error {
	switch {
	case size < 1 || size > MaxBatchSize:
		return ConfigError{Flag: "--batch-size", Msg: fmt.Sprintf("(%d) must be between 1 and %d", size, MaxBatchSize)}
	case window < 0 || window > MaxBatchWindow:
		return ConfigError{Flag: "--batch-window", Msg: fmt.Sprintf("(%v) must be between 0 and %v", window, MaxBatchWindow)}
	case window > 0 && size == 1:
		return ConfigError{Flag: "--batch-window", Msg: fmt.Sprintf("(%v) needs --batch-size above 1", window)}
	}
	return nil
}

// CheckVolumes checks --volumes (Watchbot's Volumes) against --concurrency.
func CheckVolumes(volumes []string, concurrency int) error {
	for _, v := range volumes {
		if err := checkVolume(v); err != nil {
			return ConfigError{Flag: "--volumes", Msg: err.Error()}
		}
	}
	if len(volumes) > 0 && concurrency > 1 {
		return ConfigError{Flag: "--volumes", Msg: "needs --concurrency 1: emptying them after one job would delete the files of the others still running"}
	}
	return nil
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

// checkVolume refuses paths that must never be emptied.
func checkVolume(v string) error {
	if v == "" || !filepath.IsAbs(v) {
		return fmt.Errorf("%q must be an absolute directory path", v)
	}
	clean := filepath.Clean(v)
	if clean == "/" || strings.Count(clean, "/") == 1 && isSystemDir(clean) {
		return fmt.Errorf("refusing to empty %q after every job", v)
	}
	return nil
}

func isSystemDir(p string) bool {
	switch p {
	case "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib64", "/proc", "/root", "/sbin", "/sys", "/usr", "/var":
		return true
	}
	return false
}
