package cloudformation

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/backoff"
	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/setting"
	"github.com/watchbot/watchbot/internal/sqsspec"
)

// MetricsMode is how watchbot listen publishes its metrics (its --metrics flag).
type MetricsMode string

// The metrics modes.
const (
	// MetricsEMF writes CloudWatch embedded-metric-format lines to stdout; the awslogs driver
	// ships them and CloudWatch Logs turns them into metrics. No API calls, no IAM.
	MetricsEMF MetricsMode = "emf"
	// MetricsCloudWatch calls PutMetricData, allowed only in the metrics namespace.
	MetricsCloudWatch MetricsMode = "cloudwatch"
	// MetricsNone publishes nothing; alarms on watchbot's own metrics are left out.
	MetricsNone MetricsMode = "none"
)

// Options are the generation-time choices of a template. Deploy-time values (image, cluster,
// network, alarm destination) are the template's Parameters instead.
type Options struct {
	// NamePrefix starts the names of the queues, the task family and the alarms. Empty means
	// the stack's name (${AWS::StackName}).
	NamePrefix string
	// QueueName names the work queue; empty means "<prefix>-queue" (".fifo" appended for FIFO).
	// The dead-letter queue is "<queue name>-dead-letter" (before ".fifo").
	QueueName string
	// Queues, when given (--queue), are the work queues of a stack that serves several, in
	// priority order, each with its dead-letter queue; QueueName is then empty. One listen
	// serves them all (docs/queues.md).
	Queues []QueueSpec
	// QueuePolicy is listen's --queue-policy for Queues: "" or QueuePolicyWeighted (listen's
	// default) or QueuePolicyStrict.
	QueuePolicy string
	// FIFO makes both queues FIFO queues with content-based deduplication.
	FIFO bool
	// MaxAttempts is the redrive policy's maxReceiveCount and watchbot listen's --max-attempts.
	MaxAttempts int
	// VisibilityTimeout is the queue's visibility timeout and listen's --visibility-timeout.
	VisibilityTimeout time.Duration
	// QueueRetention is the work queue's message retention. The dead-letter queue always keeps
	// messages 14 days, the maximum, so a dead-lettered message (which keeps its original
	// enqueue time) outlives its stay in the work queue.
	QueueRetention time.Duration
	// Command is the worker command and its arguments, run by listen after "--".
	Command []string
	// Concurrency is listen's --concurrency: worker processes per task.
	Concurrency int
	// CPU and Memory size each Fargate task (CPU units, MiB); see FargateSizes.
	CPU, Memory int
	// MinTasks and MaxTasks bound the service's autoscaling.
	MinTasks, MaxTasks int
	// TargetLatency is how long a message may wait in the queue before a worker starts it,
	// and ExpectedJobDuration how long a worker typically takes for one. Together they set
	// the backlog each worker slot may hold (BacklogPerSlot), the target of backlog scaling.
	// Both are unused with MetricsNone, which scales on the visible messages alone.
	TargetLatency, ExpectedJobDuration time.Duration
	// Metrics is listen's --metrics; MetricsNamespace its --metrics-namespace.
	Metrics          MetricsMode
	MetricsNamespace string
	// Environment holds extra environment variables of the container.
	Environment map[string]string
	// ExtraStatements are added to the task role's permissions (see ParseStatements).
	ExtraStatements []Statement
	// Alarms are the thresholds of the alarms in alarms.Definitions.
	Alarms alarms.Thresholds
	// Brake is listen's --brake; without it the Braking alarm is left out.
	Brake bool
	// LogRetentionDays is the log group's retention; one of LogRetentionDaysAllowed.
	LogRetentionDays int
	// ShutdownTimeout and KillGrace are listen's --shutdown-timeout and --kill-grace. The
	// container's StopTimeout is their sum plus StopMargin, at most 120 s (Fargate's limit).
	ShutdownTimeout, KillGrace time.Duration
	// HeartbeatInterval is listen's --heartbeat-interval (0: half the visibility timeout).
	HeartbeatInterval time.Duration
	// MaxJobDuration is listen's --max-job-duration (0: no limit).
	MaxJobDuration time.Duration
	// BatchSize and BatchWindow are listen's --batch-size and --batch-window.
	BatchSize   int
	BatchWindow time.Duration
	// Backoff is listen's --backoff-base, --backoff-min, --backoff-max and --backoff-jitter.
	Backoff backoff.Exponential
	// HTTPAddr is listen's --http-addr, where the container's health check (`watchbot health`)
	// asks /healthz: HOST:PORT with a loopback or unspecified IP host (see CheckHTTPAddr).
	HTTPAddr string
	// Schedules are the scheduled tasks (--schedule, --cron-yaml): one EventBridge Scheduler
	// schedule each, sending one message to the work queue per tick.
	Schedules []Schedule
	// ScheduleTimezone is the IANA time zone the schedules' cron expressions are read in.
	ScheduleTimezone string
	// Reduce adds ProgressTable, the table of `watchbot progress` (Watchbot's reduce mode).
	Reduce bool
	// Dedupe adds DedupeTable, the table of listen's duplicate suppression (--dedupe-table).
	Dedupe bool
	// Limits adds LimitsTable, the table through which the tasks share their limits and
	// pauses (listen's --limits-table, docs/limits.md).
	Limits bool
	// LimitArgs are listen's limit and Lambda flags with their values (--rate-limit 20/s,
	// --lambda, ...), passed on as given; the command line checks them with listen's own
	// rules.
	LimitArgs []string
	// OTelEndpoint is the OTLP endpoint watchbot exports its traces to (an http or https
	// URL), set on the container as OTEL_EXPORTER_OTLP_ENDPOINT; empty exports nothing.
	// OTelProtocol is OTEL_EXPORTER_OTLP_PROTOCOL, one of OTelProtocols. See docs/tracing.md.
	OTelEndpoint, OTelProtocol string
	// PayloadBucket is the S3 bucket of bodies too large for SQS, passed to listen as
	// --payload-bucket; its zero value holds none. See PayloadBucket.
	PayloadBucket PayloadBucket
}

