package listenspec

import (
	"fmt"
	"reflect"
	"regexp"
)

// Setting names one of listen's settings by its supervisor.Config field (or app.Options
// field, for those of the process around the supervisor). The libraries
// speak of settings; only the command line knows them as flags (--heartbeat-interval) or
// environment variables, and turns one into the other when it prints an Error.
type Setting string

// The settings a rule may refuse.
const (
	SettingQueueURL          Setting = "QueueURL"
	SettingCommand           Setting = "Command"
	SettingConcurrency       Setting = "Concurrency"
	SettingMaxAttempts       Setting = "MaxAttempts"
	SettingVisibilityTimeout Setting = "VisibilityTimeout"
	SettingReceiveVisibility Setting = "ReceiveVisibility"
	SettingHeartbeatInterval Setting = "HeartbeatInterval"
	SettingMaxJobDuration    Setting = "MaxJobDuration"
	SettingKillGrace         Setting = "KillGrace"
	SettingShutdownTimeout   Setting = "ShutdownTimeout"
	SettingOnReject          Setting = "OnReject"
	SettingMaxMessageAge     Setting = "MaxMessageAge"
	SettingVolumes           Setting = "Volumes"
	SettingBatchSize         Setting = "BatchSize"
	SettingBatchWindow       Setting = "BatchWindow"
	SettingRetryDelay        Setting = "RetryDelay"
	SettingTempDir           Setting = "TempDir"
	SettingProtectionIdle    Setting = "ProtectionIdle"
	SettingHealthGrace       Setting = "HealthGrace"
	SettingBackoffBase       Setting = "Backoff.Base"
	SettingBackoffMin        Setting = "Backoff.Min"
	SettingBackoffMax        Setting = "Backoff.Max"
	SettingBackoffJitter     Setting = "Backoff.Jitter"
	SettingBrake             Setting = "Brake"
	SettingBrakeThreshold    Setting = "Brake.Threshold"
	SettingBrakeWindow       Setting = "Brake.Window"
	SettingBrakeMinRuns      Setting = "Brake.MinRuns"
	SettingBrakeProbeMax     Setting = "Brake.ProbeMax"
	SettingHTTPWorker        Setting = "HTTP.URL"
	SettingHTTPContentType   Setting = "HTTP.ContentType"
	SettingHTTPTimeout       Setting = "HTTP.Timeout"
	SettingHTTPConnect       Setting = "HTTP.ConnectTimeout"
	SettingHTTPStartup       Setting = "HTTP.StartupTimeout"
	SettingHTTPHealthPath    Setting = "HTTP.HealthPath"
	SettingDedupeTable       Setting = "Dedupe.Table"
	SettingDedupeKey         Setting = "Dedupe.Key"
	SettingDedupeTTL         Setting = "Dedupe.TTL"
	SettingRateLimit         Setting = "Limits.Fleet.Rate"
	SettingFleetConcurrency  Setting = "Limits.Fleet.Concurrency"
	SettingRatePerKey        Setting = "Limits.Fleet.RatePerKey"
	SettingConcurrencyPerKey Setting = "Limits.Fleet.ConcurrencyPerKey"
	SettingLimitsTable       Setting = "Limits.Fleet.Table"
	SettingMaxPause          Setting = "Limits.Fleet.MaxPause"
	SettingLimitKey          Setting = "Limits.Key"
	SettingLimitWait         Setting = "Limits.Wait"
	SettingHTTPAddr          Setting = "HTTPAddr"
	SettingScaleInProtection Setting = "ScaleInProtection"
	SettingQueuePolicy       Setting = "Queues.Policy"
	SettingQueueWeight       Setting = "Queues.Weights"
	SettingQueueReserve      Setting = "Queues.Reserve"
	// SettingPayloadBuckets and SettingKeepPayloads are the S3 payloads' (docs/payloads.md).
	SettingPayloadBuckets Setting = "Payload.Buckets"
	SettingKeepPayloads   Setting = "Payload.Keep"
	// SettingAttempt is `watchbot try`'s attempt number, which listen learns from SQS.
	SettingAttempt Setting = "Attempt"
)

