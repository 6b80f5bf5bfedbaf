package worker

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/watchbot/watchbot/internal/sqsspec"
)

// Directive is a worker's decision for a message, which overrides how its run ended: written
// as JSON to WATCHBOT_RESULT_FILE, a batch's result line, or an HTTP worker's answer.
type Directive struct {
	Action       string   `json:"action"`
	DelaySeconds *float64 `json:"delaySeconds,omitempty"`
	Reason       string   `json:"reason,omitempty"`
	// Pause asks that no job start for this long (a Go duration, "30s"), across the fleet
	// with --limits-table (docs/limits.md). Without an action the message waits in place,
	// leased, and runs again once the pause ends.
	Pause string `json:"pause,omitempty"`
	// PauseFor is Pause read, by validate (or an HTTP worker's Retry-After).
	PauseFor time.Duration `json:"-"`
}

// maxDirectiveSize bounds how much of a result file is read.
const maxDirectiveSize = 64 * 1024

// readDirective reads the result file, and says whether there was one. A missing or empty
// file is no directive; a malformed one is an error that the caller logs before following
// the exit code.
func readDirective(path string) (d *Directive, found bool, err error) {
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, true, fmt.Errorf("read result file: %w", err)
	}
	if len(data) == 0 {
		return nil, true, nil
	}
	if len(data) > maxDirectiveSize {
		return nil, true, fmt.Errorf("result file is %d bytes, more than %d", len(data), maxDirectiveSize)
	}
	d = new(Directive)
	if err := json.Unmarshal(data, d); err != nil {
		return nil, true, fmt.Errorf("result file is not a JSON object: %w", err)
	}
	if err := d.validate(); err != nil {
		return nil, true, fmt.Errorf("result file: %w", err)
	}
	return d, true, nil
}

// validate checks the action, the delay and the pause.
func (d *Directive) validate() error {
	if d.Pause != "" {
		p, err := time.ParseDuration(d.Pause)
		if err != nil || p <= 0 || p > sqsspec.MaxInFlight {
			return fmt.Errorf("pause %q must be a duration between 1ms and 12h, such as \"30s\"", d.Pause)
		}
		d.PauseFor = p
	}
	switch d.Action {
	case "":
		if d.PauseFor == 0 {
			return fmt.Errorf("unknown action %q (want ack, retry or dead-letter)", d.Action)
		}
	case "ack", "dead-letter":
	case "retry":
		if most := sqsspec.MaxInFlight.Seconds(); d.DelaySeconds != nil && (*d.DelaySeconds < 0 || *d.DelaySeconds > most) {
			return fmt.Errorf("delaySeconds %v must be between 0 and %v", *d.DelaySeconds, most)
		}
	default:
		return fmt.Errorf("unknown action %q (want ack, retry or dead-letter)", d.Action)
	}
	return nil
}
