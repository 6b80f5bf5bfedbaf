// Package alarms holds watchbot's metrics and CloudWatch alarms as data: the metric names,
// units and meanings that the supervisor records and the publishers send, and the alarm
// definitions that `watchbot template` renders. Keeping them in one place means the metrics
// published and the alarms watching them cannot drift apart.
package alarms

// Metric names a watchbot metric.
type Metric string

// The metrics watchbot publishes, in namespace --metrics-namespace with dimension QueueName
// (and Service when --metrics-service is set).
const (
	WorkerErrors         Metric = "WorkerErrors"
	WorkerSpawnErrors    Metric = "WorkerSpawnErrors"
	DeadLetter           Metric = "DeadLetter"
	MessagesProcessed    Metric = "MessagesProcessed"
	WorkerDuration       Metric = "WorkerDuration"
	MessageAge           Metric = "MessageAge"
	MessageReceives      Metric = "MessageReceives"
	DeadLetterQueueDepth Metric = "DeadLetterQueueDepth"
	WorkerSlots          Metric = "WorkerSlots"
	BusySlots            Metric = "BusySlots"
	// ScaleInProtectionErrors counts failed calls to the ECS agent's protection endpoint.
	ScaleInProtectionErrors Metric = "ScaleInProtectionErrors"
	ConcurrencyLimit        Metric = "ConcurrencyLimit"
	BrakingSeconds          Metric = "BrakingSeconds"
	// DuplicatesSkipped and DedupeErrors are duplicate suppression's (--dedupe-table);
	// Relays counts the new deliveries of messages whose jobs run on without their lease
	// (past SQS's in-flight limit, or after losing it), handed to the job's owner through the
	// table.
	DuplicatesSkipped Metric = "DuplicatesSkipped"
	DedupeErrors      Metric = "DedupeErrors"
	Relays            Metric = "Relays"
	// StopReleases counts the messages a stop hands back unrun.
	StopReleases Metric = "StopReleases"
	// The limits' (docs/limits.md).
	LimitWaitSeconds Metric = "LimitWaitSeconds"
	StartsHeldBack   Metric = "StartsHeldBack"
	LimitReleases    Metric = "LimitReleases"
	LimitPaused      Metric = "LimitPaused"
	LimitFallback    Metric = "LimitFallback"
	// LimitFallbackSeconds is the time spent in fallback, as BrakingSeconds is the brake's.
	LimitFallbackSeconds Metric = "LimitFallbackSeconds"
	// Paused and SettingsVersion are the operator's control of the fleet (watchbot fleet).
	Paused          Metric = "Paused"
	SettingsVersion Metric = "SettingsVersion"
	// PayloadFetchErrors and PayloadDeleteErrors are S3 payloads' (--payload-bucket).
	PayloadFetchErrors  Metric = "PayloadFetchErrors"
	PayloadDeleteErrors Metric = "PayloadDeleteErrors"
)

// Unit is a CloudWatch standard unit.
type Unit string

// The units watchbot's metrics use.
const (
	Count        Unit = "Count"
	Milliseconds Unit = "Milliseconds"
	Seconds      Unit = "Seconds"
)

// Kind says how a metric's values combine within a flush window.
type Kind string

// The kinds of metric.
const (
	// Counter values count events: a window publishes their sum.
	Counter Kind = "counter"
	// Distribution values are observations (a duration, an age): a window keeps every sample.
	Distribution Kind = "distribution"
	// Gauge values are samples of a level (a queue's depth), taken once per window.
	Gauge Kind = "gauge"
)

// MetricDefinition describes one metric.
type MetricDefinition struct {
	Name    Metric `json:"name"`
	Unit    Unit   `json:"unit"`
	Kind    Kind   `json:"kind"`
	Meaning string `json:"meaning"`
}