// The template generator's own options (cloudformation.Options fields), which its errors
// name with the same Error.
const (
	SettingNamePrefix          Setting = "NamePrefix"
	SettingQueueName           Setting = "QueueName"
	SettingQueue               Setting = "Queues"
	SettingFIFO                Setting = "FIFO"
	SettingQueueRetention      Setting = "QueueRetention"
	SettingCPU                 Setting = "CPU"
	SettingMemory              Setting = "Memory"
	SettingMinTasks            Setting = "MinTasks"
	SettingMaxTasks            Setting = "MaxTasks"
	SettingMetrics             Setting = "Metrics"
	SettingMetricsNamespace    Setting = "MetricsNamespace"
	SettingEnvironment         Setting = "Environment"
	SettingExtraStatements     Setting = "ExtraStatements"
	SettingAlarms              Setting = "Alarms"
	SettingLogRetentionDays    Setting = "LogRetentionDays"
	SettingTargetLatency       Setting = "TargetLatency"
	SettingExpectedJobDuration Setting = "ExpectedJobDuration"
	SettingOTelEndpoint        Setting = "OTelEndpoint"
	SettingOTelProtocol        Setting = "OTelProtocol"
	SettingSchedules           Setting = "Schedules"
	SettingScheduleTimezone    Setting = "ScheduleTimezone"
	// SettingCronYAML is the cron.yaml file that schedules are read from (ParseCronYAML),
	// which joins Schedules.
	SettingCronYAML Setting = "CronYAML"
)

// The S3 payloads' settings of the template and of send, beside listen's
// SettingPayloadBuckets: a bucket the template uses without creating it, and the size above
// which send offloads a body.
const (
	SettingExistingPayloadBucket Setting = "Payload.ExistingBucket"
	SettingPayloadThreshold      Setting = "Payload.Threshold"
)

// The operator tools' own options: the dead-letter queue's location (deadletter.Location),
// what a replay selects and how fast it goes, how many messages an operation takes, and the
// reason of a failed map-reduce job; and what `send` sends (producer.Request): a body given
// inline or from a file, a delay, attributes and a FIFO group.
const (
	SettingDLQURL    Setting = "DLQURL"
	SettingTo        Setting = "To"
	SettingMatchBody Setting = "Filter.Body"
	SettingMatchAttr Setting = "Filter.Attrs"
	SettingLimit     Setting = "Limit"
	SettingRate      Setting = "Rate"
	SettingIDs       Setting = "IDs"
	SettingReason    Setting = "Reason"
	SettingBody      Setting = "Body"
	SettingFile      Setting = "File"
	SettingDelay     Setting = "Delay"
	SettingAttrs     Setting = "Attributes"
	SettingGroupID   Setting = "GroupID"
)

