package supervisor

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// keyGate admits every run, but those of the keys (group letters) it holds full, or none
// while closed.
type keyGate struct {
	full   map[string]bool
	closed bool
}

func (g *keyGate) admit(run []*job, _ time.Time) verdict {
	switch {
	case g.closed:
		return closed
	case g.full[run[0].msg.GroupID]:
		return keyFull
	}
	return admitted
}

// TestSlotPoolOneSeatIsTheSingleQueueRule checks that a queue alone in its pool starts what
// the rule of a queue with slots of its own started: a pass over what is held within the
// brake's limit, trying again at every step the groups a pass held back for their key and a
// gate that was closed. The old rule is next, a pass bounded by the slots alone; the new is
// the loop's: the seat asks for what startable says, and the pass is bounded by the grant.
func TestSlotPoolOneSeatIsTheSingleQueueRule(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name               string
		concurrency, limit int // the slots, and the brake's limit at the pass
		first              int // the slots an earlier pass may fill

		batch                int
		window               time.Duration
		fifo                 bool
		held                 []string
		before, at           keyGate // the gate at an earlier pass, and at this one
		wantRuns             []string
		wantHeldBack         int
		wantClosed, wantRoom int
	}{
		{name: "free slots", concurrency: 4, limit: 4, first: 1, batch: 1, held: []string{"a1", "b1", "c1", "d1"},
			wantRuns: []string{"b1", "c1", "d1"}},
		{name: "every slot busy", concurrency: 2, limit: 2, first: 2, batch: 1, held: []string{"a1", "b1", "c1"},
			wantRuns: nil},
		{name: "brake below the runs under way", concurrency: 4, limit: 1, first: 2, batch: 1, held: []string{"a1", "b1", "c1"},
			wantRuns: nil},
		{name: "brake's probe slot", concurrency: 4, limit: 1, batch: 1, held: []string{"a1", "b1"},
			wantRuns: []string{"a1"}},
		{name: "--once", concurrency: 1, limit: 1, batch: 1, held: []string{"a1", "b1"},
			wantRuns: []string{"a1"}},
		{name: "key held back earlier, free now", concurrency: 3, limit: 3, first: 3, batch: 1, held: []string{"a1", "b1", "c1"},
			before: keyGate{full: map[string]bool{"b": true, "c": true}}, wantRuns: []string{"b1", "c1"}},
		{name: "key still full", concurrency: 3, limit: 3, first: 3, batch: 1, held: []string{"a1", "b1", "c1"},
			before: keyGate{full: map[string]bool{"b": true}}, at: keyGate{full: map[string]bool{"b": true}},
			wantRuns: nil, wantHeldBack: 1},
		{name: "gate closed earlier, open now", concurrency: 2, limit: 2, first: 2, batch: 1, held: []string{"a1", "b1"},
			before: keyGate{closed: true}, wantRuns: []string{"a1", "b1"}},
		{name: "gate still closed", concurrency: 2, limit: 2, first: 2, batch: 1, held: []string{"a1", "b1"},
			before: keyGate{closed: true}, at: keyGate{closed: true}, wantRuns: nil, wantClosed: 1},
		{name: "FIFO groups", concurrency: 3, limit: 3, first: 1, batch: 1, fifo: true, held: []string{"a1", "a2", "b1", "c1"},
			wantRuns: []string{"b1", "c1"}},
		{name: "batch due", concurrency: 2, limit: 2, batch: 2, held: []string{"a1", "b1", "c1", "d1", "e1"},
			wantRuns: []string{"a1 b1", "c1 d1"}},
		{name: "batch within its window", concurrency: 2, limit: 2, first: 1, batch: 3, window: time.Minute, held: []string{"a1", "b1", "c1", "d1"},
			wantRuns: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// build holds the messages and makes an earlier pass within tt.first slots with
			// the gate as it was before, then sets the gate and the brake's limit as they
			// are now.
			build := func(pass func(s *scheduler, now time.Time) [][]*job) *scheduler {
				g := &keyGate{}
				s := newScheduler(tt.concurrency, tt.batch, tt.window, tt.fifo, g, false)
				for _, id := range tt.held {
					s.add(t0, sj(id))
				}
				*g = tt.before
				s.limit(tt.first)
				pass(s, t0)
				*g = tt.at
				s.limit(tt.limit)
				return s
			}
			now := t0.Add(time.Second)

			old := build(func(s *scheduler, now time.Time) [][]*job { return s.next(now) })
			oldRuns := old.next(now)

			seat := newSlotPool(tt.concurrency, PolicyWeighted, []int{1}, []int{0}).seat(0)
			if seat.shared() {
				t.Fatal("a pool of one seat shares its slots")
			}
			pass := func(s *scheduler, now time.Time) [][]*job {
				granted := seat.acquire(0, s.startable(now))
				runs := s.nextUpTo(now, granted)
				seat.release(granted - len(runs))
				return runs
			}
			alone := build(pass)
			runs := pass(alone, now)

			got := []any{runIDs(runs), alone.heldBack, alone.gateClosed, alone.room()}
			if diff := cmp.Diff([]any{runIDs(oldRuns), old.heldBack, old.gateClosed, old.room()}, got); diff != "" {
				t.Errorf("one seat against the single queue's rule (-old +seat):\n%s", diff)
			}
			if diff := cmp.Diff([]any{tt.wantRuns, tt.wantHeldBack, tt.wantClosed == 1, old.room()}, got); diff != "" {
				t.Errorf("pass (-want +got):\n%s", diff)
			}
		})
	}
}
