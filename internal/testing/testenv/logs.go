package testenv

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Logged says whether log, written by slog's JSON handler (one record a line; other lines
// are skipped), holds a record with every one of attrs: key, value pairs, each value
// compared as text, "*" taking any value of its key. Tests match a record's level and
// attribute keys and values, which are state, never its message, which may be reworded
// freely.
func Logged(log string, attrs ...string) bool { return LogCount(log, attrs...) > 0 }

// LogCount counts the records of log that Logged would find.
func LogCount(log string, attrs ...string) int {
	if len(attrs)%2 != 0 {
		panic(fmt.Sprintf("testenv.LogCount: attrs %q are not key, value pairs", attrs))
	}
	n := 0
	for _, line := range strings.Split(log, "\n") {
		var rec map[string]any
		if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		if hasAttrs(rec, attrs) {
			n++
		}
	}
	return n
}

func hasAttrs(rec map[string]any, attrs []string) bool {
	for i := 0; i < len(attrs); i += 2 {
		v, ok := rec[attrs[i]]
		if !ok || attrs[i+1] != "*" && fmt.Sprint(v) != attrs[i+1] {
			return false
		}
	}
	return true
}
