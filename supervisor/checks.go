package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/internal/awsenv"
	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/internal/setting"
)

// queueInfo is what the startup checks learn of a queue, from which the queue's supervisor
// is built.
type queueInfo struct {
	// arn is the queue's ARN, which a Lambda record's eventSourceARN names.
	arn  string
	fifo bool
	// maxAttempts is the effective --max-attempts; maxReceiveCount and dlqURL are the
	// redrive policy's (0 and "" without one).
	maxAttempts     int
	maxReceiveCount int
	dlqURL          string
	// dedupeTTL is how long a completed dedupe key is remembered (0 without a dedupe table);
	// retention is the queue's message retention, as long as a released key keeps its count
	// of runs.
	dedupeTTL, retention time.Duration
}

// checkQueue runs the startup checks of cfg's queue, before anything is received: the queue
// and its redrive policy, and the dedupe table (dedupe, nil without one). It returns what
// they learned. The worker is checked after them, as its kind starts.
func checkQueue(ctx context.Context, cfg Config, api sqsAPI, log *slog.Logger, dedupe DedupeAPI) (queueInfo, error) {
	attrs, err := queueattr.Describe(ctx, api, cfg.QueueURL)
	if err := queueRefusal(err, cfg.QueueURL); err != nil {
		return queueInfo{}, err
	}
	if err != nil {
		return queueInfo{}, setting.Error{Setting: setting.QueueURL, Reason: "queue not reachable", Err: err}
	}
	info, err := checkRedrive(ctx, cfg, api, log, attrs)
	if err != nil {
		return queueInfo{}, err
	}
	info.arn, info.retention = attrs.ARN, cmpOr(attrs.RetentionPeriod, defaultRetention)
	if info.dedupeTTL, err = checkDedupe(ctx, dedupe, cfg.Dedupe, attrs, log); err != nil {
		return queueInfo{}, err
	}
	if dedupe != nil {
		warnReceiveBackstop(info, log)
	}
	if err := checkRelays(cfg, info, log); err != nil {
		return queueInfo{}, err
	}
	return info, nil
}

// checkRelays checks a --max-job-duration past SQS's in-flight limit, which Validate allowed
// with a dedupe table, against the queue: each relay of the job's message is a receive, and
// the redrive policy moves the message to the dead-letter queue once its receives pass
// maxReceiveCount. It says at start how long a job the queue allows, and refuses a
// --max-job-duration that it cannot give.
func checkRelays(cfg Config, info queueInfo, log *slog.Logger) error {
	limit := cfg.inFlight()
	if cfg.Dedupe.Table == "" || cfg.MaxJobDuration <= limit {
		return nil
	}
	if info.maxReceiveCount == 0 {
		log.Info("jobs may run past SQS's in-flight limit, their message relayed through the dedupe table; the queue has no redrive policy, so no receive count bounds them",
			"max_job_duration", cfg.MaxJobDuration.String(), "in_flight_limit", limit.String())
		return nil
	}
	longest := longestJob(info.maxReceiveCount, info.maxAttempts, limit)
	if cfg.MaxJobDuration > longest {
		return setting.Refuse(listenspec.SettingMaxJobDuration, cfg.MaxJobDuration, fmt.Sprintf(
			"is longer than the queue allows a job: each %v of it costs a receive, and the queue's maxReceiveCount (%d) less %s (%d) leaves %d, so at most %v; raise the redrive policy's maxReceiveCount",
			limit, info.maxReceiveCount, setting.Ref(listenspec.SettingMaxAttempts), info.maxAttempts, max(0, info.maxReceiveCount-info.maxAttempts), longest))
	}
	log.Info("jobs may run past SQS's in-flight limit, their message relayed through the dedupe table; the queue's redrive policy bounds them",
		"max_job_duration", cfg.MaxJobDuration.String(), "longest_job", longest.String(), "max_receive_count", info.maxReceiveCount, "max_attempts", info.maxAttempts)
	return nil
}