// Metrics lists every metric watchbot publishes.
var Metrics = []MetricDefinition{
	{Name: WorkerErrors, Unit: Count, Kind: Counter, Meaning: "worker runs that failed: non-zero exit other than 4, killed by a signal or by --max-job-duration, or rejected with exit 3"},
	{Name: WorkerSpawnErrors, Unit: Count, Kind: Counter, Meaning: "worker commands that could not be started"},
	{Name: DeadLetter, Unit: Count, Kind: Counter, Meaning: "messages this supervisor sent to the dead-letter queue, or left for the redrive policy to move there"},
	{Name: MessagesProcessed, Unit: Count, Kind: Counter, Meaning: "messages whose worker succeeded and that were deleted"},
	{Name: WorkerDuration, Unit: Milliseconds, Kind: Distribution, Meaning: "wall-clock time of each worker run"},
	{Name: MessageAge, Unit: Milliseconds, Kind: Distribution, Meaning: "time from a message's send to the start of its worker"},
	{Name: MessageReceives, Unit: Count, Kind: Counter, Meaning: "messages received from the queue"},
	{Name: DeadLetterQueueDepth, Unit: Count, Kind: Gauge, Meaning: "visible messages in the dead-letter queue, sampled once a minute"},
	{Name: WorkerSlots, Unit: Count, Kind: Gauge, Meaning: "the task's worker slots (--concurrency), once a minute: their Sum over a minute is the service's slots, their SampleCount its tasks"},
	{Name: BusySlots, Unit: Count, Kind: Gauge, Meaning: "the task's worker slots running a job, averaged over the minute: their Sum over a minute is the service's busy slots"},
	{Name: ScaleInProtectionErrors, Unit: Count, Kind: Counter, Meaning: "calls to the ECS agent's task scale-in protection endpoint that failed (unreachable, refused, or a failure answer); work goes on regardless"},
	{Name: ConcurrencyLimit, Unit: Count, Kind: Gauge, Meaning: "the runs the task allows at once, once a minute: --concurrency, or the lower one watchbot fleet set applied live; 1 while the brake is on, rising while it ramps back up"},
	{Name: BrakingSeconds, Unit: Seconds, Kind: Gauge, Meaning: "seconds the task spent braking in the last minute, once a minute (60 throughout an outage)"},
	{Name: DuplicatesSkipped, Unit: Count, Kind: Counter, Meaning: "messages deleted without running because a run had completed their dedupe key (--dedupe-table)"},
	{Name: DedupeErrors, Unit: Count, Kind: Counter, Meaning: "calls to the dedupe table that failed; a message whose key could not be claimed is retried after its backoff, never run unchecked"},
	{Name: Relays, Unit: Count, Kind: Counter, Meaning: "new deliveries of a message whose job runs on without its lease (past SQS's 12 h in-flight limit, or after losing it), hidden again and handed to the job's owner without running (--dedupe-table); each costs a receive toward the redrive policy"},
	{Name: StopReleases, Unit: Count, Kind: Counter, Meaning: "messages a stop released unrun, visible at once: held ones the drain could not run within --shutdown-timeout, and what the last long poll brought when the drain runs no read-ahead; each costs a receive toward the redrive policy"},
	{Name: LimitWaitSeconds, Unit: Seconds, Kind: Counter, Meaning: "seconds that held messages waited for a limit or a pause before they started (--rate-limit, --fleet-concurrency, the per-key limits)"},
	{Name: StartsHeldBack, Unit: Count, Kind: Counter, Meaning: "messages a limit or a pause kept from starting when a slot was free; each counts once however long it waits"},
	{Name: LimitReleases, Unit: Count, Kind: Counter, Meaning: "messages released with a delay because their limit key stayed full for --limit-wait; each costs a receive toward the redrive policy"},
	{Name: LimitPaused, Unit: Seconds, Kind: Gauge, Meaning: "seconds left of the pause in force that a worker asked for, once a minute (0: none)"},
	{Name: LimitFallback, Unit: Count, Kind: Gauge, Meaning: "1 while the task cannot reach --limits-table and holds to its share of the limits, once a minute; else 0"},
	{Name: LimitFallbackSeconds, Unit: Seconds, Kind: Gauge, Meaning: "seconds the task spent holding to its share of the limits because --limits-table could not be reached, in the last minute, once a minute"},
	{Name: Paused, Unit: Count, Kind: Gauge, Meaning: "1 while an operator's pause (watchbot fleet pause) holds the queue, once a minute; else 0"},
	{Name: SettingsVersion, Unit: Count, Kind: Gauge, Meaning: "the version of the fleet's control (watchbot fleet) the task applies, once a minute; 0 before any"},
	{Name: PayloadFetchErrors, Unit: Count, Kind: Counter, Meaning: "S3 payloads that could not be fetched: a missing or denied object is dead-lettered, any other failure retried after its backoff; neither is a WorkerError"},
	{Name: PayloadDeleteErrors, Unit: Count, Kind: Counter, Meaning: "S3 payloads that could not be deleted after their message succeeded; the message is done, the object stays for the bucket's lifecycle rule"},
}

// Diagnostics are recorded like the metrics above but served only on listen's Prometheus
// endpoint (--http-addr), never published: they say where the receive loop's time goes, or
// count what no alarm watches. The durations' values are seconds.
const (
	// ReceiveDuration is how long each receive took: its long poll and the SDK's retries.
	ReceiveDuration Metric = "ReceiveDuration"
	// RetriedReceiveDuration is how long the receives took that the SDK retried or that
	// failed, which the one receive loop waits out.
	RetriedReceiveDuration Metric = "RetriedReceiveDuration"
	// LeaseExtensionDuration is how long each extension of a short receive lease took, which
	// the receive loop also waits for.
	LeaseExtensionDuration Metric = "LeaseExtensionDuration"
	// TraceContextMalformed counts trace context carriers (a traceparent message attribute,
	// an AWSTraceHeader) that were present but could not be read, and were ignored.
	TraceContextMalformed Metric = "TraceContextMalformed"
)

// Diagnostics lists the diagnostic metrics.
var Diagnostics = []Metric{ReceiveDuration, RetriedReceiveDuration, LeaseExtensionDuration, TraceContextMalformed}

// Lookup returns the definition of m.
func Lookup(m Metric) (MetricDefinition, bool) {
	for _, d := range Metrics {
		if d.Name == m {
			return d, true
		}
	}
	return MetricDefinition{}, false
}

// Recorder receives the supervisor's measurements. v is in the metric's unit.
type Recorder interface {
	Add(m Metric, v float64)
}

// Discard is a Recorder that drops everything (--metrics none).
var Discard Recorder = discard{}

type discard struct{}

func (discard) Add(Metric, float64) {}
