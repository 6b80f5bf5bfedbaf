package progress

import (
	"cmp"
	"context"
	"encoding/json"
	"sync"
	"testing"
)

// step is one call of a sequence, as a worker script makes it.
type step func(ctx context.Context, s *Store, job string) error

func setTotal(n int64) step {
	return func(ctx context.Context, s *Store, job string) error { _, err := s.SetTotal(ctx, job, n); return err }
}

// complete completes parts from..to, eight at a time, and returns the first error.
func complete(from, to int64) step {
	return func(ctx context.Context, s *Store, job string) error {
		var mu sync.Mutex
		var first error
		parts := make(chan int64)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for p := range parts {
					if _, err := s.CompletePart(ctx, job, p); err != nil {
						mu.Lock()
						first = cmp.Or(first, err)
						mu.Unlock()
					}
				}
			})
		}
		for p := from; p <= to; p++ {
			parts <- p
		}
		close(parts)
		wg.Wait()
		return first
	}
}

func setMetadata(doc string) step {
	return func(ctx context.Context, s *Store, job string) error { return s.SetMetadata(ctx, job, []byte(doc)) }
}

func failJob(reason string) step {
	return func(ctx context.Context, s *Store, job string) error { return s.FailJob(ctx, job, reason) }
}

func reduceSent() step {
	return func(ctx context.Context, s *Store, job string) error { return s.ReduceSent(ctx, job) }
}

// statusGoldens are the outputs of watchbot-progress's `status` after the same calls, from its
// tests (test/progress.test.js of github.com/mapbox/watchbot-progress, "[progress] status
// (...)", named after them) and, for the rows marked so, from its code (lib/progress.js,
// status): the order in which it adds fields, and the fields it leaves out.
var statusGoldens = []struct {
	name  string
	steps []step
	part  int64
	want  string
}{
	{"incomplete", []step{setTotal(10), complete(4, 4)}, 0, `{"progress":0.1}`},
	{"complete", []step{setTotal(10), complete(1, 10)}, 0, `{"progress":1}`},
	{"with failure", []step{setTotal(10), failJob("The job failed")}, 0, `{"progress":0,"failed":"The job failed"}`},
	{"with metadata", []step{setTotal(10), setMetadata(`{"important": "info"}`)}, 0, `{"progress":0,"metadata":{"important":"info"}}`},
	{"check part, complete", []step{setTotal(10), complete(1, 1)}, 1, `{"progress":0.1,"partComplete":true}`},
	{"check part, incomplete", []step{setTotal(10), complete(1, 1)}, 2, `{"progress":0.1,"partComplete":false}`},
	{"finished job, check part", []step{setTotal(1), complete(1, 1)}, 1, `{"progress":1,"partComplete":true}`},
	{"nearly complete job, check part", []step{setTotal(1000), complete(1, 999)}, 1000, `{"progress":0.99,"partComplete":false}`},
	{"with reduceSent", []step{setTotal(10), reduceSent()}, 0, `{"progress":0,"reduceSent":true}`},
	{"no job yet", nil, 0, `{"progress":0}`},
	// From the code: every field, in the order status adds them.
	{"every field (code)", []step{setTotal(4), complete(1, 2), setMetadata(`{"b":1,"a":[true,null]}`), failJob("disk <full> & more"), reduceSent()}, 2,
		`{"progress":0.5,"failed":"disk <full> & more","metadata":{"b":1,"a":[true,null]},"partComplete":true,"reduceSent":true}`},
	// Where this differs, on purpose (docs/map-reduce.md#differences-from-watchbot-progress):
	// watchbot-progress prints 0.28 here (floating point), and null before set-total.
	{"29 of 100: exact hundredths", []step{setTotal(100), complete(1, 29)}, 0, `{"progress":0.29}`},
	{"metadata before set-total", []step{setMetadata(`{"n":1}`)}, 3, `{"progress":0,"metadata":{"n":1}}`},
}

func TestStatusMatchesWatchbotProgress(t *testing.T) {
	both(t, func(t *testing.T, client API, table string) {
		s := quick(client, table)
		for _, tt := range statusGoldens {
			job := "job " + tt.name
			for _, st := range tt.steps {
				if err := st(t.Context(), s, job); err != nil {
					t.Fatalf("%s: %v", tt.name, err)
				}
			}
			st := mustStatus(t, s, job, tt.part)
			got, err := st.Compat()
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("%s: status = %s\n\twant %s", tt.name, got, tt.want)
			}
		}
	})
}

// The --json form holds every field, whatever was recorded.
func TestStatusJSON(t *testing.T) {
	s := quick(newFakeDB("progress"), "progress")
	for _, st := range []step{setTotal(4), complete(1, 3), setMetadata(`{"k": "v"}`)} {
		if err := st(t.Context(), s, "job"); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		part int64
		want string
	}{
		{0, `{"job":"job","total":4,"done":3,"progress":0.75,"complete":false,"failed":false,"metadata":{"k":"v"},"reduceSent":false}`},
		{4, `{"job":"job","total":4,"done":3,"progress":0.75,"complete":false,"failed":false,"metadata":{"k":"v"},"reduceSent":false,"part":4,"partComplete":false}`},
	} {
		got, err := json.Marshal(mustStatus(t, s, "job", tt.part))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tt.want {
			t.Errorf("status --json, part %d = %s\n\twant %s", tt.part, got, tt.want)
		}
	}
}