// OTelProtocols are the OTLP protocols watchbot exports with; the first is the default.
var OTelProtocols = []string{"http/protobuf", "grpc"}

// otelVariables are the container variables an OTel endpoint sets: --env may not set them
// too, since the two would disagree.
var otelVariables = []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_TRACES_EXPORTER"}

// otelEnvironment returns the container variables of the OTel options, or none without an
// endpoint. The service name defaults to the stack's name prefix unless --env sets one.
func (o Options) otelEnvironment(serviceName any) []KeyValuePair {
	if o.OTelEndpoint == "" {
		return nil
	}
	protocol := o.OTelProtocol
	if protocol == "" {
		protocol = OTelProtocols[0]
	}
	env := []KeyValuePair{
		{Name: "OTEL_EXPORTER_OTLP_ENDPOINT", Value: o.OTelEndpoint},
		{Name: "OTEL_EXPORTER_OTLP_PROTOCOL", Value: protocol},
	}
	if _, set := o.Environment["OTEL_SERVICE_NAME"]; !set {
		env = append(env, KeyValuePair{Name: "OTEL_SERVICE_NAME", Value: serviceName})
	}
	return env
}

// validateOTel checks the OTel options: an http(s) URL with a host, a known protocol, and no
// --env that sets the same variables.
func (o Options) validateOTel() error {
	if o.OTelEndpoint == "" {
		if o.OTelProtocol != "" {
			return setting.Refuse(setting.OTelProtocol, o.OTelProtocol, "needs "+setting.Ref(setting.OTelEndpoint))
		}
		return nil
	}
	u, err := url.Parse(o.OTelEndpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return setting.Refuse(setting.OTelEndpoint, o.OTelEndpoint, "must be an http:// or https:// URL with a host, e.g. http://localhost:4318 for a collector beside watchbot")
	}
	if o.OTelProtocol != "" && !slices.Contains(OTelProtocols, o.OTelProtocol) {
		return setting.Refuse(setting.OTelProtocol, o.OTelProtocol, "must be "+strings.Join(OTelProtocols, " or "))
	}
	for _, name := range otelVariables {
		if _, set := o.Environment[name]; set {
			return setting.Refuse(setting.Environment, name, "is set by the template itself with "+setting.Ref(setting.OTelEndpoint))
		}
	}
	return nil
}

