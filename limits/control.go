package limits

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Control is how an operator steers the fleet (`watchbot fleet`): the pauses in force and the
// settings every task applies live. It lives in the fleet row, which every task reads every
// PollInterval, so a change reaches the fleet within a second and a round trip; each change
// raises Version, which each task's record says it applies.
type Control struct {
	// Version counts the changes; 0: none was ever made.
	Version int64 `json:"version"`
	// Pauses maps a queue's name ("" for every queue) to when its pause ends; a zero end
	// holds until a resume.
	Pauses map[string]time.Time `json:"pauses,omitempty"`
	// Settings are the settings the tasks apply over their flags.
	Settings Settings `json:"settings"`
	// Change is the latest change: what it was, why and who asked.
	Change Change `json:"change"`
}

// Settings are the listen settings a task takes live. An unset field leaves the task's own
// flag in force.
type Settings struct {
	// Concurrency is how many jobs each task runs at once, at most its own --concurrency;
	// 0: unset.
	Concurrency int `json:"concurrency,omitempty"`
	// RateLimit is --rate-limit in starts a second (0: none); nil: unset.
	RateLimit *float64 `json:"rateLimit,omitempty"`
	// FleetConcurrency is --fleet-concurrency (0: none); nil: unset.
	FleetConcurrency *int `json:"fleetConcurrency,omitempty"`
	// BatchSize is --batch-size of the tasks in batch mode; 0: unset.
	BatchSize int `json:"batchSize,omitempty"`
}

// Change says what the latest change of the control was, why, who asked and when.
type Change struct {
	// What is the command: "pause", "resume" or "set".
	What string `json:"what"`
	// Queue is the queue a pause or resume named; "" for every queue.
	Queue  string    `json:"queue,omitempty"`
	Reason string    `json:"reason,omitempty"`
	By     string    `json:"by,omitempty"`
	At     time.Time `json:"at"`
}

// The commands a Change records.
const (
	ChangePause  = "pause"
	ChangeResume = "resume"
	ChangeSet    = "set"
)

// PauseOf returns when the pause of the queue named queue ends at now, and whether one
// holds: a pause of every queue or of that one, whichever ends later. A zero end holds until
// a resume.
func (c Control) PauseOf(queue string, now time.Time) (until time.Time, paused bool) {
	for _, q := range []string{"", queue} {
		end, ok := c.Pauses[q]
		switch {
		case !ok || !end.IsZero() && !now.Before(end):
		case end.IsZero():
			return time.Time{}, true
		default:
			until, paused = later(until, end), true
		}
	}
	return until, paused
}

// Pause returns c with the queue named queue ("" every queue) paused until until (zero: until
// a resume).
func (c Control) Pause(queue string, until time.Time) Control {
	c.Pauses = maps.Clone(c.Pauses)
	if c.Pauses == nil {
		c.Pauses = map[string]time.Time{}
	}
	c.Pauses[queue] = until
	return c
}

// Resume returns c without the pause of the queue named queue, or without any pause when
// queue is "".
func (c Control) Resume(queue string) Control {
	c.Pauses = maps.Clone(c.Pauses)
	if queue == "" {
		c.Pauses = nil
	}
	delete(c.Pauses, queue)
	return c
}

// Over returns s with the fields set in o replacing its own.
func (s Settings) Over(o Settings) Settings {
	if o.Concurrency > 0 {
		s.Concurrency = o.Concurrency
	}
	if o.RateLimit != nil {
		s.RateLimit = o.RateLimit
	}
	if o.FleetConcurrency != nil {
		s.FleetConcurrency = o.FleetConcurrency
	}
	if o.BatchSize > 0 {
		s.BatchSize = o.BatchSize
	}
	return s
}

// Empty reports whether s sets nothing.
func (s Settings) Empty() bool { return s == Settings{} }

// Flags returns the settings s sets as listen's flags.
func (s Settings) Flags() string {
	var b []string
	if s.Concurrency > 0 {
		b = append(b, "--concurrency "+strconv.Itoa(s.Concurrency))
	}
	if s.RateLimit != nil {
		b = append(b, "--rate-limit "+FormatRate(*s.RateLimit))
	}
	if s.FleetConcurrency != nil {
		b = append(b, "--fleet-concurrency "+strconv.Itoa(*s.FleetConcurrency))
	}
	if s.BatchSize > 0 {
		b = append(b, "--batch-size "+strconv.Itoa(s.BatchSize))
	}
	return strings.Join(b, " ")
}

// FormatRate writes a rate in starts a second as --rate-limit takes it; 0 is none.
func FormatRate(r float64) string {
	if r == 0 {
		return "0"
	}
	return strconv.FormatFloat(r, 'g', -1, 64) + "/s"
}

