package limits

import (
	"context"
	"slices"
	"time"
)

// Use is what the table shows of the fleet's use of its limits at one moment, for `watchbot
// status --limits-table`. The limits themselves are listen's flags, not the table's.
type Use struct {
	// LiveTasks are the tasks whose last beat still counts, sorted.
	LiveTasks []string `json:"liveTasks"`
	// PausedUntil is when the pause a worker asked for ends; nil when none is in force.
	PausedUntil *time.Time `json:"pausedUntil,omitempty"`
	// Control is the operator's control of the fleet (`watchbot fleet`); nil when none was
	// ever set.
	Control *Control `json:"control,omitempty"`
	// Slots are the --fleet-concurrency slots leased now, by task (running, or idle before
	// they go back); SlotsHeld is their sum.
	Slots     map[string]int `json:"slots"`
	SlotsHeld int            `json:"slotsHeld"`
	// TokensHeld are the --rate-limit tokens whose holds still count: the starts of about
	// the last second, and chunks fetched for the next ones.
	TokensHeld int `json:"tokensHeld"`
}

// ReadUse reads the fleet row and the ledgers of the limits over all keys at now. The
// per-key ledgers are not listed: the table is read by key, never scanned.
func ReadUse(ctx context.Context, store Store, now time.Time) (Use, error) {
	f, err := store.Fleet(ctx)
	if err != nil {
		return Use{}, err
	}
	u := Use{LiveTasks: []string{}, Slots: map[string]int{}}
	for task, until := range f.Tasks {
		if until.After(now) {
			u.LiveTasks = append(u.LiveTasks, task)
		}
	}
	slices.Sort(u.LiveTasks)
	if f.Control.Version > 0 {
		u.Control = &f.Control
	}
	if f.PauseUntil.After(now) {
		at := f.PauseUntil
		u.PausedUntil = &at
	}
	slots, err := store.Ledger(ctx, ledgerConcurrency)
	if err != nil {
		return Use{}, err
	}
	for task, h := range slots.Holds {
		if h.Until.After(now) && h.N > 0 {
			u.Slots[task] = h.N
			u.SlotsHeld += h.N
		}
	}
	tokens, err := store.Ledger(ctx, ledgerRate)
	if err != nil {
		return Use{}, err
	}
	u.TokensHeld = tokens.Used(now)
	return u, nil
}
