package main

import (
	"encoding/json"
	"fmt"
	"strings"
)

// logged says whether listen's JSON log (out, its standard error) holds a record with every
// one of attrs, each compared as text; a value of "*" takes any value of the key. Tests match
// a record's level and attribute keys, which are state, never its message, which may be
// reworded freely.
func logged(out string, attrs map[string]string) bool {
	for _, line := range strings.Split(out, "\n") {
		var rec map[string]any
		if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		if matches(rec, attrs) {
			return true
		}
	}
	return false
}

func matches(rec map[string]any, attrs map[string]string) bool {
	for k, want := range attrs {
		v, ok := rec[k]
		if !ok || want != "*" && fmt.Sprint(v) != want {
			return false
		}
	}
	return true
}

// listening says whether listen has logged its start: the record of what it serves.
func listening(out string) bool {
	return logged(out, map[string]string{"level": "INFO", "max_attempts": "*"})
}
