package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/watchbot/watchbot/dedupe"
	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/internal/setting"
	"github.com/watchbot/watchbot/internal/sqsspec"
)

// Duplicate suppression's settings, and the start-up check of its table against the queue.

// DedupeConfig is duplicate suppression (--dedupe-*): before a message runs, its key is
// claimed in a DynamoDB table (Deps.Dedupe), so a key that a run completed is not run again
// and a key another run holds does not run beside it. docs/dedupe.md.
type DedupeConfig struct {
	// Table is the DynamoDB table (--dedupe-table); "" turns duplicate suppression off.
	Table string
	// Key is where a message's key comes from (--dedupe-key): "message-id", or "attr:NAME"
	// for a message attribute carrying the producer's idempotency key.
	Key string
	// TTL is how long a completed key is remembered (--dedupe-ttl); 0 means the queue's
	// MessageRetentionPeriod.
	TTL time.Duration
}

// MinDedupeTTL is the shortest --dedupe-ttl: a key forgotten sooner would not outlast the
// redeliveries it is meant to catch.
const MinDedupeTTL = time.Minute

// CheckDedupe checks the dedupe key and TTL, when a dedupe table is set.
func CheckDedupe(d DedupeConfig) error {
	if d.Table == "" {
		return nil
	}
	if _, err := dedupe.ParseKeySource(d.Key); err != nil {
		return setting.Refuse(listenspec.SettingDedupeKey, nil, err.Error())
	}
	if d.TTL != 0 && d.TTL < MinDedupeTTL {
		return setting.Refuse(listenspec.SettingDedupeTTL, d.TTL, fmt.Sprintf("must be at least %v (0: the queue's message retention period)", MinDedupeTTL))
	}
	return nil
}

// checkDedupe is the dedupe table's startup check (api nil: duplicate suppression is off):
// the table exists with the right key. It returns how long a completed key is remembered:
// --dedupe-ttl, or the queue's retention period (attrs).
func checkDedupe(ctx context.Context, api DedupeAPI, cfg DedupeConfig, attrs queueattr.Info, log *slog.Logger) (ttl time.Duration, err error) {
	if api == nil {
		return 0, nil
	}
	ttlStatus, err := api.Check(ctx)
	switch {
	case errors.Is(err, dedupe.ErrTableNotFound), errors.Is(err, dedupe.ErrKeySchema):
		return 0, setting.Refuse(listenspec.SettingDedupeTable, nil, err.Error())
	case err != nil:
		return 0, setting.Error{Setting: listenspec.SettingDedupeTable, Reason: "table not reachable", Err: err}
	}
	retention := cmpOr(attrs.RetentionPeriod, defaultRetention)
	ttl = cmpOr(cfg.TTL, retention)
	log = log.With("component", "dedupe")
	source, _ := dedupe.ParseKeySource(cfg.Key) // checked by Validate
	log.Info("duplicate suppression on: each key runs once; a message whose key another run holds, or whose check fails, is retried, never run beside it or unchecked",
		"dedupe_table", cfg.Table, "dedupe_key", source.String(), "dedupe_ttl", ttl.String())
	if ttl < retention {
		log.Warn("--dedupe-ttl is shorter than the queue's message retention: a message delivered again after its key is forgotten runs again",
			"dedupe_ttl", ttl.String(), "retention", retention.String())
	}
	if ttlStatus == dedupe.TTLOff {
		log.Warn("the table's time to live is not on "+dedupe.TTLAttribute+": expired records are ignored but never deleted, and the table grows",
			"dedupe_table", cfg.Table)
	}
	return ttl, nil
}

// warnReceiveBackstop warns when the queue's redrive policy could move a message to the
// dead-letter queue before its last attempt. With a dedupe table an attempt is a run, and
// watchbot dead-letters a message whose last run fails; SQS still counts every receive,
// those that run nothing too (a key held by another run, a stop, a crash of watchbot), so
// maxReceiveCount is only the backstop for those, and needs room above the attempts.
func warnReceiveBackstop(info queueInfo, log *slog.Logger) {
	if info.maxReceiveCount == 0 || info.maxReceiveCount >= 2*info.maxAttempts {
		return
	}
	log.Warn("with --dedupe-table an attempt is a run, but SQS counts every receive: the queue's maxReceiveCount is below twice --max-attempts, so receives that run nothing (a held key, a stop, a crash) may send a message to the dead-letter queue before its last attempt; raise maxReceiveCount",
		"component", "dedupe", "max_receive_count", info.maxReceiveCount, "max_attempts", info.maxAttempts, "suggested_max_receive_count", min(2*info.maxAttempts, sqsspec.MaxReceiveCount))
}

// cmpOr returns d, or def when d is zero.
func cmpOr(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}
