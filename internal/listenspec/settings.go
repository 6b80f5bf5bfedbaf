package listenspec

import "github.com/watchbot/watchbot/internal/setting"

// The names of listen's settings, by their supervisor.Config field (or app.Options field, for
// those of the process around the supervisor), which a rule refuses with a setting.Error.
const (
	SettingCommand           setting.Name = "Command"
	SettingConcurrency       setting.Name = "Concurrency"
	SettingMaxAttempts       setting.Name = "MaxAttempts"
	SettingVisibilityTimeout setting.Name = "VisibilityTimeout"
	SettingReceiveVisibility setting.Name = "ReceiveVisibility"
	SettingHeartbeatInterval setting.Name = "HeartbeatInterval"
	SettingMaxJobDuration    setting.Name = "MaxJobDuration"
	SettingKillGrace         setting.Name = "KillGrace"
	SettingShutdownTimeout   setting.Name = "ShutdownTimeout"
	SettingOnReject          setting.Name = "OnReject"
	SettingMaxMessageAge     setting.Name = "MaxMessageAge"
	SettingWaitTime          setting.Name = "WaitTime"
	SettingVolumes           setting.Name = "Volumes"
	SettingBatchSize         setting.Name = "BatchSize"
	SettingBatchWindow       setting.Name = "BatchWindow"
	SettingRetryDelay        setting.Name = "RetryDelay"
	SettingTempDir           setting.Name = "TempDir"
	SettingProtectionIdle    setting.Name = "ProtectionIdle"
	SettingHealthGrace       setting.Name = "HealthGrace"
	SettingBackoffBase       setting.Name = "Backoff.Base"
	SettingBackoffMin        setting.Name = "Backoff.Min"
	SettingBackoffMax        setting.Name = "Backoff.Max"
	SettingBackoffJitter     setting.Name = "Backoff.Jitter"
	SettingBrake             setting.Name = "Brake"
	SettingBrakeThreshold    setting.Name = "Brake.Threshold"
	SettingBrakeWindow       setting.Name = "Brake.Window"
	SettingBrakeMinRuns      setting.Name = "Brake.MinRuns"
	SettingBrakeProbeMax     setting.Name = "Brake.ProbeMax"
	SettingHTTPWorker        setting.Name = "HTTP.URL"
	SettingHTTPContentType   setting.Name = "HTTP.ContentType"
	SettingHTTPTimeout       setting.Name = "HTTP.Timeout"
	SettingHTTPConnect       setting.Name = "HTTP.ConnectTimeout"
	SettingHTTPStartup       setting.Name = "HTTP.StartupTimeout"
	SettingHTTPHealthPath    setting.Name = "HTTP.HealthPath"
	SettingLambda            setting.Name = "Lambda.Enabled"
	SettingLambdaFunction    setting.Name = "Lambda.FunctionName"
	SettingLambdaHandler     setting.Name = "Lambda.Handler"
	SettingLambdaInitTimeout setting.Name = "Lambda.InitTimeout"
	SettingDedupeTable       setting.Name = "Dedupe.Table"
	SettingDedupeKey         setting.Name = "Dedupe.Key"
	SettingDedupeTTL         setting.Name = "Dedupe.TTL"
	SettingRateLimit         setting.Name = "Limits.Fleet.Rate"
	SettingFleetConcurrency  setting.Name = "Limits.Fleet.Concurrency"
	SettingRatePerKey        setting.Name = "Limits.Fleet.RatePerKey"
	SettingConcurrencyPerKey setting.Name = "Limits.Fleet.ConcurrencyPerKey"
	SettingLimitsTable       setting.Name = "Limits.Fleet.Table"
	SettingMaxPause          setting.Name = "Limits.Fleet.MaxPause"
	SettingLimitKey          setting.Name = "Limits.Key"
	SettingLimitWait         setting.Name = "Limits.Wait"
	SettingHTTPAddr          setting.Name = "HTTPAddr"
	SettingScaleInProtection setting.Name = "ScaleInProtection"
	SettingQueuePolicy       setting.Name = "Queues.Policy"
	SettingQueueWeight       setting.Name = "Queues.Weights"
	SettingQueueReserve      setting.Name = "Queues.Reserve"
	SettingPayloadBuckets    setting.Name = "Payload.Buckets"
	SettingKeepPayloads      setting.Name = "Payload.Keep"
	SettingMetrics           setting.Name = "Metrics"
	SettingMetricsNamespace  setting.Name = "MetricsNamespace"
	// SettingAttempt is `watchbot try`'s attempt number, which listen learns from SQS.
	SettingAttempt setting.Name = "Attempt"
)

// Settings lists every setting of listen's, so the command line can check it names each one.
var Settings = []setting.Name{
	setting.QueueURL, SettingCommand, SettingConcurrency, SettingMaxAttempts, SettingVisibilityTimeout,
	SettingReceiveVisibility, SettingHeartbeatInterval, SettingMaxJobDuration, SettingKillGrace,
	SettingShutdownTimeout, SettingOnReject, SettingMaxMessageAge, SettingVolumes, SettingBatchSize,
	SettingBatchWindow, SettingRetryDelay, SettingTempDir, SettingProtectionIdle, SettingHealthGrace,
	SettingBackoffBase, SettingBackoffMin, SettingBackoffMax, SettingBackoffJitter, SettingBrake,
	SettingBrakeThreshold, SettingBrakeWindow, SettingBrakeMinRuns, SettingBrakeProbeMax,
	SettingHTTPWorker, SettingHTTPContentType, SettingHTTPTimeout, SettingHTTPConnect, SettingHTTPStartup,
	SettingHTTPHealthPath, SettingLambda, SettingLambdaFunction, SettingLambdaHandler, SettingLambdaInitTimeout, SettingDedupeTable, SettingDedupeKey, SettingDedupeTTL,
	SettingRateLimit, SettingFleetConcurrency, SettingRatePerKey, SettingConcurrencyPerKey, SettingLimitsTable,
	SettingMaxPause, SettingLimitKey, SettingLimitWait, SettingHTTPAddr, SettingScaleInProtection, SettingAttempt,
	SettingQueuePolicy, SettingQueueWeight, SettingQueueReserve, SettingPayloadBuckets, SettingKeepPayloads,
	SettingMetrics, SettingMetricsNamespace,
}
