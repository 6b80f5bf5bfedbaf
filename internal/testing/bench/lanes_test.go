//go:build linux

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
		`{"time":"2026-11-24T07:00:01Z","level":"INFO","msg":"message done","message_id":"a","attempt":1,"outcome":"delete"}`,
		`{"time":"2026-11-24T07:00:02.5Z","level":"INFO","msg":"message done","message_id":"b","attempt":1,"outcome":"delete"}`,
		// After the first pass: a message on its second receive.
		`{"time":"2026-11-24T07:00:06.1Z","level":"INFO","msg":"message done","message_id":"c","attempt":2,"outcome":"delete"}`,
		`SDK 2026/11/24 07:00:07 WARN a line that is not JSON`,
	}, "\n")
	at := func(ms int) time.Time {
		return time.Date(2026, 11, 24, 7, 0, 0, 0, time.UTC).Add(time.Duration(ms) * time.Millisecond)
	}
	samples := []receiveSample{
		{at(100), 0, 0, 0},
		{at(2400), 3, 1400 * time.Millisecond, 200 * time.Millisecond},
		// After the first pass: not counted.
		{at(2600), 4, 4400 * time.Millisecond, 200 * time.Millisecond},
	}
	got := readFirstPass(log, samples)
	want := firstPass{end: 2500 * time.Millisecond, receives: 3, retried: 1400 * time.Millisecond, extensions: 200 * time.Millisecond}
	if got != want {
		t.Errorf("readFirstPass = %+v, want %+v", got, want)
	}
	if got := readFirstPass("not a log", samples); got != (firstPass{}) {
		t.Errorf("readFirstPass of no log = %+v, want zero", got)
	}
}

func TestParseReceiveMetrics(t *testing.T) {
	text := `# TYPE watchbot_receive_duration_seconds histogram
watchbot_receive_duration_seconds_bucket{queue="q",le="+Inf"} 7
watchbot_receive_duration_seconds_sum{queue="q"} 12.5
watchbot_receive_duration_seconds_count{queue="q"} 7
# TYPE watchbot_receive_retried_duration_seconds histogram
watchbot_receive_retried_duration_seconds_bucket{queue="q",le="+Inf"} 2
watchbot_receive_retried_duration_seconds_sum{queue="q"} 1.25
watchbot_receive_retried_duration_seconds_count{queue="q"} 2
# TYPE watchbot_lease_extension_duration_seconds histogram
watchbot_lease_extension_duration_seconds_bucket{queue="q",le="+Inf"} 1
watchbot_lease_extension_duration_seconds_sum{queue="q"} 0.5
watchbot_lease_extension_duration_seconds_count{queue="q"} 1
`
	now := time.Now()
	got, err := parseReceiveMetrics(strings.NewReader(text), now)
	want := receiveSample{at: now, receives: 7, retried: 1250 * time.Millisecond, extensions: 500 * time.Millisecond}
	if err != nil || got != want {
		t.Errorf("parseReceiveMetrics = %+v, %v; want %+v", got, err, want)
	}
	if _, err := parseReceiveMetrics(strings.NewReader("# nothing\n"), now); err == nil {
		t.Error("a /metrics without the receive histograms gave no error")
	}
}
