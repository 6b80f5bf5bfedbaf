package alarms

import "fmt"

// Comparison is a CloudWatch alarm's ComparisonOperator.
type Comparison string

// The comparisons watchbot's alarms use.
const (
	GreaterThanThreshold          Comparison = "GreaterThanThreshold"
	GreaterThanOrEqualToThreshold Comparison = "GreaterThanOrEqualToThreshold"
)

// Subject says which queue an alarm's QueueName dimension names.
type Subject string

// The queues an alarm can watch.
const (
	WorkQueue       Subject = "queue"
	DeadLetterQueue Subject = "dead-letter-queue"
)

// Braking is the name of the alarm on BrakingSeconds, which a stack without the brake leaves
// out.
const Braking = "Braking"

// Namespaces other than watchbot's own (which is --metrics-namespace).
const SQSNamespace = "AWS/SQS"

// Definition is one CloudWatch alarm, as data the template renders.
type Definition struct {
	// Name is the alarm's short name; the template prefixes it with the stack's name.
	Name string `json:"name"`
	// Namespace is "" for watchbot's own namespace, or SQSNamespace.
	Namespace string `json:"namespace,omitempty"`
	Metric    string `json:"metric"`
	// Dimension QueueName is the name of this queue.
	Subject           Subject    `json:"subject"`
	Statistic         string     `json:"statistic"`
	PeriodSeconds     int        `json:"periodSeconds"`
	EvaluationPeriods int        `json:"evaluationPeriods"`
	Threshold         float64    `json:"threshold"`
	Comparison        Comparison `json:"comparison"`
	TreatMissingData  string     `json:"treatMissingData"`
	// Description says what the alarm means and what to do.
	Description string `json:"description"`
}

// Thresholds are the tunable parts of the alarms.
type Thresholds struct {
	// WorkerErrorsPerMinute alarms when more worker runs than this fail in a minute.
	WorkerErrorsPerMinute int `json:"workerErrorsPerMinute"`
	// OldestMessageAgeSeconds alarms when the oldest message has waited longer than this.
	OldestMessageAgeSeconds int `json:"oldestMessageAgeSeconds"`
	// BrakingMinutes alarms when a task has braked for this many minutes in a row.
	BrakingMinutes int `json:"brakingMinutes"`
}

// DefaultThresholds are used when the operator sets none.
func DefaultThresholds() Thresholds {
	return Thresholds{WorkerErrorsPerMinute: 10, OldestMessageAgeSeconds: 3600, BrakingMinutes: 10}
}

// Validate reports thresholds that would make an alarm meaningless.
func (t Thresholds) Validate() error {
	if t.WorkerErrorsPerMinute < 0 {
		return fmt.Errorf("worker-errors threshold (%d) must not be negative", t.WorkerErrorsPerMinute)
	}
	if t.OldestMessageAgeSeconds < 60 || t.OldestMessageAgeSeconds > 14*24*3600 {
		return fmt.Errorf("oldest-message-age threshold (%ds) must be between 60s and 14 days", t.OldestMessageAgeSeconds)
	}
	// CloudWatch evaluates at most a day of one-minute periods.
	if t.BrakingMinutes < 1 || t.BrakingMinutes > 1440 {
		return fmt.Errorf("braking threshold (%d minutes) must be between 1 minute and 1 day", t.BrakingMinutes)
	}
	return nil
}

// Definitions returns the alarms watchbot's stack creates.
func Definitions(t Thresholds) []Definition {
	return []Definition{
		{
			Name: "WorkerErrors", Metric: string(WorkerErrors), Subject: WorkQueue,
			Statistic: "Sum", PeriodSeconds: 60, EvaluationPeriods: 1,
			Threshold: float64(t.WorkerErrorsPerMinute), Comparison: GreaterThanThreshold, TreatMissingData: "notBreaching",
			Description: fmt.Sprintf("More than %d worker runs failed in a minute. Each failed run is a log line at level warn "+
				"with its message_id: read the worker's output lines of that message_id for the cause. Failing messages retry with "+
				"backoff; the last failure dead-letters the message (\"message dead-lettered\", level error).", t.WorkerErrorsPerMinute),
		},
		{
			Name: "DeadLetter", Metric: string(DeadLetter), Subject: WorkQueue,
			Statistic: "Sum", PeriodSeconds: 60, EvaluationPeriods: 1,
			Threshold: 1, Comparison: GreaterThanOrEqualToThreshold, TreatMissingData: "notBreaching",
			Description: "A message was dead-lettered. Inspect it with `watchbot dead-letter --queue-url URL peek`, " +
				"fix the cause, then `watchbot dead-letter --queue-url URL replay`.",
		},
		{
			Name: "DeadLetterQueueDepth", Metric: string(DeadLetterQueueDepth), Subject: WorkQueue,
			Statistic: "Maximum", PeriodSeconds: 60, EvaluationPeriods: 1,
			Threshold: 1, Comparison: GreaterThanOrEqualToThreshold, TreatMissingData: "notBreaching",
			Description: "The dead-letter queue holds messages. They expire after its retention period: " +
				"peek, fix and replay them with `watchbot dead-letter`.",
		},
		{
			Name: "OldestMessageAge", Namespace: SQSNamespace, Metric: "ApproximateAgeOfOldestMessage", Subject: WorkQueue,
			Statistic: "Maximum", PeriodSeconds: 60, EvaluationPeriods: 5,
			Threshold: float64(t.OldestMessageAgeSeconds), Comparison: GreaterThanThreshold, TreatMissingData: "notBreaching",
			Description: fmt.Sprintf("The oldest message has waited more than %ds for five minutes. Workers are not keeping up "+
				"or are stuck: check the service's task count, autoscaling and WorkerErrors.", t.OldestMessageAgeSeconds),
		},
		{
			Name: Braking, Metric: string(BrakingSeconds), Subject: WorkQueue,
			Statistic: "Maximum", PeriodSeconds: 60, EvaluationPeriods: t.BrakingMinutes,
			Threshold: 0, Comparison: GreaterThanThreshold, TreatMissingData: "notBreaching",
			Description: fmt.Sprintf("A task has braked for %d minutes: nearly every worker run fails, as when a dependency "+
				"of the worker is down. Messages wait in the queue and are not dead-lettered; one probe runs at a growing interval. "+
				"Read the worker's log (probe failed lines) for the cause; when it is fixed the next probe succeeds and the "+
				"service ramps back up by itself.", t.BrakingMinutes),
		},
	}
}
