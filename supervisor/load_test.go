package supervisor

import (
	"testing"
	"testing/synctest"
	"time"
)

func TestLoadBusySlotsIsTheAverageOverTheWindow(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		l := NewLoad()
		l.set(time.Now(), loadState{slots: 8, limit: 8, running: 2, active: true})
		time.Sleep(30 * time.Second)
		l.set(time.Now(), loadState{slots: 8, limit: 8, running: 4, active: true, braking: true})
		time.Sleep(30 * time.Second)
		if got := l.BusySlots(); got != 3 {
			t.Errorf("BusySlots = %v, want 3 (2 for 30 s, then 4 for 30 s)", got)
		}
		// A new window: 4 slots busy throughout, until the loop ends.
		time.Sleep(15 * time.Second)
		l.set(time.Now(), loadState{slots: 8, limit: 1})
		time.Sleep(45 * time.Second)
		if got := l.BusySlots(); got != 1 {
			t.Errorf("BusySlots = %v, want 1 (4 for 15 s of 60)", got)
		}
		if l.Slots() != 8 || l.Limit() != 1 || l.Active() {
			t.Errorf("Slots %d, Limit %d, Active %v; want 8, 1, false", l.Slots(), l.Limit(), l.Active())
		}
		// Braking from 30 s to 75 s: 30 s in the first window (read above), 15 s since.
		if got := l.BrakingSeconds(); got != 45 {
			t.Errorf("BrakingSeconds = %v, want 45", got)
		}
		select {
		case <-l.Changed():
		default:
			t.Error("Changed did not fire when Active changed")
		}
	})
}

// TestLoadOldestRun: the age of the longest run under way, 0 once none runs; a run that ends
// twice (its worker, then its settle) is forgotten once.
func TestLoadOldestRun(t *testing.T) {
	t.Parallel()
	l := NewLoad()
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	first, second := &job{}, &job{}
	l.runStarted(first, start)
	l.runStarted(second, start.Add(time.Hour))
	if got := l.OldestRun(start.Add(13 * time.Hour)); got != 13*time.Hour {
		t.Errorf("oldest = %v, want 13h", got)
	}
	l.runEnded(first)
	l.runEnded(first)
	if got := l.OldestRun(start.Add(13 * time.Hour)); got != 12*time.Hour {
		t.Errorf("oldest after the first ended = %v, want 12h", got)
	}
	l.runEnded(second)
	if got := l.OldestRun(start.Add(13 * time.Hour)); got != 0 {
		t.Errorf("oldest with none running = %v, want 0", got)
	}
}
