package limits

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// steerTries bounds the writes of one Steer that other writers beat.
const steerTries = 5

// Steer changes the fleet's control: it reads the fleet row, lets change decide the next
// control from the one there and the live tasks' records, and writes it one version up on
// condition that no one wrote in between, reading again after a conflict. change may refuse
// with an error, which Steer returns as is. It returns the control written.
func Steer(ctx context.Context, store Store, now time.Time, change func(c Control, live []TaskRecord) (Control, error)) (Control, error) {
	for range steerTries {
		f, err := store.Fleet(ctx)
		if err != nil {
			return Control{}, err
		}
		live, err := liveTasks(ctx, store, f, now)
		if err != nil {
			return Control{}, err
		}
		prev := f.Control.Version
		next, err := change(f.Control, live)
		if err != nil {
			return Control{}, err
		}
		next.Version = prev + 1
		err = store.PutControl(ctx, prev, next)
		if err == nil {
			return next, nil
		}
		if !errors.Is(err, ErrConflict) {
			return Control{}, err
		}
	}
	return Control{}, errors.New("the fleet's control kept changing under this command: others are steering the fleet; try again")
}

// Tasks is what `watchbot fleet status` shows: the control in force and the live tasks.
type Tasks struct {
	Control Control      `json:"control"`
	Live    []TaskRecord `json:"tasks"`
}

// ReadTasks reads the fleet row and the records of its live tasks at now, sorted by id.
func ReadTasks(ctx context.Context, store Store, now time.Time) (Tasks, error) {
	f, err := store.Fleet(ctx)
	if err != nil {
		return Tasks{}, err
	}
	live, err := liveTasks(ctx, store, f, now)
	return Tasks{Control: f.Control, Live: live}, err
}

// liveTasks reads the records of the tasks in the fleet row and keeps those live at now: a
// task that stopped writing its record drops out one lease after its last write. The table
// is read by key, never scanned.
func liveTasks(ctx context.Context, store Store, f Fleet, now time.Time) ([]TaskRecord, error) {
	out := []TaskRecord{}
	for task := range f.Tasks {
		r, ok, err := store.Task(ctx, task)
		if err != nil {
			return nil, err
		}
		if ok && r.LiveUntil.After(now) {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b TaskRecord) int { return strings.Compare(a.Task, b.Task) })
	return out, nil
}

// Lagging returns the tasks that do not apply version yet, by id.
func (t Tasks) Lagging(version int64) []string {
	var out []string
	for _, r := range t.Live {
		if r.Version < version {
			out = append(out, r.Task)
		}
	}
	return out
}

// ackPoll is how often Await reads the records again.
const ackPoll = 250 * time.Millisecond

// Await waits until every live task applies version, or until ctx ends, reading the records
// every ackPoll; it returns the tasks as it last read them. A task that dies meanwhile drops
// out of the live ones, and is waited for no more. A read that fails is tried again at the
// next tick, since the change is written and a blip of the table should not end the wait;
// when no read succeeded by the end, Await returns the last failure.
func Await(ctx context.Context, store Store, version int64, clock func() time.Time) (Tasks, error) {
	t := time.NewTicker(ackPoll)
	defer t.Stop()
	var last Tasks
	var failed error
	read := false
	for {
		ts, err := ReadTasks(ctx, store, clock())
		switch {
		case err == nil:
			last, read, failed = ts, true, nil
			if len(ts.Lagging(version)) == 0 {
				return ts, nil
			}
		case ctx.Err() == nil:
			failed = err
		}
		select {
		case <-ctx.Done():
			if !read && failed != nil {
				return last, fmt.Errorf("read the tasks' records: %w", failed)
			}
			return last, nil
		case <-t.C:
		}
	}
}
