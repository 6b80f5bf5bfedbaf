package supervisor

import (
	"testing"
	"testing/synctest"
	"time"
)

func TestLoadBusySlotsIsTheAverageOverTheWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLoad()
		l.set(time.Now(), 8, 2, true)
		time.Sleep(30 * time.Second)
		l.set(time.Now(), 8, 4, true)
		time.Sleep(30 * time.Second)
		if got := l.BusySlots(); got != 3 {
			t.Errorf("BusySlots = %v, want 3 (2 for 30 s, then 4 for 30 s)", got)
		}
		// A new window: 4 slots busy throughout, until the loop ends.
		time.Sleep(15 * time.Second)
		l.set(time.Now(), 8, 0, false)
		time.Sleep(45 * time.Second)
		if got := l.BusySlots(); got != 1 {
			t.Errorf("BusySlots = %v, want 1 (4 for 15 s of 60)", got)
		}
		if l.Slots() != 8 || l.Active() {
			t.Errorf("Slots %d, Active %v; want 8, false", l.Slots(), l.Active())
		}
		select {
		case <-l.Changed():
		default:
			t.Error("Changed did not fire when Active changed")
		}
	})
}
