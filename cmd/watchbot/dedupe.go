package main

import (
	"strings"

	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/progress"
)

// stateTable reads a state table's flag (--dedupe-table, --limits-table): a table name, or an
// ARN, whose region the table's client then uses ("" is off). s is the setting a malformed
// value is refused as.
func stateTable(raw string, s listenspec.Setting) (progress.Table, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return progress.Table{}, nil
	}
	t, err := progress.ParseTable(raw)
	if err != nil {
		return progress.Table{}, listenspec.Refuse(s, nil, err.Error())
	}
	return t, nil
}