// DefaultOptions returns the options of `watchbot template` without flags. Command is empty
// and must be set. The listen settings the template does not choose are listen's defaults.
func DefaultOptions() Options {
	return Options{
		BatchSize:         listenspec.DefaultBatchSize,
		Backoff:           backoff.Default(),
		MaxAttempts:       10,
		VisibilityTimeout: listenspec.DefaultVisibilityTimeout,
		QueueRetention:    4 * 24 * time.Hour,
		Concurrency:       listenspec.DefaultConcurrency,
		CPU:               256,
		Memory:            512,
		MinTasks:          0,
		MaxTasks:          10,
		// Five minutes is about as fast as the scaling itself reacts (three one-minute
		// datapoints, a task's start, its first gauges): a shorter latency is met only by
		// spare capacity (--min-tasks).
		TargetLatency:       5 * time.Minute,
		ExpectedJobDuration: time.Minute,
		Metrics:             MetricsEMF,
		MetricsNamespace:    "Watchbot",
		Alarms:              alarms.DefaultThresholds(),
		Brake:               true,
		LogRetentionDays:    30,
		ShutdownTimeout:     listenspec.DefaultShutdownTimeout,
		KillGrace:           listenspec.DefaultKillGrace,
		HTTPAddr:            DefaultHTTPAddr,
		ScheduleTimezone:    DefaultScheduleTimezone,
	}
}

// DefaultHTTPAddr is the stack's --http-addr, and `watchbot health`'s default: the health
// check runs inside the container, so the loopback serves it and exposes nothing.
const DefaultHTTPAddr = "127.0.0.1:9090"

// SplitHTTPAddr splits a --http-addr into its host (empty for every interface) and its port,
// which must be a number from 1 to 65535.
func SplitHTTPAddr(addr string) (host, port string, err error) {
	host, port, err = net.SplitHostPort(addr)
	if err != nil {
		return "", "", setting.Refuse(listenspec.SettingHTTPAddr, addr, fmt.Sprintf("must be HOST:PORT, e.g. %s or :9090", DefaultHTTPAddr))
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", "", setting.Refuse(listenspec.SettingHTTPAddr, addr, "must have a port from 1 to 65535")
	}
	return host, port, nil
}

// CheckHTTPAddr checks a --http-addr for the stack: HOST:PORT, the host a loopback IP, or
// empty, 0.0.0.0 or :: for every interface (for a scraper outside the task). Any other
// address is the task's own, which is not known when the template is generated.
func CheckHTTPAddr(addr string) error {
	host, _, err := SplitHTTPAddr(addr)
	if err != nil {
		return err
	}
	if host == "" {
		return nil
	}
	if ip, err := netip.ParseAddr(host); err != nil || !ip.IsLoopback() && !ip.IsUnspecified() {
		return setting.Refuse(listenspec.SettingHTTPAddr, addr, "must have a loopback IP (127.0.0.1, ::1) for its host, or none, 0.0.0.0 or :: for every interface")
	}
	return nil
}

// Limits of SQS, ECS and CloudWatch Logs the options must respect.
const (
	// DeadLetterRetention is the dead-letter queue's retention: SQS's maximum.
	DeadLetterRetention = 14 * 24 * time.Hour
	// MaxStopTimeout is the longest container StopTimeout Fargate allows.
	MaxStopTimeout = 120 * time.Second
	// StopMargin is left after --shutdown-timeout and --kill-grace inside the StopTimeout for
	// releasing the stopped jobs' messages.
	StopMargin = 5 * time.Second

	maxQueueName   = 80
	deadLetterPart = "-dead-letter"
	fifoSuffix     = ".fifo"
)

// LogRetentionDaysAllowed are the retention periods CloudWatch Logs accepts.
var LogRetentionDaysAllowed = []int{1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653}

// FargateSizes maps each Fargate task CPU value (units) to the memory values (MiB) it allows.
var FargateSizes = map[int][]int{
	256:   {512, 1024, 2048},
	512:   steps(1024, 4096, 1024),
	1024:  steps(2048, 8192, 1024),
	2048:  steps(4096, 16384, 1024),
	4096:  steps(8192, 30720, 1024),
	8192:  steps(16384, 61440, 4096),
	16384: steps(32768, 122880, 8192),
}

func steps(from, to, step int) []int {
	var out []int
	for v := from; v <= to; v += step {
		out = append(out, v)
	}
	return out
}

