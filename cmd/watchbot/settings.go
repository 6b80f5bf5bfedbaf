package main

import (
	"errors"
	"strings"

	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/setting"
)

// settingFlags names each of listen's settings by the flag that sets it. The packages return
// setting.Errors naming settings; this table is the one place where they become flags.
var settingFlags = map[setting.Name]string{
	setting.QueueURL:                    "--queue-url",
	listenspec.SettingCommand:           "the worker command",
	listenspec.SettingConcurrency:       "--concurrency",
	listenspec.SettingMaxAttempts:       "--max-attempts",
	listenspec.SettingVisibilityTimeout: "--visibility-timeout",
	listenspec.SettingReceiveVisibility: "--receive-visibility",
	listenspec.SettingHeartbeatInterval: "--heartbeat-interval",
	listenspec.SettingMaxJobDuration:    "--max-job-duration",
	listenspec.SettingKillGrace:         "--kill-grace",
	listenspec.SettingShutdownTimeout:   "--shutdown-timeout",
	listenspec.SettingOnReject:          "--on-reject",
	listenspec.SettingMaxMessageAge:     "--max-message-age",
	listenspec.SettingVolumes:           "--volumes",
	listenspec.SettingBatchSize:         "--batch-size",
	listenspec.SettingBatchWindow:       "--batch-window",
	listenspec.SettingRetryDelay:        "--retry-delay",
	listenspec.SettingTempDir:           "--temp-dir",
	listenspec.SettingProtectionIdle:    "--scale-in-protection-idle",
	listenspec.SettingHealthGrace:       "--health-grace",
	listenspec.SettingBackoffBase:       "--backoff-base",
	listenspec.SettingBackoffMin:        "--backoff-min",
	listenspec.SettingBackoffMax:        "--backoff-max",
	listenspec.SettingBackoffJitter:     "--backoff-jitter",
	listenspec.SettingBrake:             "--brake",
	listenspec.SettingBrakeThreshold:    "--brake-threshold",
	listenspec.SettingBrakeWindow:       "--brake-window",
	listenspec.SettingBrakeMinRuns:      "--brake-min-runs",
	listenspec.SettingBrakeProbeMax:     "--brake-probe-max",
	listenspec.SettingHTTPWorker:        "--http-worker",
	listenspec.SettingHTTPContentType:   "--http-content-type",
	listenspec.SettingHTTPTimeout:       "--http-timeout",
	listenspec.SettingHTTPConnect:       "--http-connect-timeout",
	listenspec.SettingHTTPStartup:       "--http-startup-timeout",
	listenspec.SettingHTTPHealthPath:    "--http-health-path",
	listenspec.SettingDedupeTable:       "--dedupe-table",
	listenspec.SettingDedupeKey:         "--dedupe-key",
	listenspec.SettingDedupeTTL:         "--dedupe-ttl",
	listenspec.SettingRateLimit:         "--rate-limit",
	listenspec.SettingFleetConcurrency:  "--fleet-concurrency",
	listenspec.SettingRatePerKey:        "--rate-limit-per-key",
	listenspec.SettingConcurrencyPerKey: "--concurrency-per-key",
	listenspec.SettingLimitsTable:       "--limits-table",
	listenspec.SettingMaxPause:          "--max-pause",
	listenspec.SettingLimitKey:          "--limit-key",
	listenspec.SettingLimitWait:         "--limit-wait",
	listenspec.SettingHTTPAddr:          "--http-addr",
	listenspec.SettingScaleInProtection: "--scale-in-protection",
	listenspec.SettingAttempt:           "--attempt",
	listenspec.SettingQueuePolicy:       "--queue-policy",
	listenspec.SettingQueueWeight:       "--queue-weight",
	listenspec.SettingQueueReserve:      "--queue-reserve",
	listenspec.SettingPayloadBuckets:    "--payload-bucket",
	listenspec.SettingKeepPayloads:      "--keep-payloads",
	// The template's own.
	setting.NamePrefix:                 "--name-prefix",
	setting.QueueName:                  "--queue-name",
	setting.Queue:                      "--queue",
	setting.FIFO:                       "--fifo",
	setting.QueueRetention:             "--queue-retention",
	setting.CPU:                        "--cpu",
	setting.Memory:                     "--memory",
	setting.MinTasks:                   "--min-tasks",
	setting.MaxTasks:                   "--max-tasks",
	listenspec.SettingMetrics:          "--metrics",
	listenspec.SettingMetricsNamespace: "--metrics-namespace",
	setting.Environment:                "--env",
	setting.ExtraStatements:            "--extra-policy",
	setting.Alarms:                     "alarm thresholds (--worker-errors-threshold, --oldest-message-age-threshold, --braking-threshold)",
	setting.LogRetentionDays:           "--log-retention-days",
	setting.TargetLatency:              "--target-latency",
	setting.ExpectedJobDuration:        "--expected-job-duration",
	setting.OTelEndpoint:               "--otel-endpoint",
	setting.OTelProtocol:               "--otel-protocol",
	setting.Schedules:                  "--schedule",
	setting.ScheduleTimezone:           "--schedule-timezone",
	setting.CronYAML:                   "--cron-yaml",
	// The operator tools'.
	setting.DLQURL:    "--dlq-url",
	setting.To:        "--to",
	setting.MatchBody: "--match-body",
	setting.MatchAttr: "--match-attr",
	setting.Limit:     "--limit",
	setting.Rate:      "--rate",
	setting.IDs:       "--id",
	setting.Reason:    "--reason",
	setting.Body:      "--body",
	setting.File:      "--file",
	setting.Delay:     "--delay",
	setting.Attrs:     "--attr",
	setting.GroupID:   "--group-id",
	// The payload bucket's, beside listen's --payload-bucket.
	setting.ExistingPayloadBucket: "--existing-payload-bucket",
	setting.PayloadBucket:         "--payload-bucket",
	setting.PayloadThreshold:      "--payload-threshold",
}

// flagOf names setting s by its flag, or by its own name if it has none.
func flagOf(s setting.Name) string {
	if f, ok := settingFlags[s]; ok {
		return f
	}
	return string(s)
}

// withFlags returns err with the first error in it that names settings (a setting.Error,
// a cloudformation.ScheduleError), if any, worded with the flags of names (settingFlags where
// names has none). What err wraps stays reachable with errors.As. An error already worded is left as it is: main words every error once more, and would
// otherwise turn a command's own names (template's "--env Volumes") back into listen's flags.
func withFlags(err error, names map[setting.Name]string) error {
	var e settingsError
	var done flagged
	if err == nil || errors.As(err, &done) || !errors.As(err, &e) {
		return err
	}
	named := e.Render(func(s setting.Name) string {
		if f, ok := names[s]; ok {
			return f
		}
		return flagOf(s)
	})
	return flagged{err: err, text: strings.Replace(err.Error(), e.Error(), named, 1)}
}

// settingsError is a library's typed error that names settings: Render words it with the
// names the user knows them by.
type settingsError interface {
	error
	Render(name func(setting.Name) string) string
}

// flagged is an error reworded with flag names.
type flagged struct {
	err  error
	text string
}

func (f flagged) Error() string { return f.text }
func (f flagged) Unwrap() error { return f.err }
