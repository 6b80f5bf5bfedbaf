package main

import (
	"math"
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
