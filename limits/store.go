package limits

import (
	"context"
	"errors"
	"maps"
	"sync"
	"time"
)

// Store keeps the fleet's ledgers and its fleet row: where Run reads and writes what the
// tasks sharing the limits hold. NewDynamoStore keeps them in a DynamoDB table; New keeps them
// in process when given none. Every method may be called concurrently, from any number of
// processes.
type Store interface {
	// Ledger reads the ledger name; a Ledger of Version 0 when there is none.
	Ledger(ctx context.Context, name string) (Ledger, error)
	// PutLedger writes l as ledger name if the stored one is still at version prev (0: there
	// is none); ErrConflict when another writer came first.
	PutLedger(ctx context.Context, name string, prev int64, l Ledger) error
	// Fleet reads the fleet row.
	Fleet(ctx context.Context) (Fleet, error)
	// Beat records task as live until until, forgets the tasks named in gone, and returns
	// the fleet row as it is after the write.
	Beat(ctx context.Context, task string, until time.Time, gone []string) (Fleet, error)
	// Leave forgets task: it no longer counts as live.
	Leave(ctx context.Context, task string) error
	// Pause makes the fleet pause last until until, unless it already lasts longer.
	Pause(ctx context.Context, until time.Time) error
}

// ErrConflict is PutLedger's answer when the ledger changed since it was read.
var ErrConflict = errors.New("the ledger changed since it was read")

// Fleet is the fleet row: the pause in force and the tasks that beat.
type Fleet struct {
	// PauseUntil is when the fleet's pause ends; zero or past: none.
	PauseUntil time.Time
	// Tasks maps each task that beat to when its last beat stops counting.
	Tasks map[string]time.Time
}

// Live is how many tasks count as live at now; at least 1 (the caller).
func (f Fleet) Live(now time.Time) int {
	n := 0
	for _, until := range f.Tasks {
		if until.After(now) {
			n++
		}
	}
	return max(n, 1)
}

// memStore is a Store in process: the limits of one task without a table.
type memStore struct {
	mu      sync.Mutex
	ledgers map[string]Ledger
	fleet   Fleet
}

func newMemStore() *memStore {
	return &memStore{ledgers: map[string]Ledger{}, fleet: Fleet{Tasks: map[string]time.Time{}}}
}

func (s *memStore) Ledger(_ context.Context, name string) (Ledger, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ledgers[name].Clone(), nil
}

func (s *memStore) PutLedger(_ context.Context, name string, prev int64, l Ledger) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ledgers[name].Version != prev {
		return ErrConflict
	}
	s.ledgers[name] = l.Clone()
	return nil
}

func (s *memStore) Fleet(context.Context) (Fleet, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Fleet{PauseUntil: s.fleet.PauseUntil, Tasks: maps.Clone(s.fleet.Tasks)}, nil
}

func (s *memStore) Beat(ctx context.Context, task string, until time.Time, gone []string) (Fleet, error) {
	s.mu.Lock()
	for _, g := range gone {
		delete(s.fleet.Tasks, g)
	}
	s.fleet.Tasks[task] = until
	s.mu.Unlock()
	return s.Fleet(ctx)
}

func (s *memStore) Leave(_ context.Context, task string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.fleet.Tasks, task)
	return nil
}

func (s *memStore) Pause(_ context.Context, until time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if until.After(s.fleet.PauseUntil) {
		s.fleet.PauseUntil = until
	}
	return nil
}
