// Package listenspec holds what is `watchbot listen`'s alone and more than one package
// applies: the names of its settings, and the limits, defaults and checks that the
// supervisor and the template generator share (a template must never generate a listen
// command that refuses to start), and the message attributes of scheduled tasks, which the
// template's schedules send and the supervisor reads. Its checks return setting.Errors.
//
// It imports no watchbot package but internal/sqsspec (what SQS allows) and internal/setting,
// so the supervisor and the template generator can both use it without importing each other.
package listenspec

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/watchbot/watchbot/internal/setting"
	"github.com/watchbot/watchbot/internal/sqsspec"
)

// Limits of listen's own, beyond SQS's.
const (
	// MaxConcurrency is the most worker processes one listen runs at once.
	MaxConcurrency = 1000
	// MaxAttempts is the most attempts a message may get (SQS's most maxReceiveCount).
	MaxAttempts = 1000
	// MaxBatchSize is the most messages one batch-mode worker run takes.
	MaxBatchSize = 100
	// MaxBatchWindow is the longest a batch waits to fill.
	MaxBatchWindow = 30 * time.Second
)

// Listen's defaults that the template generator also writes into a stack, so a template
// that leaves a setting alone gets what listen does.
const (
	DefaultConcurrency = 1
	DefaultBatchSize   = 1
	// DefaultLambdaBatchSize is --batch-size with --lambda: Lambda's own default BatchSize.
	DefaultLambdaBatchSize   = 10
	DefaultVisibilityTimeout = 3 * time.Minute
	DefaultKillGrace         = 5 * time.Second
	DefaultShutdownTimeout   = 20 * time.Second
)

// Concurrency checks the worker processes run at once.
func Concurrency(n int) error {
	if n < 1 || n > MaxConcurrency {
		return setting.Refuse(SettingConcurrency, n, fmt.Sprintf("must be between 1 and %d", MaxConcurrency))
	}
	return nil
}

// Attempts checks the attempts a message gets; 0 stands for the queue's maxReceiveCount.
func Attempts(n int) error {
	if n < 0 || n > MaxAttempts {
		return setting.Refuse(SettingMaxAttempts, n, fmt.Sprintf("must be between 1 and %d (0 = the queue's maxReceiveCount)", MaxAttempts))
	}
	return nil
}

// Lease checks the visibility timeout and the heartbeat interval (0 means half the
// visibility timeout).
func Lease(visibility, heartbeat time.Duration) error {
	if visibility < time.Second || visibility > sqsspec.MaxInFlight {
		return setting.Refuse(SettingVisibilityTimeout, visibility, "must be between 1s and 12h")
	}
	if heartbeat == 0 {
		heartbeat = visibility / 2
	}
	if heartbeat <= 0 || heartbeat >= visibility {
		return setting.Refuse(SettingHeartbeatInterval, heartbeat, fmt.Sprintf("must be shorter than %s (%v)", setting.Ref(SettingVisibilityTimeout), visibility))
	}
	return nil
}

// JobDuration checks the longest a worker may run (0: no limit) against SQS's in-flight
// limit (sqsspec.MaxInFlight, scaled down in tests): a longer job keeps its message only
// through relays, which need a dedupe table (relayed). How many relays the queue's redrive
// policy allows is checked at start, against the queue.
func JobDuration(d, inFlight time.Duration, relayed bool) error {
	if d < 0 {
		return setting.Refuse(SettingMaxJobDuration, d, "must not be negative")
	}
	return WithinFlight(SettingMaxJobDuration, d, inFlight, relayed)
}

// WithinFlight checks a setting s that lets one job run for d (--max-job-duration,
// --http-timeout) against SQS's in-flight limit: past it only with a dedupe table (relayed),
// which relays the job's message.
func WithinFlight(s setting.Name, d, inFlight time.Duration, relayed bool) error {
	if d > inFlight && !relayed {
		return setting.Refuse(s, d, fmt.Sprintf("must not exceed %v, SQS's longest time in flight, without %s: a longer job keeps its message only when whoever receives it again relays it to the job through the dedupe table",
			inFlight, setting.Ref(SettingDedupeTable)))
	}
	return nil
}

// Batch checks the batch size and window.
func Batch(size int, window time.Duration) error {
	switch {
	case size < 1 || size > MaxBatchSize:
		return setting.Refuse(SettingBatchSize, size, fmt.Sprintf("must be between 1 and %d", MaxBatchSize))
	case window < 0 || window > MaxBatchWindow:
		return setting.Refuse(SettingBatchWindow, window, fmt.Sprintf("must be between 0 and %v", MaxBatchWindow))
	case window > 0 && size == 1:
		return setting.Refuse(SettingBatchWindow, window, fmt.Sprintf("needs %s above 1", setting.Ref(SettingBatchSize)))
	}
	return nil
}

// Volumes checks the directories emptied after every job (Watchbot's Volumes) against the
// concurrency: emptying them after one job would delete the files of the others running.
func Volumes(volumes []string, concurrency int) error {
	for _, v := range volumes {
		if v == "" || !filepath.IsAbs(v) {
			return setting.Refuse(SettingVolumes, v, "must be an absolute directory path")
		}
		if clean := filepath.Clean(v); clean == "/" || strings.Count(clean, "/") == 1 && isSystemDir(clean) {
			return setting.Refuse(SettingVolumes, v, "is a system directory, which must never be emptied after every job")
		}
	}
	if len(volumes) > 0 && concurrency > 1 {
		return setting.Refuse(SettingVolumes, nil, fmt.Sprintf("needs %s 1: emptying them after one job would delete the files of the others still running", setting.Ref(SettingConcurrency)))
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

// The message attributes that make a message a scheduled task, sent by a stack's schedules:
// the HTTP worker turns them into sqsd's task headers, and the path the POST goes to.
const (
	AttrTaskName    = "watchbot-task-name"
	AttrScheduledAt = "watchbot-scheduled-at"
	AttrTaskPath    = "watchbot-path"
)
