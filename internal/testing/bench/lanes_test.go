package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestSteadyRate(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	tests := []struct {
		name    string
		samples []doneAt
		n       int
		want    float64
	}{
		{"one per millisecond", []doneAt{{ms(0), 0}, {ms(100), 100}}, 100, 1000},
		// A slow start and a slow end are left out: 10 → 90 over 40 ms.
		{"slow start and end", []doneAt{{ms(100), 5}, {ms(110), 10}, {ms(150), 90}, {ms(400), 100}}, 100, 2000},
		// 10 falls halfway between 0 and 20 (10 ms), 90 halfway between 80 and 100 (40 ms).
		{"interpolated", []doneAt{{ms(0), 0}, {ms(20), 20}, {ms(30), 80}, {ms(50), 100}}, 100, 80 / 0.030},
		{"repeated samples", []doneAt{{ms(0), 0}, {ms(10), 10}, {ms(20), 10}, {ms(30), 90}, {ms(40), 90}}, 100, 80 / 0.020},
		{"never reached", []doneAt{{ms(0), 0}, {ms(10), 5}}, 100, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := steadyRate(tt.samples, tt.n); math.Abs(got-tt.want) > 1e-6*tt.want+1e-9 {
				t.Errorf("steadyRate = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestReadFirstPass(t *testing.T) {
	log := strings.Join([]string{
		`{"time":"2026-11-24T07:00:00Z","level":"INFO","msg":"watchbot listening"}`,
		`{"time":"2026-11-24T07:00:00.4Z","level":"DEBUG","msg":"receive","asked":8,"got":8,"took_ms":400,"retried":true,"failed":false,"short_lease":false}`,
		`{"time":"2026-11-24T07:00:00.5Z","level":"DEBUG","msg":"receive","asked":10,"got":10,"took_ms":5,"retried":false,"failed":false,"short_lease":true}`,
		`{"time":"2026-11-24T07:00:00.7Z","level":"DEBUG","msg":"short lease extension","messages":10,"extended":10,"took_ms":200}`,
		`{"time":"2026-11-24T07:00:01Z","level":"INFO","msg":"message done","message_id":"a","attempt":1,"outcome":"delete"}`,
		`{"time":"2026-11-24T07:00:02Z","level":"DEBUG","msg":"receive","asked":10,"got":0,"took_ms":1000,"retried":false,"failed":true,"short_lease":true}`,
		`{"time":"2026-11-24T07:00:02.5Z","level":"INFO","msg":"message done","message_id":"b","attempt":1,"outcome":"delete"}`,
		// After the first pass: a message on its second receive, and a receive not counted.
		`{"time":"2026-11-24T07:00:06Z","level":"DEBUG","msg":"receive","asked":10,"got":1,"took_ms":3000,"retried":true,"failed":false,"short_lease":true}`,
		`{"time":"2026-11-24T07:00:06.1Z","level":"INFO","msg":"message done","message_id":"c","attempt":2,"outcome":"delete"}`,
		`SDK 2026/11/24 07:00:07 WARN a line that is not JSON`,
	}, "\n")
	got := readFirstPass(log)
	want := firstPass{end: 2500 * time.Millisecond, receives: 3, retried: 1400 * time.Millisecond, extensions: 200 * time.Millisecond}
	if got != want {
		t.Errorf("readFirstPass = %+v, want %+v", got, want)
	}
	if got := readFirstPass("not a log"); got != (firstPass{}) {
		t.Errorf("readFirstPass of no log = %+v, want zero", got)
	}
}
