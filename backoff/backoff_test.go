package backoff

import (
	"testing"
	"time"
)

func TestExponentialDelay(t *testing.T) {
	half := func() float64 { return 0.5 }
	zero := func() float64 { return 0 }
	almostOne := func() float64 { return 0.999999999 }
	def := Default()
	tests := []struct {
		name    string
		policy  Exponential
		attempt int
		random  func() float64
		want    time.Duration
	}{
		{"attempt 0 is treated as 1", def, 0, nil, 2 * time.Second},
		{"negative attempt", def, -5, nil, 2 * time.Second},
		{"attempt 1", def, 1, nil, 2 * time.Second},
		{"attempt 2", def, 2, nil, 4 * time.Second},
		{"attempt 9 (Watchbot's last)", def, 9, nil, 512 * time.Second},
		{"attempt 15", def, 15, nil, 32768 * time.Second},
		{"attempt 16 reaches max", def, 16, nil, 12 * time.Hour},
		{"attempt 63 does not overflow", def, 63, nil, 12 * time.Hour},
		{"attempt 128 does not overflow", def, 128, nil, 12 * time.Hour},
		{"max caps", Exponential{Base: time.Second, Max: 60 * time.Second, Jitter: None}, 10, nil, 60 * time.Second},
		{"min floors", Exponential{Base: time.Second, Min: 5 * time.Second, Max: time.Hour, Jitter: None}, 1, nil, 5 * time.Second},
		{"full jitter half", Exponential{Base: time.Second, Max: time.Hour, Jitter: Full}, 3, half, 2 * time.Second},
		{"full jitter zero", Exponential{Base: time.Second, Max: time.Hour, Jitter: Full}, 3, zero, 0},
		{"full jitter zero floored by min", Exponential{Base: time.Second, Min: time.Second, Max: time.Hour, Jitter: Full}, 3, zero, time.Second},
		{"equal jitter zero", Exponential{Base: time.Second, Max: time.Hour, Jitter: Equal}, 3, zero, 2 * time.Second},
		{"equal jitter top", Exponential{Base: time.Second, Max: time.Hour, Jitter: Equal}, 3, almostOne, 4 * time.Second},
		{"full jitter at attempt 128 stays within max", Exponential{Base: time.Second, Max: time.Hour, Jitter: Full}, 128, almostOne, time.Hour},
		{"huge base", Exponential{Base: 100 * time.Hour, Max: 12 * time.Hour, Jitter: None}, 1, nil, 12 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.policy.Delay(tt.attempt, tt.random)
			if d := got - tt.want; d < -time.Millisecond || d > time.Millisecond {
				t.Fatalf("Delay(%d) = %v, want %v", tt.attempt, got, tt.want)
			}
		})
	}
}

func TestDelayNeverExceedsBounds(t *testing.T) {
	p := Exponential{Base: 3 * time.Second, Min: 2 * time.Second, Max: 10 * time.Minute, Jitter: Full}
	for attempt := -1; attempt < 200; attempt++ {
		for _, r := range []float64{0, 0.25, 0.5, 0.9999} {
			d := p.Delay(attempt, func() float64 { return r })
			if d < p.Min || d > p.Max {
				t.Fatalf("Delay(%d, %v) = %v outside [%v, %v]", attempt, r, d, p.Min, p.Max)
			}
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		policy  Exponential
		wantErr string
	}{
		{"default", Default(), ""},
		{"zero base", Exponential{Base: 0, Max: time.Hour, Jitter: None}, "Backoff.Base (0s) must be positive"},
		{"negative min", Exponential{Base: time.Second, Min: -1, Max: time.Hour, Jitter: None}, "Backoff.Min (-1ns) must not be negative"},
		{"max above 12h", Exponential{Base: time.Second, Max: 13 * time.Hour, Jitter: None}, "Backoff.Max (13h0m0s) must be between 1s and 12h (SQS's longest visibility timeout)"},
		{"min above max", Exponential{Base: time.Second, Min: 2 * time.Hour, Max: time.Hour, Jitter: None}, "Backoff.Min (2h0m0s) must not exceed Backoff.Max (1h0m0s)"},
		{"bad jitter", Exponential{Base: time.Second, Max: time.Hour, Jitter: "some"}, `Backoff.Jitter: unknown jitter "some" (want none, full or equal)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.policy.Validate()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.wantErr {
				t.Fatalf("Validate() = %q, want %q", got, tt.wantErr)
			}
		})
	}
}
