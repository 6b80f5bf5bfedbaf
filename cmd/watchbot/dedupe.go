package main

import (
	"context"
	"log/slog"
	"strings"

	"github.com/watchbot/watchbot/dedupe"
	"github.com/watchbot/watchbot/internal/awsenv"
	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/progress"
	"github.com/watchbot/watchbot/supervisor"
)

// dedupeTable reads --dedupe-table: a table name, or an ARN, whose region the table's
// client then uses ("" is off).
func dedupeTable(raw string) (progress.Table, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return progress.Table{}, nil
	}
	t, err := progress.ParseTable(raw)
	if err != nil {
		return progress.Table{}, listenspec.Refuse(listenspec.SettingDedupeTable, nil, err.Error())
	}
	return t, nil
}

// dedupeStore returns the dedupe table of cfg, or nil when --dedupe-table is off. Its client
// is built as `watchbot progress` builds its own: the SDK's configuration (endpoint from
// AWS_ENDPOINT_URL_DYNAMODB), in the region an ARN names. Keys are scoped by the queue's name.
func dedupeStore(ctx context.Context, raw string, cfg supervisor.Config, log *slog.Logger) (supervisor.DedupeAPI, error) {
	table, err := dedupeTable(raw)
	if err != nil || table.Name == "" {
		return nil, err
	}
	opts := awsenv.Options{QueueURL: cfg.QueueURL, Region: table.Region, Logger: log}
	awsCfg, err := awsenv.Load(ctx, opts)
	if err != nil {
		return nil, err
	}
	return dedupe.NewStore(awsenv.DynamoDB(awsCfg, opts), table.Name, queueattr.NameFromURL(cfg.QueueURL)), nil
}
