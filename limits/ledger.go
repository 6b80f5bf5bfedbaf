package limits

import (
	"maps"
	"time"
)

// A Ledger is what the table holds for one limit: who holds how many units of it, and until
// when. A unit is a start (a token) or a running job (a slot). A hold counts until its
// Until; then it is as if it were gone, whether or not a task has removed it yet. Every
// change is a whole-ledger write conditional on the version read, so two tasks never both
// take the last unit.
type Ledger struct {
	// Version is the count of writes; 0: the table has no ledger of this name yet.
	Version int64
	// Holds maps a holder to its hold: a task id for slots, a task id and a sequence number
	// for a chunk of tokens.
	Holds map[string]Hold
}

// Hold is a number of units held until a time.
type Hold struct {
	N     int
	Until time.Time
}

// Used is the units held at now.
func (l Ledger) Used(now time.Time) int {
	n := 0
	for _, h := range l.Holds {
		if h.Until.After(now) {
			n += h.N
		}
	}
	return n
}

// Next is when the earliest hold that counts at now stops counting; zero when none counts.
func (l Ledger) Next(now time.Time) time.Time {
	var next time.Time
	for _, h := range l.Holds {
		if h.Until.After(now) && (next.IsZero() || h.Until.Before(next)) {
			next = h.Until
		}
	}
	return next
}

// With returns a copy of l without the holds that no longer count at now, and with holder's
// hold set to h (removed when h.N is 0), for writing as the next version.
func (l Ledger) With(now time.Time, holder string, h Hold) Ledger {
	out := l.successor(now)
	if h.N > 0 {
		out.Holds[holder] = h
	} else {
		delete(out.Holds, holder)
	}
	return out
}

// successor returns a copy of l as its next version, without the holds that no longer count
// at now.
func (l Ledger) successor(now time.Time) Ledger {
	out := Ledger{Version: l.Version + 1, Holds: make(map[string]Hold, len(l.Holds)+1)}
	for k, v := range l.Holds {
		if v.Until.After(now) {
			out.Holds[k] = v
		}
	}
	return out
}

// Clone returns a copy of l that shares nothing with it.
func (l Ledger) Clone() Ledger {
	return Ledger{Version: l.Version, Holds: maps.Clone(l.Holds)}
}
