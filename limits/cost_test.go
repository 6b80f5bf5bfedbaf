package limits

import (
	"context"
	"encoding/json"
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

func (m *metered) PutControl(ctx context.Context, prev int64, c Control) error {
	m.writes.Add(1)
	m.wru.Add(units1k(controlSize(c) + len(KeyAttribute) + len(FleetItem)))
	return m.Store.PutControl(ctx, prev, c)
}

func (m *metered) PutTask(ctx context.Context, r TaskRecord) error {
	m.writes.Add(1)
	m.wru.Add(units1k(taskSize(r)))
	return m.Store.PutTask(ctx, r)
}

func (m *metered) Task(ctx context.Context, task string) (TaskRecord, bool, error) {
	r, ok, err := m.Store.Task(ctx, task)
	m.reads.Add(1)
	m.rru.Add(units4k(taskSize(r)))
	return r, ok, err
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
	return n + controlSize(f.Control)
}

// controlSize is what the operator's control adds to the fleet item: none before the first
// change.
func controlSize(c Control) int {
	if c.Version == 0 {
		return 0
	}
	raw, _ := json.Marshal(c)
	return len(attrControl) + len(raw) + len(attrControlVersion) + 3
}

// taskSize is a task record's item size.
func taskSize(r TaskRecord) int {
	raw, _ := json.Marshal(r)
	return len(KeyAttribute) + len(TaskItemPrefix) + len(r.Task) + len(attrRecord) + len(raw) + len(TTLAttribute) + 6
}

func units4k(size int) int64 { return int64((size + 4095) / 4096) }
func units1k(size int) int64 { return int64((size + 1023) / 1024) }

// TestCostPerMessage measures what the limits cost in DynamoDB calls per message, three
// tasks sharing the table, for docs/limits.md: every call the tasks make in the run, their
// reads of the fleet row and their records included. It asserts only that the table is never
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
				rru, wru := float64(m.rru.Load())/msgs, float64(m.wru.Load())/msgs
				line := fmt.Sprintf("%.0f starts/s: %.3f reads and %.3f writes a message (%.3f RRU, %.3f WRU), $%.3f a million messages; %.2f calls/s a task",
					msgs/d.Seconds(), float64(m.reads.Load())/msgs, float64(m.writes.Load())/msgs, rru, wru, rru*readPrice+wru*writePrice,
					float64(m.reads.Load()+m.writes.Load())/d.Seconds()/3)
				t.Log(line)
				if ru/msgs > tc.most {
					t.Errorf("%.3f request units a message, want at most %.2f", ru/msgs, tc.most)
				}
			})
		})
	}
}

// taskMonth is a month of a task's time: 730 hours.
const taskMonth = 730 * time.Hour

// TestCostPerTask measures what a task costs in DynamoDB calls whether it runs messages or
// not: three idle tasks sharing the table, under an operator's control, for docs/limits.md.
// It asserts that a task reads the fleet row once a PollInterval, and writes its record as
// often and the row once a HeartbeatInterval, and no more.
func TestCostPerTask(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		m := &metered{Store: newMemStore()}
		rate := 20.0
		steer(t, m, func(c Control) Control {
			c.Settings = Settings{Concurrency: 2, RateLimit: &rate}
			c.Change = Change{What: ChangeSet, Reason: "shed load", By: "arn:aws:sts::123456789012:assumed-role/ops/ana", At: time.Now()}
			return c
		})
		m.reads.Store(0)
		m.writes.Store(0)
		m.rru.Store(0)
		m.wru.Store(0)
		cfg := DefaultConfig()
		cfg.Rate = 20
		cfg.Member = Member{Host: "ip-10-0-1-17", Queues: []string{"jobs"}, Concurrency: 4, BatchSize: 1}
		fleetOnTable(t, m, "limits", cfg, "5e1f8ab0c2d94e7b9f1d3a6c8e2b4d70", "9a3c6e2b4d705e1f8ab0c2d94e7b9f1d", "0c2d94e7b9f1d3a6c8e2b4d705e1f8ab")
		const d, tasks = 10 * time.Minute, 3
		time.Sleep(d)
		perSec := func(n int64) float64 { return float64(n) / d.Seconds() / tasks }
		rru, wru := perSec(m.rru.Load()), perSec(m.wru.Load())
		t.Logf("a task: %.3f reads and %.3f writes a second (%.3f RRU, %.3f WRU): %.2f million RRU and %.2f million WRU, $%.2f a task-month",
			perSec(m.reads.Load()), perSec(m.writes.Load()), rru, wru, rru*taskMonth.Seconds()/1e6, wru*taskMonth.Seconds()/1e6,
			(rru*readPrice+wru*writePrice)*taskMonth.Seconds()/1e6)
		reads, writes := 1/PollInterval.Seconds(), 1/PollInterval.Seconds()+1/HeartbeatInterval.Seconds()
		if perSec(m.reads.Load()) > reads*1.02 || perSec(m.writes.Load()) > writes*1.02 {
			t.Errorf("%.3f reads and %.3f writes a task-second, want at most %.2f and %.2f", perSec(m.reads.Load()), perSec(m.writes.Load()), reads, writes)
		}
	})
}

// On-demand prices in US East, in dollars per million request units (docs/limits.md).
const (
	readPrice  = 0.125
	writePrice = 0.625
)
