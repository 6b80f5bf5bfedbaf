package supervisor

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestSchedulerFIFOReceiveSize: on a FIFO queue a free slot takes one new group, and a
// receive asks for as many messages as recent receives brought per new group, so deep groups
// come a run at a time while shallow ones bring no more groups than there are free slots.
func TestSchedulerFIFOReceiveSize(t *testing.T) {
	t.Parallel()
	s := newScheduler(4, 1, 0, true, nil, false)
	if got := s.room(); got != 4 {
		t.Fatalf("room = %d at start (4 free slots, nothing known of the groups), want 4", got)
	}
	// One receive brings 8 of group a: groups are deep.
	var deep []*job
	for i := 1; i <= 8; i++ {
		deep = append(deep, sj(fmt.Sprintf("a%d", i)))
	}
	s.add(t0, deep...)
	s.next(t0) // a1 runs; three slots free
	if got := s.room(); got != 10 {
		t.Fatalf("room = %d after a deep receive with 3 free slots, want a full receive (10)", got)
	}
	// Receives then bring one message per group: shallow. The size follows.
	s.add(t0, sj("b1"), sj("c1"), sj("d1"))
	s.add(t0, sj("e1"))
	s.next(t0) // b1, c1, d1 start: all four slots busy
	if got := s.room(); got != 0 {
		t.Fatalf("room = %d with every slot busy, want 0", got)
	}
	r := s.next(t0)
	if len(r) != 0 {
		t.Fatalf("started %v with no slot free", runIDs(r))
	}
	// a1 ends, its group goes on with a2.
	s.ended(deep[:1], 0)
	s.finish(deep[:1], []disposition{done}, t0)
	if got := s.depth; got > 2.5 {
		t.Fatalf("depth %.2f after shallow receives, want it to have fallen toward 1", got)
	}
	checkBooks(t, s)
}

