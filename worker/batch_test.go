package worker

import (
	"bufio"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseBatchResults(t *testing.T) {
	ids := map[string]bool{"a": true, "b": true, "c": true}
	tests := []struct {
		name     string
		file     string
		want     map[string]string // id -> action[:delay]
		warnings int
	}{
		{"empty file", "", map[string]string{}, 0},
		{"one of each", `{"id":"a","action":"ack"}` + "\n" + `{"id":"b","action":"retry","delaySeconds":30}` + "\n" + `{"id":"c","action":"dead-letter","reason":"bad"}` + "\n",
			map[string]string{"a": "ack", "b": "retry:30", "c": "dead-letter"}, 0},
		{"first line wins", `{"id":"a","action":"retry"}` + "\n" + `{"id":"a","action":"ack"}` + "\n", map[string]string{"a": "retry"}, 1},
		{"retry at once", `{"id":"a","action":"retry","delaySeconds":0}`, map[string]string{"a": "retry:0"}, 0},
		{"unknown id ignored", `{"id":"zzz","action":"ack"}` + "\n" + `{"id":"a","action":"ack"}`, map[string]string{"a": "ack"}, 1},
		{"malformed line ignored", "not json\n" + `{"id":"a","action":"ack"}` + "\n", map[string]string{"a": "ack"}, 1},
		{"unknown action ignored, a later valid line counts", `{"id":"a","action":"maybe"}` + "\n" + `{"id":"a","action":"ack"}`, map[string]string{"a": "ack"}, 1},
		{"negative delay ignored", `{"id":"a","action":"retry","delaySeconds":-5}`, map[string]string{}, 1},
		{"missing id ignored", `{"action":"ack"}`, map[string]string{}, 1},
		{"blank lines and CRLF", "\r\n\n" + `{"id":"b","action":"ack"}` + "\r\n", map[string]string{"b": "ack"}, 0},
		{"no trailing newline", `{"id":"c","action":"ack"}`, map[string]string{"c": "ack"}, 0},
		{"over-long line ignored", `{"id":"a","action":"ack","reason":"` + strings.Repeat("x", 70*1024) + `"}` + "\n" + `{"id":"b","action":"ack"}`, map[string]string{"b": "ack"}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			results, warnings := parseBatchResults(strings.NewReader(tt.file), ids)
			got := map[string]string{}
			for id, d := range results {
				v := d.Action
				if d.DelaySeconds != nil {
					v += fmt.Sprintf(":%v", *d.DelaySeconds)
				}
				got[id] = v
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("results (-want +got):\n%s", diff)
			}
			if len(warnings) != tt.warnings {
				t.Errorf("warnings = %q, want %d", warnings, tt.warnings)
			}
		})
	}
}

func TestEncodeBatch(t *testing.T) {
	msgs := []Message{
		{ID: "a", Body: "<b>&\n", Attributes: map[string]string{"k": "v"}, Receives: 2, Attempt: 2, SentAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)},
		// Received once, run twice in place (FIFO): the batch line carries watchbot's attempt.
		{ID: "b", Body: `{"x":1}`, Subject: "s", Attributes: map[string]string{}, Receives: 1, Attempt: 3, GroupID: "g"},
	}
	var got []batchLine
	sc := bufio.NewScanner(strings.NewReader(string(encodeBatch(msgs))))
	for sc.Scan() {
		var l batchLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		got = append(got, l)
	}
	want := []batchLine{
		{ID: "a", Body: "<b>&\n", Attributes: map[string]string{"k": "v"}, Attempt: 2, SentTimestamp: "2026-01-02T03:04:05Z"},
		{ID: "b", Body: `{"x":1}`, Subject: "s", Attributes: map[string]string{}, Attempt: 3, GroupID: "g"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("batch (-want +got):\n%s", diff)
	}
}
