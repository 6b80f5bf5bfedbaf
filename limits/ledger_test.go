package limits

import (
	"testing"
	"time"
)

func TestLedgerCountsHoldsUntilTheyLapse(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	l := Ledger{Version: 3, Holds: map[string]Hold{
		"a": {N: 2, Until: t0.Add(time.Second)},
		"b": {N: 5, Until: t0.Add(2 * time.Second)},
	}}
	for _, tc := range []struct {
		at   time.Duration
		used int
		next time.Duration
	}{
		{0, 7, time.Second},
		{999 * time.Millisecond, 7, time.Second},
		{time.Second, 5, 2 * time.Second},
		{2 * time.Second, 0, -1},
	} {
		now := t0.Add(tc.at)
		want := time.Time{}
		if tc.next >= 0 {
			want = t0.Add(tc.next)
		}
		if got := l.Used(now); got != tc.used {
			t.Errorf("at %v: %d used, want %d", tc.at, got, tc.used)
		}
		if got := l.Next(now); !got.Equal(want) {
			t.Errorf("at %v: next lapse %v, want %v", tc.at, got, want)
		}
	}
	next := l.With(t0.Add(1500*time.Millisecond), "c", Hold{N: 1, Until: t0.Add(3 * time.Second)})
	if next.Version != 4 || len(next.Holds) != 2 || next.Holds["c"].N != 1 || l.Holds["c"].N != 0 {
		t.Errorf("With: %+v (from %+v): want version 4, a pruned, c added, the original untouched", next, l)
	}
	if gone := next.With(t0, "c", Hold{}); len(gone.Holds) != 1 {
		t.Errorf("a hold of 0 removes the holder: %+v", gone)
	}
}

func TestSettledChunks(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	grant := Hold{N: 10, Until: t0.Add(time.Second + 50*time.Millisecond)}
	for _, tc := range []struct {
		name    string
		c       chunk
		want    Hold
		removed bool
	}{
		{"unused: the hold goes", chunk{name: "x", n: 10, left: 10}, Hold{}, true},
		{"used at once: a window from the last use", chunk{name: "x", n: 10, left: 0, lastUse: t0.Add(2 * time.Millisecond)},
			Hold{N: 10, Until: t0.Add(time.Second + spawnSlack + 2*time.Millisecond)}, false},
		{"partly used: the used tokens only", chunk{name: "x", n: 10, left: 7, lastUse: t0.Add(10 * time.Millisecond)},
			Hold{N: 3, Until: t0.Add(time.Second + spawnSlack + 10*time.Millisecond)}, false},
		{"never later than granted", chunk{name: "x", n: 10, left: 0, lastUse: t0.Add(200 * time.Millisecond)},
			grant, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next := Ledger{Holds: map[string]Hold{"x": grant, "other": {N: 1, Until: t0.Add(time.Hour)}}}
			changed := settleHolds(next, []chunk{tc.c, {name: "gone", n: 1}}, time.Second)
			h, ok := next.Holds["x"]
			switch {
			case tc.removed && ok:
				t.Errorf("hold %+v kept, want it gone", h)
			case !tc.removed && h != tc.want:
				t.Errorf("hold %+v, want %+v", h, tc.want)
			case changed != (tc.removed || h != grant):
				t.Errorf("changed = %v", changed)
			case next.Holds["other"].N != 1 || len(next.Holds) > 2:
				t.Errorf("other holds touched: %+v", next.Holds)
			}
		})
	}
}
