package limits

import (
	"strings"
	"testing"
	"time"
)

func TestParseRate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want float64
		err  string
	}{
		{"20/s", 20, ""},
		{"300/m", 5, ""},
		{"2.5/s", 2.5, ""},
		{"30/m", 0.5, ""},
		{" 20 / s ", 20, ""},
		{"0", 0, ""},
		{"20", 0, "want N/s or N/m"},
		{"20/h", 0, "the unit after / must be s"},
		{"-1/s", 0, "not a positive number"},
		{"0/s", 0, "not a positive number"},
		{"abc/s", 0, "not a positive number"},
		{"NaN/s", 0, "not a positive number"},
		{"Inf/s", 0, "not a positive number"},
		{"2000000/s", 0, "at most 1000000/s"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseRate(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), tc.in) {
					t.Fatalf("ParseRate(%q) = %v, %v; want an error naming %q and saying %q", tc.in, got, err, tc.in, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseRate(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestRateWindows(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		rate     float64
		capacity int
		window   time.Duration
	}{
		{20, 20, time.Second},
		{20.5, 20, time.Second},
		{5, 5, time.Second},
		{1, 1, time.Second},
		{0.5, 1, 2 * time.Second},
		{1.0 / 60, 1, time.Minute},
	} {
		if c, w := RateCapacity(tc.rate), RateWindow(tc.rate); c != tc.capacity || w != tc.window {
			t.Errorf("rate %v: %d starts in %v, want %d in %v", tc.rate, c, w, tc.capacity, tc.window)
		}
	}
}

func TestValidateNamesTheFlag(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		edit func(*Config)
		err  string
	}{
		{"defaults", func(*Config) {}, ""},
		{"every limit, a table", func(c *Config) {
			c.Rate, c.Concurrency, c.RatePerKey, c.ConcurrencyPerKey, c.Table, c.Task = 20, 4, 1, 1, "limits", "task-1"
		}, ""},
		{"a negative rate", func(c *Config) { c.Rate = -1 }, "--rate-limit"},
		{"a rate too high", func(c *Config) { c.RatePerKey = 2e6 }, "--rate-limit-per-key"},
		{"a negative concurrency", func(c *Config) { c.Concurrency = -1 }, "--fleet-concurrency"},
		{"a negative concurrency per key", func(c *Config) { c.ConcurrencyPerKey = -2 }, "--concurrency-per-key"},
		{"a table without a task", func(c *Config) { c.Table = "limits" }, "--limits-table"},
		{"a short lease", func(c *Config) { c.Lease = time.Second }, "lease"},
		{"no pause", func(c *Config) { c.MaxPause = 0 }, "--max-pause"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.edit(&c)
			err := c.Validate()
			if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("Validate() = %v, want an error naming %q", err, tc.err)
			}
		})
	}
}