// MaxBatchSize is the largest --batch-size a fleet may be set to, as listen takes it.
const MaxBatchSize = 100

// Check names the first setting of s that is out of range.
func (s Settings) Check() error {
	switch {
	case s.Concurrency < 0:
		return fmt.Errorf("--concurrency (%d) must be 1 or more", s.Concurrency)
	case s.RateLimit != nil && (math.IsNaN(*s.RateLimit) || *s.RateLimit < 0 || *s.RateLimit > MaxRate):
		return fmt.Errorf("--rate-limit (%v) must be a rate between 0 and %d/s", *s.RateLimit, MaxRate)
	case s.FleetConcurrency != nil && *s.FleetConcurrency < 0:
		return fmt.Errorf("--fleet-concurrency (%d) must be zero or more", *s.FleetConcurrency)
	case s.BatchSize < 0 || s.BatchSize > MaxBatchSize:
		return fmt.Errorf("--batch-size (%d) must be between 1 and %d", s.BatchSize, MaxBatchSize)
	}
	return nil
}

// Refusals lists, one per setting, the settings of s that a live task cannot take without a
// restart: a --concurrency above the one it started with (its worker slots, HTTP connections
// or Lambda runtimes are made at its start), and a --batch-size that would move it into or
// out of batch mode (its worker reads one message or a batch). Each names the tasks. None:
// nil.
func Refusals(s Settings, tasks []TaskRecord) []string {
	var over, toBatch, fromBatch []string
	for _, t := range tasks {
		if s.Concurrency > t.Concurrency {
			over = append(over, fmt.Sprintf("%s (--concurrency %d)", t.Task, t.Concurrency))
		}
		if s.BatchSize > 1 && t.BatchSize == 1 {
			toBatch = append(toBatch, t.Task)
		}
		if s.BatchSize == 1 && t.BatchSize > 1 {
			fromBatch = append(fromBatch, t.Task)
		}
	}
	var out []string
	if len(over) > 0 {
		out = append(out, fmt.Sprintf("--concurrency %d: above what these tasks started with, which they cannot raise live (restart them with a higher --concurrency): %s",
			s.Concurrency, strings.Join(over, ", ")))
	}
	if len(toBatch) > 0 {
		out = append(out, fmt.Sprintf("--batch-size %d: these tasks run one message per run, and their worker reads one message, not a batch (restart them in batch mode): %s",
			s.BatchSize, strings.Join(toBatch, ", ")))
	}
	if len(fromBatch) > 0 {
		out = append(out, "--batch-size 1: these tasks run in batch mode, and their worker reads a batch (restart them with --batch-size 1): "+strings.Join(fromBatch, ", "))
	}
	return out
}

// TaskRecord is what a task sharing the table records of itself every PollInterval, for
// `watchbot fleet` to see who applies what.
type TaskRecord struct {
	// Task is its id; Host its host name; Queues the names of the queues it serves.
	Task   string   `json:"task"`
	Host   string   `json:"host"`
	Queues []string `json:"queues"`
	// Paused lists its queues that a fleet pause holds.
	Paused []string `json:"paused,omitempty"`
	// Version is the control's Version the task applies.
	Version int64 `json:"version"`
	// Running is its jobs running now.
	Running int `json:"running"`
	// Concurrency and BatchSize are the task's --concurrency and --batch-size as it started:
	// the most it may run at once, and whether it runs batches.
	Concurrency int `json:"concurrency"`
	BatchSize   int `json:"batchSize"`
	// Applied is what it runs by now: its flags with the fleet's settings over them, a
	// --concurrency held to its own.
	Applied Settings `json:"applied"`
	// LastSeen is when it wrote the record; it counts as live until LiveUntil, one lease
	// later.
	LastSeen  time.Time `json:"lastSeen"`
	LiveUntil time.Time `json:"liveUntil"`
}

// AllPaused reports whether a fleet pause holds every queue the task serves.
func (r TaskRecord) AllPaused() bool {
	return len(r.Paused) > 0 && len(r.Paused) == len(r.Queues)
}

// Member is what a task tells the fleet of itself beyond its id: where it runs, what it
// serves, and what its flags were at its start.
type Member struct {
	// Host is the host's name.
	Host string
	// Queues are the names of the queues the task serves.
	Queues []string
	// Concurrency is its --concurrency: the most jobs a fleet setting may let it run.
	Concurrency int
	// BatchSize is its --batch-size: above 1, it runs batches.
	BatchSize int
}

// pausedQueues are the queues of m that c pauses at now, in m's order.
func (m Member) pausedQueues(c Control, now time.Time) []string {
	var out []string
	for _, q := range m.Queues {
		if _, paused := c.PauseOf(q, now); paused {
			out = append(out, q)
		}
	}
	return slices.Clip(out)
}
