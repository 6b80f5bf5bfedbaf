package app

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/watchbot/watchbot/internal/setting"
	"github.com/watchbot/watchbot/limits"
)

// fakeSTS answers GetCallerIdentity with arn, or with err.
type fakeSTS struct {
	arn string
	err error
}

func (f fakeSTS) GetCallerIdentity(context.Context, *sts.GetCallerIdentityInput, ...func(*sts.Options)) (*sts.GetCallerIdentityOutput, error) {
	if f.err != nil {
		return nil, f.err
	}
	return &sts.GetCallerIdentityOutput{Arn: aws.String(f.arn)}, nil
}

func TestCaller(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		api  CallerAPI
		want string
	}{
		{"no STS to ask", nil, ""},
		{"STS answers", fakeSTS{arn: "arn:aws:sts::123456789012:assumed-role/ops/ana"}, "arn:aws:sts::123456789012:assumed-role/ops/ana"},
		{"STS fails", fakeSTS{err: errors.New("no such endpoint")}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Caller(t.Context(), tc.api); got != tc.want {
				t.Errorf("Caller = %q, want %q", got, tc.want)
			}
		})
	}
}

// fleetTable is a limits table of live tasks whose records never change: it keeps the
// control written.
type fleetTable struct {
	downStore
	control limits.Control
	tasks   map[string]limits.TaskRecord
}

func (f *fleetTable) Fleet(context.Context) (limits.Fleet, error) {
	live := map[string]time.Time{}
	for id := range f.tasks {
		live[id] = time.Now().Add(time.Minute)
	}
	return limits.Fleet{Control: f.control, Tasks: live}, nil
}

func (f *fleetTable) PutControl(_ context.Context, prev int64, c limits.Control) error {
	if prev != f.control.Version {
		return limits.ErrConflict
	}
	f.control = c
	return nil
}

func (f *fleetTable) Task(_ context.Context, id string) (limits.TaskRecord, bool, error) {
	r, ok := f.tasks[id]
	return r, ok, nil
}

func TestSteerFleet(t *testing.T) {
	t.Parallel()
	live := time.Now().Add(time.Hour)
	table := &fleetTable{tasks: map[string]limits.TaskRecord{
		"a": {Task: "a", Queues: []string{"jobs"}, Concurrency: 4, BatchSize: 1, LiveUntil: live},
		"b": {Task: "b", Concurrency: 2, BatchSize: 1, LiveUntil: live},
	}}
	ctx := t.Context()

	r, err := SteerFleet(ctx, table, FleetChange{What: limits.ChangePause, Queue: "jobs", For: time.Minute, Reason: "broken", By: "ana"}, 0, time.Now)
	if err != nil || r.Control.Version != 1 || table.control.Change.By != "ana" || r.Unserved {
		t.Fatalf("pause: %+v (unserved %v), %v; want version 1 written by ana, of a queue a serves", r.Control, r.Unserved, err)
	}
	if _, paused := table.control.PauseOf("jobs", time.Now()); !paused {
		t.Error("the pause is not in the control written")
	}

	var refused setting.Error
	if r, err := SteerFleet(ctx, table, FleetChange{What: limits.ChangePause, Queue: "jbos"}, 0, time.Now); err != nil || !r.Unserved {
		t.Fatalf("a pause of a queue no task serves: unserved %v, %v; want it said", r.Unserved, err)
	}
	if _, err := SteerFleet(ctx, table, FleetChange{What: limits.ChangePause}, 0, time.Now); err != nil {
		t.Fatal(err)
	}
	_, err = SteerFleet(ctx, table, FleetChange{What: limits.ChangeResume, Queue: "jobs"}, 0, time.Now)
	if !errors.As(err, &refused) || table.control.Version != 3 {
		t.Errorf("a resume of one queue while every queue is paused: %v, version %d; want a refusal, nothing written", err, table.control.Version)
	}
	if _, err := SteerFleet(ctx, table, FleetChange{What: limits.ChangeResume}, 0, time.Now); err != nil || len(table.control.Pauses) != 0 {
		t.Fatalf("resume: %v, pauses %v; want none left", err, table.control.Pauses)
	}

	_, err = SteerFleet(ctx, table, FleetChange{What: limits.ChangeSet, Settings: limits.Settings{Concurrency: 3}}, 0, time.Now)
	if !errors.As(err, &refused) || !strings.Contains(err.Error(), "--concurrency 3") || !strings.Contains(err.Error(), "b (--concurrency 2)") {
		t.Errorf("a --concurrency above b's own: %v, want a refusal naming it and b", err)
	}
	if table.control.Version != 4 {
		t.Errorf("a refused set wrote version %d", table.control.Version)
	}

	// --concurrency 0 gives each task its own back, the rest as set.
	rate := 5.0
	if _, err := SteerFleet(ctx, table, FleetChange{What: limits.ChangeSet, Settings: limits.Settings{Concurrency: 2, RateLimit: &rate}}, 0, time.Now); err != nil {
		t.Fatal(err)
	}
	if _, err := SteerFleet(ctx, table, FleetChange{What: limits.ChangeSet, OwnConcurrency: true}, 0, time.Now); err != nil {
		t.Fatal(err)
	}
	if got := table.control.Settings; got.Concurrency != 0 || got.RateLimit == nil || *got.RateLimit != 5 {
		t.Errorf("settings after --concurrency 0: %+v, want no --concurrency, the rest kept", got)
	}

	// Nobody applies version 7: the wait ends with both named.
	r, err = SteerFleet(ctx, table, FleetChange{What: limits.ChangeSet, Settings: limits.Settings{Concurrency: 2}}, 300*time.Millisecond, time.Now)
	if err != nil || r.Control.Version != 7 || strings.Join(r.Lagging, ",") != "a,b" {
		t.Errorf("set: %+v lagging %v, %v; want version 7, a and b lagging", r.Control, r.Lagging, err)
	}
}