// longestJob is the longest job a queue allows when relays keep its message past SQS's
// in-flight limit: every limit's worth of the job costs one receive, and the receives the
// redrive policy leaves beyond the attempts are (maxReceiveCount − attempts).
func longestJob(maxReceiveCount, attempts int, limit time.Duration) time.Duration {
	return time.Duration(max(0, maxReceiveCount-attempts)) * limit
}

// checkRedrive checks the queue's redrive policy against --max-attempts and --allow-no-dlq,
// and returns what the runs go on: FIFO or not, the attempts, the dead-letter queue.
func checkRedrive(ctx context.Context, cfg Config, api sqsAPI, log *slog.Logger, attrs queueattr.Info) (queueInfo, error) {
	info := queueInfo{fifo: attrs.FIFO, maxAttempts: cfg.MaxAttempts}
	switch {
	case attrs.Redrive != nil:
		if arn, err := queueattr.ParseARN(attrs.Redrive.DeadLetterTargetARN); err == nil && attrs.FIFO && !strings.HasSuffix(arn.Resource, ".fifo") {
			return info, setting.Refuse(setting.QueueURL, nil, fmt.Sprintf("FIFO queue %s has a dead-letter queue that is not FIFO (%s); a FIFO queue needs a FIFO dead-letter queue",
				queueattr.NameFromURL(cfg.QueueURL), arn.Resource))
		}
		info.maxReceiveCount = attrs.Redrive.MaxReceiveCount
		dlq, err := queueattr.DeadLetterQueue(ctx, api, attrs)
		if noSuchQueue(err) {
			return info, setting.Refuse(setting.QueueURL, nil, fmt.Sprintf("the dead-letter queue that the queue's redrive policy names (%s) %s",
				attrs.Redrive.DeadLetterTargetARN, noSuchQueueReason))
		}
		if err != nil {
			return info, setting.Error{Setting: setting.QueueURL, Err: err}
		}
		info.dlqURL = dlq
		if info.maxAttempts == 0 {
			info.maxAttempts = info.maxReceiveCount
		}
		if info.maxAttempts > info.maxReceiveCount {
			return info, setting.Refuse(listenspec.SettingMaxAttempts, info.maxAttempts, fmt.Sprintf("is above the queue's maxReceiveCount (%d): the redrive policy would move messages to the DLQ first", info.maxReceiveCount))
		}
	case cfg.AllowNoDLQ:
		if info.maxAttempts == 0 {
			info.maxAttempts = 10
		}
		log.Warn("the queue has no redrive policy: dead-lettered messages will be deleted and recorded only in this log")
	default:
		return info, setting.Refuse(setting.QueueURL, nil, "the queue has no redrive policy (no dead-letter queue): poison messages would retry forever; add one, or pass --allow-no-dlq")
	}
	return info, nil
}

// queueRefusal is listen's answer to a failed first call about queueURL, explained as the
// operator commands explain theirs: a failure that only changing the configuration mends (no
// such queue, a permission the role lacks, credentials) stops the start as a refused setting;
// an endpoint that does not answer is a failed call. nil when err is not one of these.
func queueRefusal(err error, queueURL string) error {
	qe := awsenv.ExplainSQS(err, queueURL, "docs/listen.md#iam-permissions")
	switch {
	case qe == nil:
		return nil
	case qe.Cause == awsenv.CauseUnreachable:
		return setting.Error{Err: qe}
	}
	return setting.Refuse("", nil, qe.Error())
}

// noSuchQueueReason is why a queue that SQS does not know is refused: the setting is wrong,
// not the service down.
const noSuchQueueReason = "does not exist in this account and region"

// noSuchQueue reports whether err says the queue does not exist, whichever name SQS gave the
// error (QueueDoesNotExist, AWS.SimpleQueueService.NonExistentQueue): the SDK's type holds both.
func noSuchQueue(err error) bool {
	var missing *types.QueueDoesNotExist
	return errors.As(err, &missing)
}
