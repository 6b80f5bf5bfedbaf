package limits

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// metered is a Store that counts its calls as DynamoDB bills them: reads (strongly
// consistent, 4 KB a unit) and writes (1 KB a unit), from each item's size as DynamoDB
// counts it (attribute names and values).
type metered struct {
	Store
	reads, writes, rru, wru atomic.Int64
}

func (m *metered) Ledger(ctx context.Context, name string) (Ledger, error) {
	l, err := m.Store.Ledger(ctx, name)
	m.reads.Add(1)
	m.rru.Add(units4k(ledgerSize(name, l)))
	return l, err
}

func (m *metered) PutLedger(ctx context.Context, name string, prev int64, l Ledger) error {
	m.writes.Add(1)
	// A failed condition is billed as a write of the item's size too.
	m.wru.Add(units1k(ledgerSize(name, l)))
	return m.Store.PutLedger(ctx, name, prev, l)
}

func (m *metered) Fleet(ctx context.Context) (Fleet, error) {
	f, err := m.Store.Fleet(ctx)
	m.reads.Add(1)
	m.rru.Add(units4k(fleetSize(f)))
	return f, err
}

func (m *metered) Beat(ctx context.Context, task string, until time.Time, gone []string) (Fleet, error) {
	f, err := m.Store.Beat(ctx, task, until, gone)
	m.writes.Add(1)
	m.wru.Add(units1k(fleetSize(f)))
	return f, err
}

func (m *metered) Pause(ctx context.Context, until time.Time) error {
	m.writes.Add(1)
	m.wru.Add(1)
	return m.Store.Pause(ctx, until)
}

// ledgerSize is the ledger item's size as DynamoDB counts it: names plus values (a number
// counts about one byte per two digits, plus one).
func ledgerSize(name string, l Ledger) int {
	n := len(KeyAttribute) + len(name) + len(attrVersion) + 3 + len(attrHolds) + len(TTLAttribute) + 6
	for holder := range l.Holds {
		n += len(holder) + 3 + len(attrN) + 2 + len(attrUntil) + 8
	}
	return n
}

func fleetSize(f Fleet) int {
	n := len(KeyAttribute) + len(FleetItem) + len(attrPause) + 8 + len(attrTasks) + len(TTLAttribute) + 6
	for task := range f.Tasks {
		n += len(task) + 8
	}
	return n
}

func units4k(size int) int64 { return int64((size + 4095) / 4096) }
func units1k(size int) int64 { return int64((size + 1023) / 1024) }

// TestCostPerMessage measures what the limits cost in DynamoDB calls per message, three
// tasks sharing the table, for docs/limits.md. It asserts only that the table is never
// called for every start far from the limit.
func TestCostPerMessage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		cfg     func(*Config)
		workers int
		runFor  time.Duration
		// ceiling on DynamoDB request units per message
		most float64
	}{
		{"rate 20/s, backlogged (the limit binds)", func(c *Config) { c.Rate = 20 }, 4, 0, 4},
		{"rate 1000/s, 300 starts/s (far from binding)", func(c *Config) { c.Rate = 1000 }, 10, 100 * time.Millisecond, 0.1},
		{"rate 100/s, 60 starts/s", func(c *Config) { c.Rate = 100 }, 2, 100 * time.Millisecond, 1},
		{"concurrency 4, 2 s jobs, backlogged", func(c *Config) { c.Concurrency = 4 }, 4, 2 * time.Second, 6},
		{"concurrency 100, 300 starts/s", func(c *Config) { c.Concurrency = 100 }, 10, 100 * time.Millisecond, 0.1},
		{"rate 1000/s and concurrency 100, 300 starts/s", func(c *Config) { c.Rate, c.Concurrency = 1000, 100 }, 10, 100 * time.Millisecond, 0.2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := DefaultConfig()
				tc.cfg(&cfg)
				m := &metered{Store: newMemStore()}
				ts := fleetOnTable(t, m, "limits", cfg, "task-0123456789abcdef-a", "task-0123456789abcdef-b", "task-0123456789abcdef-c")
				const d = 60 * time.Second
				g := driveAll(t, ts, d, tc.workers, "", 1, tc.runFor)
				msgs := float64(len(g.starts))
				ru := float64(m.wru.Load() + m.rru.Load())
				line := fmt.Sprintf("%.0f starts/s: %.3f reads and %.3f writes a message (%.3f RRU, %.3f WRU); %.2f calls/s a task",
					msgs/d.Seconds(), float64(m.reads.Load())/msgs, float64(m.writes.Load())/msgs,
					float64(m.rru.Load())/msgs, float64(m.wru.Load())/msgs, float64(m.reads.Load()+m.writes.Load())/d.Seconds()/3)
				t.Log(line)
				if ru/msgs > tc.most {
					t.Errorf("%.3f request units a message, want at most %.2f", ru/msgs, tc.most)
				}
			})
		})
	}
}
