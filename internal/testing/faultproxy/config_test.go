package faultproxy

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	ok := Rule{Operations: []string{"ReceiveMessage"}, Fault: ServerError, Rate: 0.1}
	with := func(f func(*Rule)) Config {
		r := ok
		f(&r)
		return Config{Rules: []Rule{ok, r}}
	}
	tests := []struct {
		name    string
		cfg     Config
		wantErr string // "" means valid
	}{
		{"no rules", Config{}, ""},
		{"valid", with(func(r *Rule) {}), ""},
		{"every operation and the wildcard", with(func(r *Rule) { r.Operations = append(append([]string{}, Operations...), AnyOperation) }), ""},
		{"rate 0", with(func(r *Rule) { r.Rate = 0 }), ""},
		{"rate 1", with(func(r *Rule) { r.Rate = 1 }), ""},
		{"rate above 1", with(func(r *Rule) { r.Rate = 1.5 }), "rules[1].Rate (1.5) must be between 0 and 1"},
		{"negative rate", with(func(r *Rule) { r.Rate = -0.1 }), "rules[1].Rate (-0.1) must be between 0 and 1"},
		{"NaN rate", with(func(r *Rule) { r.Rate = math.NaN() }), "rules[1].Rate (NaN) must be between 0 and 1"},
		{"no operations", with(func(r *Rule) { r.Operations = nil }), "rules[1].Operations is empty"},
		{"unknown operation", with(func(r *Rule) { r.Operations = []string{"ReceiveMessage", "RecieveMessage"} }), `rules[1].Operations: unknown operation "RecieveMessage"`},
		{"operation not faultable", with(func(r *Rule) { r.Operations = []string{"CreateQueue"} }), `unknown operation "CreateQueue"`},
		{"unknown fault", with(func(r *Rule) { r.Fault = "Explode" }), `rules[1].Fault ("Explode") must be one of ServerError, Throttle, Latency, DropBefore, DropAfter, Stall`},
		{"no fault", with(func(r *Rule) { r.Fault = "" }), `rules[1].Fault ("") must be one of`},
		{"latency", with(func(r *Rule) { r.Fault, r.Latency = Latency, time.Second }), ""},
		{"negative latency", with(func(r *Rule) { r.Fault, r.Latency = Latency, -time.Second }), "rules[1].Latency (-1s) must not be negative"},
		{"latency missing", with(func(r *Rule) { r.Fault = Latency }), "rules[1].Latency must be set for a Latency fault"},
		{"latency too long", with(func(r *Rule) { r.Fault, r.Latency = Latency, time.Hour }), "rules[1].Latency (1h0m0s) must be at most 10m0s"},
		{"latency on another fault", with(func(r *Rule) { r.Latency = time.Second }), "rules[1].Latency (1s) applies only to Latency faults, not ServerError"},
		{"throttle code", with(func(r *Rule) { r.Fault, r.ThrottleCode = Throttle, RequestThrottled }), ""},
		{"unknown throttle code", with(func(r *Rule) { r.Fault, r.ThrottleCode = Throttle, "SlowDown" }), `rules[1].ThrottleCode ("SlowDown") must be ThrottlingException or RequestThrottled`},
		{"throttle code on another fault", with(func(r *Rule) { r.ThrottleCode = ThrottlingException }), "rules[1].ThrottleCode (\"ThrottlingException\") applies only to Throttle faults"},
		{"window", with(func(r *Rule) { r.From, r.Until = time.Second, 2*time.Second }), ""},
		{"negative from", with(func(r *Rule) { r.From = -time.Second }), "rules[1].From (-1s) must not be negative"},
		{"negative until", with(func(r *Rule) { r.Until = -time.Second }), "rules[1].Until (-1s) must not be negative"},
		{"until before from", with(func(r *Rule) { r.From, r.Until = 2*time.Second, time.Second }), "rules[1].Until (1s) must be later than From (2s)"},
		{"stall", with(func(r *Rule) { r.Fault, r.Until = Stall, 30*time.Second }), ""},
		{"stall without until", with(func(r *Rule) { r.Fault = Stall }), "rules[1].Until must be set for a Stall fault"},
		{"negative after", with(func(r *Rule) { r.After = -1 }), "rules[1].After (-1) must not be negative"},
		{"negative for", with(func(r *Rule) { r.For = -1 }), "rules[1].For (-1) must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("Validate() = nil, want an error containing %q", tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("Validate() = %q, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestNewRefuses(t *testing.T) {
	good := Config{Rules: []Rule{{Operations: []string{"*"}, Fault: ServerError, Rate: 1}}}
	tests := []struct {
		name     string
		upstream string
		cfg      Config
		wantErr  string
	}{
		{"bad rule", "http://127.0.0.1:9324", Config{Rules: []Rule{{Operations: []string{"*"}, Fault: ServerError, Rate: 2}}}, "rules[0].Rate (2)"},
		{"not loopback", "http://10.0.0.1:9324", good, "loopback"},
		{"a real endpoint", "https://sqs.us-east-1.amazonaws.com", good, "loopback"},
		{"no scheme", "127.0.0.1:9324", good, `upstream "127.0.0.1:9324"`},
		{"host only", "//127.0.0.1:9324", good, "scheme must be http or https"},
		{"ftp", "ftp://127.0.0.1:9324", good, "scheme must be http or https"},
		{"path", "http://127.0.0.1:9324/queue", good, "no path"},
		{"credentials", "http://u:p@127.0.0.1:9324", good, "credentials"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(tt.upstream, tt.cfg)
			if err == nil {
				p.Close()
				t.Fatalf("New(%q) = nil error, want one containing %q", tt.upstream, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("New(%q) = %q, want it to contain %q", tt.upstream, err, tt.wantErr)
			}
		})
	}
	for _, upstream := range []string{"http://127.0.0.1:9324", "http://localhost:9324/", "http://[::1]:9324", "https://127.0.0.2:443"} {
		p, err := New(upstream, good)
		if err != nil {
			t.Errorf("New(%q) = %v, want nil", upstream, err)
			continue
		}
		p.Close()
	}
}
