package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// The in-process CLI tests here do not run in parallel: urfave/cli shares a global help flag.

func TestListenLimitFlags(t *testing.T) {
	base := []string{"--queue-url", "https://sqs.us-east-1.amazonaws.com/1/q"}
	cfg, _, err := parseListen(t, append(slices.Clone(base), "--rate-limit", "300/m", "--fleet-concurrency", "4", "--limit-key", "attr:tenant",
		"--rate-limit-per-key", "2/s", "--concurrency-per-key", "1", "--limits-table", "arn:aws:dynamodb:eu-west-1:123456789012:table/limits",
		"--limit-wait", "10s", "--max-pause", "1m", "--", "true")...)
	if err != nil {
		t.Fatal(err)
	}
	l := cfg.Limits
	if l.Fleet.Rate != 5 || l.Fleet.Concurrency != 4 || l.Key != "attr:tenant" || l.Fleet.RatePerKey != 2 || l.Fleet.ConcurrencyPerKey != 1 ||
		l.Fleet.Table != "limits" || l.Fleet.Task == "" || l.Wait != 10*time.Second || l.Fleet.MaxPause != time.Minute {
		t.Errorf("Limits = %+v", l)
	}
	def, _, err := parseListen(t, append(slices.Clone(base), "--", "true")...)
	if err != nil {
		t.Fatal(err)
	}
	if d := def.Limits; d.Fleet.Rate != 0 || d.Fleet.Concurrency != 0 || d.Fleet.Table != "" || d.Wait != 30*time.Second || d.Fleet.MaxPause != 15*time.Minute {
		t.Errorf("default Limits = %+v, want none, --limit-wait 30s, --max-pause 15m", d)
	}
}

func TestListenLimitBadFlagValues(t *testing.T) {
	base := []string{"--queue-url", "https://sqs.us-east-1.amazonaws.com/1/q"}
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"a rate without a unit", []string{"--rate-limit", "20"}, `--rate-limit ("20") must be a rate such as 20/s or 300/m`},
		{"a rate per hour", []string{"--rate-limit-per-key", "5/h", "--limit-key", "group"}, `--rate-limit-per-key ("5/h") must be a rate`},
		{"a negative fleet concurrency", []string{"--fleet-concurrency", "-1"}, "--fleet-concurrency (-1) must not be negative"},
		{"a per-key limit without a key", []string{"--concurrency-per-key", "1"}, "--limit-key: is required with --rate-limit-per-key or --concurrency-per-key"},
		{"a key without a per-key limit", []string{"--limit-key", "group"}, `--limit-key ("group") needs --rate-limit-per-key or --concurrency-per-key`},
		{"a bad key", []string{"--limit-key", "body", "--concurrency-per-key", "1"}, `--limit-key ("body") must be attr:NAME`},
		{"per key in batch mode", []string{"--limit-key", "group", "--concurrency-per-key", "1", "--batch-size", "5"}, "cannot be combined with --batch-size above 1"},
		{"no pause at all", []string{"--max-pause", "0s"}, "--max-pause (0s) must be between 1s and 12h"},
		{"a bad table", []string{"--limits-table", "a b"}, "--limits-table: "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, nil, append(append(append([]string{"listen"}, base...), tt.args...), "--", "true")...)
			if code != 2 || !strings.Contains(stderr, tt.want) || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
				t.Errorf("exit %d, stderr %q; want 2 and one line containing %q", code, stderr, tt.want)
			}
		})
	}
}
