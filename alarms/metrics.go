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
)

// Unit is a CloudWatch standard unit.
type Unit string

// The units watchbot's metrics use.
const (
	Count        Unit = "Count"
	Milliseconds Unit = "Milliseconds"
)

// MetricDefinition describes one metric.
type MetricDefinition struct {
	Name    Metric `json:"name"`
	Unit    Unit   `json:"unit"`
	Meaning string `json:"meaning"`
}

// Metrics lists every metric watchbot publishes.
var Metrics = []MetricDefinition{
	{WorkerErrors, Count, "worker runs that failed: non-zero exit other than 4, killed by a signal or by --max-job-duration, or rejected with exit 3"},
	{WorkerSpawnErrors, Count, "worker commands that could not be started"},
	{DeadLetter, Count, "messages this supervisor sent to the dead-letter queue, or left for the redrive policy to move there"},
	{MessagesProcessed, Count, "messages whose worker succeeded and that were deleted"},
	{WorkerDuration, Milliseconds, "wall-clock time of each worker run"},
	{MessageAge, Milliseconds, "time from a message's send to the start of its worker"},
	{MessageReceives, Count, "messages received from the queue"},
	{DeadLetterQueueDepth, Count, "visible messages in the dead-letter queue, sampled once a minute"},
}

// Recorder receives the supervisor's measurements. v is in the metric's unit.
type Recorder interface {
	Add(m Metric, v float64)
}

// Discard is a Recorder that drops everything (--metrics none).
var Discard Recorder = discard{}

type discard struct{}

func (discard) Add(Metric, float64) {}
