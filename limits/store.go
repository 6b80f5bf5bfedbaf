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
	// PutControl writes c as the fleet's control if the stored one is still at version prev
	// (0: there is none); ErrConflict when another writer came first.
	PutControl(ctx context.Context, prev int64, c Control) error
	// PutTask writes the record of task r.Task over its last one.
	PutTask(ctx context.Context, r TaskRecord) error
	// Task reads the record of task; false when there is none.
	Task(ctx context.Context, task string) (TaskRecord, bool, error)
}

// ErrConflict is the answer of PutLedger and PutControl when the item changed since it was
// read.
var ErrConflict = errors.New("the item changed since it was read")

// Fleet is the fleet row: the pause in force, the tasks that beat and the operator's control.
type Fleet struct {
	// PauseUntil is when the pause a worker asked for ends; zero or past: none.
	PauseUntil time.Time
	// Control is the operator's pauses and settings (`watchbot fleet`).
	Control Control
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
	tasks   map[string]TaskRecord
}

func newMemStore() *memStore {
	return &memStore{ledgers: map[string]Ledger{}, fleet: Fleet{Tasks: map[string]time.Time{}}, tasks: map[string]TaskRecord{}}
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
	return Fleet{PauseUntil: s.fleet.PauseUntil, Control: s.fleet.Control, Tasks: maps.Clone(s.fleet.Tasks)}, nil
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

func (s *memStore) PutControl(_ context.Context, prev int64, c Control) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fleet.Control.Version != prev {
		return ErrConflict
	}
	s.fleet.Control = c
	return nil
}

func (s *memStore) PutTask(_ context.Context, r TaskRecord) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tasks[r.Task] = r
	return nil
}

func (s *memStore) Task(_ context.Context, task string) (TaskRecord, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.tasks[task]
	return r, ok, nil
}