var (
	namePattern    = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
	envNamePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// reservedEnvironment are variables the template sets itself or passes as listen flags, which
// --env must not override.
var reservedEnvironment = []string{
	"AWS_REGION", "WATCHBOT_QUEUE_URL", "QueueUrl", "WATCHBOT_CONCURRENCY", "WATCHBOT_MAX_ATTEMPTS",
}

// Validate reports the first option that cannot produce a working stack, as a
// setting.Error naming the option (the command line names its flag). The options that
// become listen's flags are checked by listen's own rules (package listenspec), so the
// template never generates a command listen refuses.
func (o Options) Validate() error {
	for _, check := range []func() error{
		o.validateNames, o.validateQueues, o.validateListen, o.validateQueue, o.validateTask,
		o.validateMetrics, o.validateEnvironment, o.validateExtras, o.validateStop,
	} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// validateNames checks the name prefix and the queue's name.
func (o Options) validateNames() error {
	if o.NamePrefix != "" {
		if !namePattern.MatchString(o.NamePrefix) {
			return setting.Refuse(setting.NamePrefix, o.NamePrefix, "may contain only letters, digits, - and _")
		}
		if n := len(o.NamePrefix); n > maxQueueName-len(deadLetterPart+fifoSuffix)-len("-queue") {
			return setting.Refuse(setting.NamePrefix, o.NamePrefix, fmt.Sprintf("must be at most %d characters so that queue names fit SQS's 80", maxQueueName-len(deadLetterPart+fifoSuffix)-len("-queue")))
		}
	}
	if o.QueueName != "" {
		base, isFIFO := strings.CutSuffix(o.QueueName, fifoSuffix)
		switch {
		case o.FIFO && !isFIFO:
			return setting.Refuse(setting.QueueName, o.QueueName, "must end in .fifo with "+setting.Ref(setting.FIFO))
		case !o.FIFO && isFIFO:
			return setting.Refuse(setting.QueueName, o.QueueName, "ends in .fifo: add "+setting.Ref(setting.FIFO)+" for a FIFO queue")
		case !namePattern.MatchString(base):
			return setting.Refuse(setting.QueueName, o.QueueName, "may contain only letters, digits, - and _ (and end in .fifo)")
		case len(base) > maxQueueName-len(deadLetterPart+fifoSuffix):
			return setting.Refuse(setting.QueueName, o.QueueName, fmt.Sprintf("must be at most %d characters before .fifo, so that the dead-letter queue's name fits SQS's 80", maxQueueName-len(deadLetterPart+fifoSuffix)))
		}
	}
	return nil
}

// validateListen checks the settings that become listen's flags, by listen's rules.
func (o Options) validateListen() error {
	if o.MaxAttempts < 1 || o.MaxAttempts > listenspec.MaxAttempts {
		// Also the redrive policy's maxReceiveCount, so listen's 0 (the queue's) has no meaning.
		return setting.Refuse(listenspec.SettingMaxAttempts, o.MaxAttempts, fmt.Sprintf("must be between 1 and %d", listenspec.MaxAttempts))
	}
	for _, err := range []error{
		listenspec.Concurrency(o.Concurrency),
		listenspec.Lease(o.VisibilityTimeout, o.HeartbeatInterval),
		listenspec.JobDuration(o.MaxJobDuration, sqsspec.MaxInFlight, o.Dedupe),
		o.relaysFit(),
		listenspec.Batch(o.BatchSize, o.BatchWindow),
		o.Backoff.Validate(),
		listenspec.Volumes(volumes(o.Environment), o.Concurrency),
	} {
		if err != nil {
			return err
		}
	}
	if o.VisibilityTimeout%time.Second != 0 {
		return setting.Refuse(listenspec.SettingVisibilityTimeout, o.VisibilityTimeout, "must be a whole number of seconds")
	}
	return nil
}

// validateQueue checks the work queue's retention and the worker command.
func (o Options) validateQueue() error {
	if o.QueueRetention < time.Minute || o.QueueRetention >= DeadLetterRetention {
		return setting.Refuse(setting.QueueRetention, o.QueueRetention, "must be at least 1m and shorter than 14 days (336h), the dead-letter queue's retention")
	}
	if o.QueueRetention%time.Second != 0 {
		return setting.Refuse(setting.QueueRetention, o.QueueRetention, "must be a whole number of seconds")
	}
	if len(o.Command) == 0 || o.Command[0] == "" {
		return setting.Refuse("", nil, "the worker command is required: watchbot template [options] -- COMMAND [ARG...]")
	}
	return nil
}

// validateTask checks the Fargate task's size and the service's task counts.
func (o Options) validateTask() error {
	memories, ok := FargateSizes[o.CPU]
	if !ok {
		return setting.Refuse(setting.CPU, o.CPU, "must be one of Fargate's sizes: 256, 512, 1024, 2048, 4096, 8192, 16384")
	}
	if !slices.Contains(memories, o.Memory) {
		return setting.Refuse(setting.Memory, o.Memory, fmt.Sprintf("is not a Fargate size for %s %d: use one of %s (MiB)", setting.Ref(setting.CPU), o.CPU, joinInts(memories)))
	}
	if o.MaxTasks < 1 || o.MaxTasks > 5000 {
		return setting.Refuse(setting.MaxTasks, o.MaxTasks, "must be between 1 and 5000")
	}
	if o.MinTasks < 0 || o.MinTasks > o.MaxTasks {
		return setting.Refuse(setting.MinTasks, o.MinTasks, fmt.Sprintf("must be between 0 and %s (%d)", setting.Ref(setting.MaxTasks), o.MaxTasks))
	}
	return nil
}

// validateMetrics checks the metrics, the backlog target they scale on, tracing and the
// payload bucket.
func (o Options) validateMetrics() error {
	switch o.Metrics {
	case MetricsEMF, MetricsCloudWatch, MetricsNone:
	default:
		return setting.Refuse(listenspec.SettingMetrics, string(o.Metrics), "must be emf, cloudwatch or none")
	}
	if err := o.validateBacklogTarget(); err != nil {
		return err
	}
	if err := alarms.ValidateNamespace(o.MetricsNamespace); err != nil {
		return err
	}
	if err := o.validateOTel(); err != nil {
		return err
	}
	return o.PayloadBucket.validate()
}

// validateEnvironment checks --env's variables against those the template sets itself.
func (o Options) validateEnvironment() error {
	for name := range o.Environment {
		if !envNamePattern.MatchString(name) {
			return setting.Refuse(setting.Environment, name, "is not a variable name: letters, digits and _, not starting with a digit")
		}
		if slices.Contains(reservedEnvironment, name) {
			return setting.Refuse(setting.Environment, name, "is set by the template itself (the queue, concurrency and attempts come from their own options)")
		}
		for _, t := range Tables(o) {
			if slices.Contains(t.Reserved, name) {
				return setting.Refuse(setting.Environment, name, fmt.Sprintf("is set by the template itself: with %s it names its own table to the container", t.Flag))
			}
		}
	}
	return nil
}

// validateExtras checks the extra IAM statements, the alarms and the log retention.
func (o Options) validateExtras() error {
	for i, s := range o.ExtraStatements {
		if err := s.validate(); err != nil {
			return setting.Refuse(setting.ExtraStatements, nil, fmt.Sprintf("statement %d: %v", i+1, err))
		}
	}
	if err := o.Alarms.Validate(); err != nil {
		return setting.Refuse(setting.Alarms, nil, err.Error())
	}
	if !slices.Contains(LogRetentionDaysAllowed, o.LogRetentionDays) {
		return setting.Refuse(setting.LogRetentionDays, o.LogRetentionDays, "must be one of CloudWatch Logs' periods: "+joinInts(LogRetentionDaysAllowed))
	}
	return nil
}

// validateStop checks listen's stop, its health address and the schedules, and that the
// stop fits Fargate's.
func (o Options) validateStop() error {
	if o.ShutdownTimeout < 0 || o.ShutdownTimeout%time.Second != 0 {
		return setting.Refuse(listenspec.SettingShutdownTimeout, o.ShutdownTimeout, "must be a whole, non-negative number of seconds")
	}
	if o.KillGrace < 0 || o.KillGrace%time.Second != 0 {
		return setting.Refuse(listenspec.SettingKillGrace, o.KillGrace, "must be a whole, non-negative number of seconds")
	}
	if err := CheckHTTPAddr(o.HTTPAddr); err != nil {
		return err
	}
	if err := checkSchedules(o.Schedules, o.ScheduleTimezone); err != nil {
		return err
	}
	if stop := o.StopTimeout(); stop > MaxStopTimeout {
		return setting.Refuse("", nil, fmt.Sprintf("%s (%v) + %s (%v) + %v to release messages must fit in Fargate's longest stop timeout (%v)",
			setting.Ref(listenspec.SettingShutdownTimeout), o.ShutdownTimeout, setting.Ref(listenspec.SettingKillGrace), o.KillGrace, StopMargin, MaxStopTimeout))
	}
	return nil
}

// volumes returns the directories Watchbot's Volumes variable names (listen's --volumes).
func volumes(env map[string]string) []string {
	var out []string
	for _, v := range strings.Split(env["Volumes"], ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// StopTimeout is the container's stop timeout: time for listen to drain, escalate and release.
func (o Options) StopTimeout() time.Duration {
	return o.ShutdownTimeout + o.KillGrace + StopMargin
}

func joinInts(vs []int) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = fmt.Sprint(v)
	}
	return strings.Join(parts, ", ")
}
