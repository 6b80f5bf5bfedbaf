package main

import (
	"strings"

	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/progress"
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
