package supervisor

import (
	"testing"
	"time"
)

// Receives take the quick lease only on a standard queue, before the quick leases end, and
// when it is shorter than the receive lease.
func TestQuickLease(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name    string
		fifo    bool
		receive time.Duration // --receive-visibility
		until   time.Time
		want    time.Duration
	}{
		{"after a failed receive", false, 0, now.Add(time.Second), quickLease},
		{"no failed receive lately", false, 0, now, 0},
		{"never a failed receive", false, 0, time.Time{}, 0},
		{"FIFO: attempt ids bring lost answers back", true, 0, now.Add(time.Second), 0},
		{"a receive lease no longer than the quick one", false, quickLease, now.Add(time.Second), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.VisibilityTimeout = time.Minute
			cfg.ReceiveVisibility = tt.receive
			s := &Supervisor{cfg: cfg, fifo: tt.fifo}
			if got := s.quickLease(tt.until, now); got != tt.want {
				t.Errorf("quickLease = %v, want %v", got, tt.want)
			}
		})
	}
}