// TestSchedulerFIFOReadAheadFollowsJobDuration: behind a long job what is held waits long, and
// a stop hands it back (a receive more on each count), so long jobs get no read-ahead.
func TestSchedulerFIFOReadAheadFollowsJobDuration(t *testing.T) {
	t.Parallel()
	tests := []struct {
		took time.Duration
		want int // room with one free slot, after a receive of 8 of one group
	}{
		{0, 4},                      // no run measured yet: the depth alone, (1+8)/2
		{100 * time.Millisecond, 4}, // 10 s of work is 100 runs: the depth decides
		{4 * time.Second, 2},        // 10 s of work is 2.5 runs
		{10 * time.Minute, 1},       // one run: only what can start at once
	}
	for _, tt := range tests {
		t.Run(tt.took.String(), func(t *testing.T) {
			s := newScheduler(2, 1, 0, true, nil, false)
			var deep []*job
			for i := 1; i <= 8; i++ {
				deep = append(deep, sj(fmt.Sprintf("a%d", i)))
			}
			s.add(t0, deep...)
			run := s.next(t0)[0]
			s.ended(run, tt.took)
			s.finish(run, []disposition{done}, t0)
			s.next(t0) // a2 runs; one slot free
			if got := s.room(); got != tt.want {
				t.Fatalf("room = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestSchedulerStandardReadAhead: on a standard queue, once a run has ended a receive may
// bring up to a receive's worth beyond the free slots, bounded by readAhead of work across
// the slots; the receive waits for that much room.
func TestSchedulerStandardReadAhead(t *testing.T) {
	t.Parallel()
	tests := []struct {
		took       time.Duration
		room, full int // room with all 8 slots busy and nothing held; target
	}{
		{0, 0, 8},                  // no run measured yet: no read-ahead
		{time.Millisecond, 10, 10}, // a receive's worth
		{10 * time.Second, 8, 10},  // 10 s of work across 8 slots is 8 runs
		{40 * time.Second, 2, 10},  // … 2 runs
		{10 * time.Minute, 0, 8},   // long jobs: none waits for a slot
	}
	for _, tt := range tests {
		t.Run(tt.took.String(), func(t *testing.T) {
			s := newScheduler(8, 1, 0, false, nil, false)
			var js []*job
			for i := range 9 {
				js = append(js, &job{msg: message{ID: fmt.Sprint(i)}})
			}
			s.add(t0, js...)
			runs := s.next(t0)
			s.ended(runs[0], tt.took)
			s.finish(runs[0], []disposition{done}, t0)
			if got := runIDs(s.next(t0)); !slices.Equal(got, []string{"8"}) {
				t.Fatalf("next = %v, want the ninth message", got)
			}
			if got := s.room(); got != tt.room {
				t.Errorf("room = %d, want %d", got, tt.room)
			}
			if got := s.target(); got != tt.full {
				t.Errorf("target = %d, want %d", got, tt.full)
			}
			checkBooks(t, s)
		})
	}
}

// TestSchedulerRefill: with all slots busy, a receive for half a receive's room starts once
// the read-ahead would run dry within two receive latencies at the slots' rate; not with
// long jobs, whose read-ahead is none.
func TestSchedulerRefill(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		took    time.Duration
		ready   int // messages waiting for a slot, all 8 slots busy
		latency time.Duration
		want    bool
	}{
		{"read-ahead full", 10 * time.Millisecond, 10, 2 * time.Millisecond, false},
		{"would run dry: 8 slots of 10 ms jobs take 3.2 in 2×2 ms", 10 * time.Millisecond, 3, 2 * time.Millisecond, true},
		{"room under half a receive", 10 * time.Millisecond, 6, time.Second, false},
		{"lasts: 100 ms jobs take 0.16 in 2×1 ms", 100 * time.Millisecond, 5, time.Millisecond, false},
		{"long jobs: no read-ahead", 10 * time.Minute, 0, time.Second, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := busyScheduler(8, tt.took, tt.ready)
			if got := s.refill(tt.latency); got != tt.want {
				t.Errorf("refill = %v with %d ready (room %d), want %v", got, tt.ready, s.room(), tt.want)
			}
		})
	}
}

// TestSchedulerRunsBy: a stop runs what waits for a slot when, at the jobs' recent duration and
// twice over, a round for the runs under way and one per slotful waiting end by the deadline.
func TestSchedulerRunsBy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		took   time.Duration
		ready  int
		window time.Duration
		want   bool
	}{
		{"nothing waits, no duration known", 0, 0, time.Second, true},
		{"no duration known", 0, 3, time.Hour, false},
		{"fits: 2 rounds of 100 ms, twice, in 1 s", 100 * time.Millisecond, 3, time.Second, true},
		{"does not fit: 2 rounds of 1 s, twice, in 3 s", time.Second, 3, 3 * time.Second, false},
		{"two slotfuls waiting: 3 rounds of 100 ms, twice, in 500 ms", 100 * time.Millisecond, 5, 500 * time.Millisecond, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := busyScheduler(4, tt.took, tt.ready)
			if got := s.runsBy(t0, t0.Add(tt.window)); got != tt.want {
				t.Errorf("runsBy = %v with %d waiting, want %v", got, tt.ready, tt.want)
			}
		})
	}
}

// busyScheduler returns a standard queue's scheduler with all its slots running, after one run
// that took took ended, and ready messages waiting for a slot.
// TestSchedulerRunsByBeforeAnyRunEnded: with no job's duration known (an idle watchbot whose
// last long poll brought messages at a stop), what starts at once in the free slots runs in
// the drain, with the window the runs under way have; more, or past the deadline, does not.
func TestSchedulerRunsByBeforeAnyRunEnded(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		ready    int
		deadline time.Duration
		want     bool
	}{
		{"one message, four free slots", 1, time.Second, true},
		{"four messages, four free slots", 4, time.Second, true},
		{"five messages, four free slots", 5, time.Hour, false},
		{"one message, past the deadline", 1, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newScheduler(4, 1, 0, false, nil, false)
			for i := range tt.ready {
				s.add(t0, &job{msg: message{ID: fmt.Sprint(i)}})
			}
			if got := s.runsBy(t0, t0.Add(tt.deadline)); got != tt.want {
				t.Errorf("runsBy = %v with %d waiting, want %v", got, tt.ready, tt.want)
			}
		})
	}
}

func busyScheduler(slots int, took time.Duration, ready int) *scheduler {
	s := newScheduler(slots, 1, 0, false, nil, false)
	var js []*job
	for i := range slots + 1 + ready {
		js = append(js, &job{msg: message{ID: fmt.Sprint(i)}})
	}
	s.add(t0, js[:slots+1]...)
	runs := s.next(t0)
	s.ended(runs[0], took)
	s.finish(runs[0], []disposition{done}, t0)
	s.next(t0) // the last of them takes the freed slot
	s.add(t0, js[slots+1:]...)
	return s
}