// Settings lists every Setting, so the command line can check it names each one.
var Settings = []Setting{
	SettingQueueURL, SettingCommand, SettingConcurrency, SettingMaxAttempts, SettingVisibilityTimeout,
	SettingReceiveVisibility, SettingHeartbeatInterval, SettingMaxJobDuration, SettingKillGrace,
	SettingShutdownTimeout, SettingOnReject, SettingMaxMessageAge, SettingVolumes, SettingBatchSize,
	SettingBatchWindow, SettingRetryDelay, SettingTempDir, SettingProtectionIdle, SettingHealthGrace,
	SettingBackoffBase, SettingBackoffMin, SettingBackoffMax, SettingBackoffJitter, SettingBrake,
	SettingBrakeThreshold, SettingBrakeWindow, SettingBrakeMinRuns, SettingBrakeProbeMax,
	SettingHTTPWorker, SettingHTTPContentType, SettingHTTPTimeout, SettingHTTPConnect, SettingHTTPStartup,
	SettingHTTPHealthPath, SettingDedupeTable, SettingDedupeKey, SettingDedupeTTL,
	SettingRateLimit, SettingFleetConcurrency, SettingRatePerKey, SettingConcurrencyPerKey, SettingLimitsTable, SettingMaxPause, SettingLimitKey, SettingLimitWait,
	SettingHTTPAddr, SettingScaleInProtection, SettingAttempt,
	SettingQueuePolicy, SettingQueueWeight, SettingQueueReserve,
	SettingPayloadBuckets, SettingKeepPayloads,
	SettingNamePrefix, SettingQueueName, SettingQueue, SettingFIFO, SettingQueueRetention, SettingCPU, SettingMemory,
	SettingMinTasks, SettingMaxTasks, SettingMetrics, SettingMetricsNamespace, SettingEnvironment, SettingExtraStatements,
	SettingAlarms, SettingLogRetentionDays, SettingTargetLatency, SettingExpectedJobDuration,
	SettingOTelEndpoint, SettingOTelProtocol, SettingSchedules, SettingScheduleTimezone, SettingCronYAML,
	SettingDLQURL, SettingTo, SettingMatchBody, SettingMatchAttr, SettingLimit, SettingRate, SettingIDs, SettingReason,
	SettingBody, SettingFile, SettingDelay, SettingAttrs, SettingGroupID,
	SettingExistingPayloadBucket, SettingPayloadThreshold,
}

// Error is a setting that a rule refused (the configuration is wrong), or, when Err is set,
// a startup call that the setting led to and that failed (the queue it names is not
// reachable: the setting may be right and the service down).
type Error struct {
	// Setting is the setting refused; "" when the rule is about no one setting.
	Setting Setting
	// Value is the refused value, or nil when Reason says it all ("is required").
	Value any
	// Reason says what the value must be ("must be between 1 and 1000"). Other settings
	// appear in it as Ref placeholders, which Render replaces with their names.
	Reason string
	// Err is the failed call, if any.
	Err error
}

// Refuse returns the Error of a setting whose value breaks a rule.
func Refuse(s Setting, value any, reason string) Error {
	return Error{Setting: s, Value: value, Reason: reason}
}

// Ref stands for setting s inside a Reason, until Render names it. Its delimiters are control
// characters, so that a value the user typed into a Reason (a regular expression, a schedule)
// is never taken for a placeholder.
func Ref(s Setting) string { return refMark + string(s) + refMark }

const refMark = "\x1f"

var refPattern = regexp.MustCompile(refMark + `[A-Za-z.]+` + refMark)

// Error renders e with the settings' own names (HeartbeatInterval).
func (e Error) Error() string {
	return e.Render(func(s Setting) string { return string(s) })
}

// Unwrap returns the failed call, if any.
func (e Error) Unwrap() error { return e.Err }

// Render writes e with name giving each setting's name as the user knows it: "NAME (VALUE)
// REASON", or "NAME: REASON" without a value; then ": ERR" when a call failed.
func (e Error) Render(name func(Setting) string) string {
	reason := refPattern.ReplaceAllStringFunc(e.Reason, func(ref string) string {
		s := Setting(ref[1 : len(ref)-1])
		for _, known := range Settings {
			if s == known {
				return name(s)
			}
		}
		return ref
	})
	out := name(e.Setting)
	switch {
	case e.Setting == "":
		out = reason
	case e.Value != nil:
		out += " (" + showValue(e.Value) + ")"
		if reason != "" {
			out += " " + reason
		}
	case reason != "":
		out += ": " + reason
	}
	if e.Err != nil {
		if out != "" {
			out += ": "
		}
		out += e.Err.Error()
	}
	return out
}

// showValue quotes strings, so that an empty or spaced value is seen as typed; a value with
// a String method shows that.
func showValue(v any) string {
	if s, ok := v.(fmt.Stringer); ok {
		return s.String()
	}
	if reflect.ValueOf(v).Kind() == reflect.String {
		return fmt.Sprintf("%q", v)
	}
	return fmt.Sprint(v)
}
