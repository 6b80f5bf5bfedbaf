package limits

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Intervals of the coordination through the table; docs/limits.md explains what each costs.
const (
	// PollInterval is how often Run reads the fleet row for a pause another task asked for:
	// every task sees a fleet pause within this interval (plus one DynamoDB round trip).
	PollInterval = time.Second
	// HeartbeatInterval is how often Run records in the fleet row that this task is alive.
	HeartbeatInterval = 10 * time.Second
	// LiveFor is how long a heartbeat keeps a task counted as live: a task that stops
	// beating (it died) stops counting toward the fallback share after this.
	LiveFor = 3 * HeartbeatInterval
	// FallbackAfter is how long DynamoDB must fail without a single call succeeding before
	// a task falls back to its share of each limit. Until then it starts jobs only with the
	// tokens and slots it already holds, which is always safe.
	FallbackAfter = 2 * time.Second
	// FallbackLogInterval is how often a task in fallback says so in its log.
	FallbackLogInterval = 30 * time.Second
)

// Config is what the limits are and where they are kept. The zero value limits nothing; a
// Limiter without limits still carries pauses.
type Config struct {
	// Rate is the starts per second the fleet (or, without Table, this task) may make; 0:
	// none. No window of RateWindow holds more than RateCapacity starts, and an idle fleet
	// may start RateCapacity at once: a burst of one second's worth.
	Rate float64
	// Concurrency is how many jobs may run at once across the fleet (or this task); 0: none.
	Concurrency int
	// RatePerKey is Rate for each key (a tenant) on its own; 0: none.
	RatePerKey float64
	// ConcurrencyPerKey is Concurrency for each key on its own; 0: none.
	ConcurrencyPerKey int
	// Table is the DynamoDB table the fleet shares (`--limits-table`); "": the limits hold
	// for this task alone, in process.
	Table string
	// Task names this task in the table: unique per process (a restarted process takes a
	// new one).
	Task string
	// Lease is how long a concurrency slot stays a task's without renewal: a task that dies
	// frees its slots within one Lease. Run renews every Lease/3.
	Lease time.Duration
	// MaxPause caps a pause a worker asks for (`--max-pause`).
	MaxPause time.Duration
	// Member is what the task records of itself in the table for `watchbot fleet`: its
	// host, its queues and its flags as it started.
	Member Member
}

// DefaultConfig limits nothing, with a 30 s lease and a 15 min cap on pauses.
func DefaultConfig() Config {
	return Config{Lease: 30 * time.Second, MaxPause: 15 * time.Minute}
}

// Validate names the flag of the first setting that is wrong.
func (c Config) Validate() error {
	for _, r := range []struct {
		flag string
		v    float64
	}{{"--rate-limit", c.Rate}, {"--rate-limit-per-key", c.RatePerKey}} {
		if math.IsNaN(r.v) || math.IsInf(r.v, 0) || r.v < 0 {
			return fmt.Errorf("%s (%v) must be a rate of zero or more", r.flag, r.v)
		}
		if r.v > MaxRate {
			return fmt.Errorf("%s (%v/s) must be at most %d/s", r.flag, r.v, MaxRate)
		}
	}
	switch {
	case c.Concurrency < 0:
		return fmt.Errorf("--fleet-concurrency (%d) must be zero or more", c.Concurrency)
	case c.ConcurrencyPerKey < 0:
		return fmt.Errorf("--concurrency-per-key (%d) must be zero or more", c.ConcurrencyPerKey)
	case c.Table != "" && c.Task == "":
		return errors.New("a task id is needed with --limits-table")
	case c.Lease < 3*PollInterval:
		return fmt.Errorf("the slot lease (%v) must be at least %v", c.Lease, 3*PollInterval)
	case c.MaxPause <= 0:
		return fmt.Errorf("--max-pause (%v) must be positive", c.MaxPause)
	}
	return nil
}

// Limited reports whether c sets any limit.
func (c Config) Limited() bool {
	return c.Rate > 0 || c.Concurrency > 0 || c.RatePerKey > 0 || c.ConcurrencyPerKey > 0
}

// MaxRate is the largest rate ParseRate and Validate accept, in starts per second.
const MaxRate = 1_000_000

// ParseRate reads a rate as `--rate-limit` takes it: N/s or N/m (N starts a second or a
// minute; N may have a fraction), or 0 for none. It returns starts per second.
func ParseRate(s string) (float64, error) {
	t := strings.TrimSpace(s)
	if t == "0" {
		return 0, nil
	}
	num, unit, ok := strings.Cut(t, "/")
	if !ok {
		return 0, fmt.Errorf("rate %q: want N/s or N/m, such as 20/s or 300/m", s)
	}
	var per float64
	switch strings.TrimSpace(unit) {
	case "s":
		per = 1
	case "m":
		per = 60
	default:
		return 0, fmt.Errorf("rate %q: the unit after / must be s (a second) or m (a minute)", s)
	}
	n, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || math.IsNaN(n) || math.IsInf(n, 0) || n <= 0 {
		return 0, fmt.Errorf("rate %q: %q is not a positive number of starts", s, num)
	}
	r := n / per
	if r > MaxRate {
		return 0, fmt.Errorf("rate %q: at most %d/s", s, MaxRate)
	}
	return r, nil
}

// RateCapacity is how many starts one window of a rate admits: the whole starts of one
// second's worth (a fraction of a start is dropped: 20.5/s admits 20 a second), and at least
// one.
func RateCapacity(rate float64) int {
	return max(1, int(math.Floor(rate)))
}

// RateWindow is the window over which a rate admits RateCapacity starts: one second, or
// longer for a rate below one a second (30/m admits one start in any 2 s). It is never
// shorter than a second, so that no second holds more than RateCapacity starts.
func RateWindow(rate float64) time.Duration {
	if rate >= 1 {
		return time.Second
	}
	return time.Duration(float64(time.Second) / rate)
}
