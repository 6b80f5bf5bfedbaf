package main

import (
	"strings"

	"github.com/watchbot/watchbot/internal/setting"
	"github.com/watchbot/watchbot/progress"
)

// stateTable reads a state table's flag (--dedupe-table, --limits-table): a table name, or an
// ARN, whose region the table's client then uses ("" is off). s is the setting a malformed
// value is refused as.
func stateTable(raw string, s setting.Name) (progress.Table, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return progress.Table{}, nil
	}
	t, err := progress.ParseTable(raw)
	if err != nil {
		return progress.Table{}, setting.Refuse(s, nil, err.Error())
	}
	return t, nil
}
