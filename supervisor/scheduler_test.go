package supervisor

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// t0 is the scheduler tests' clock origin.
var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// sj builds a job for the scheduler: "a3" is the third message of group a (its id and its
// SequenceNumber); ids without a group letter (on a standard queue) are just ids.
func sj(id string) *job {
	group, seq := id[:1], id[1:]
	return &job{msg: message{ID: id, GroupID: group, Sequence: fmt.Sprintf("%020s", seq)}, attempt: 1}
}

func ids(run []*job) string {
	var s []string
	for _, j := range run {
		s = append(s, j.msg.ID)
	}
	return strings.Join(s, " ")
}

func runIDs(runs [][]*job) []string {
	var out []string
	for _, r := range runs {
		out = append(out, ids(r))
	}
	return out
}

// done, retryAt, hold, back are dispositions for finish.
var (
	done = disposition{}
	back = disposition{returned: true}
)

func retryAt(at time.Time) disposition { return disposition{keep: true, at: at, attempt: true} }
func heldBehind(attempted bool) disposition {
	return disposition{keep: true, attempt: attempted}
}

// finishAll ends and finishes a run with one disposition per job.
func finishAll(s *scheduler, run []*job, now time.Time, d ...disposition) []*job {
	s.ended(run, 0)
	return s.finish(run, d, now)
}

// checkBooks recomputes the scheduler's counters from its groups.
func checkBooks(t *testing.T, s *scheduler) {
	t.Helper()
	held, readyMsgs := 0, 0
	seen := map[*group]bool{}
	for _, g := range s.ready {
		readyMsgs += len(g.jobs)
		held += len(g.jobs)
		seen[g] = true
		if g.state != groupReady || g.inRun != 0 {
			t.Errorf("ready group %s: state %v, %d in run", g.key, g.state, g.inRun)
		}
	}
	for _, g := range s.waiting {
		held += len(g.jobs)
		seen[g] = true
		if g.state != groupWaiting || g.inRun != 0 {
			t.Errorf("waiting group %s: state %v, %d in run", g.key, g.state, g.inRun)
		}
	}
	for _, g := range s.groups {
		if !seen[g] {
			held += len(g.jobs)
		}
	}
	if held != s.held || readyMsgs != s.readyMsgs {
		t.Errorf("books: held %d (counted %d), readyMsgs %d (counted %d)", s.held, held, s.readyMsgs, readyMsgs)
	}
}

func TestSchedulerStandardPerMessage(t *testing.T) {
	t.Parallel()
	s := newScheduler(2, 1, 0, false, nil, false)
	if got := s.room(); got != 2 {
		t.Fatalf("room = %d with 2 free slots, want 2", got)
	}
	a, b, c := &job{msg: message{ID: "x"}}, &job{msg: message{ID: "y"}}, &job{msg: message{ID: "z"}}
	s.add(t0, a, b, c)
	runs := s.next(t0)
	if diff := cmp.Diff([]string{"x", "y"}, runIDs(runs)); diff != "" {
		t.Fatalf("runs (-want +got):\n%s", diff)
	}
	if got := s.room(); got != 0 {
		t.Fatalf("room = %d with both slots busy and one held, want 0", got)
	}
	// The slot frees when the worker ends, before its message is settled.
	s.ended(runs[0], 0)
	if got := runIDs(s.next(t0)); !slices.Equal(got, []string{"z"}) {
		t.Fatalf("after a worker ended: %v, want z", got)
	}
	if s.idle() {
		t.Fatal("idle with three runs open")
	}
	s.finish(runs[0], []disposition{done}, t0)
	checkBooks(t, s)
}

// TestSchedulerFairQueueTenantRunsSideBySide: on a standard queue a MessageGroupId names a
// fair queue's tenant and orders nothing ("Amazon SQS fair queues", SQS Developer Guide), so
// one tenant's messages fill every free slot.
func TestSchedulerFairQueueTenantRunsSideBySide(t *testing.T) {
	t.Parallel()
	s := newScheduler(4, 1, 0, false, nil, false)
	s.add(t0, sj("t1"), sj("t2"), sj("t3"), sj("t4"), sj("t5"))
	runs := s.next(t0)
	if diff := cmp.Diff([]string{"t1", "t2", "t3", "t4"}, runIDs(runs)); diff != "" {
		t.Fatalf("runs of one tenant (-want +got):\n%s", diff)
	}
	s.ended(runs[2], 0)
	if got := runIDs(s.next(t0)); !slices.Equal(got, []string{"t5"}) {
		t.Fatalf("after one run ended: %v, want t5 while the tenant's others still run", got)
	}
	checkBooks(t, s)
}

func TestSchedulerBatchWindow(t *testing.T) {
	t.Parallel()
	s := newScheduler(1, 3, 5*time.Second, false, nil, false)
	s.add(t0, &job{msg: message{ID: "m1"}})
	s.add(t0.Add(time.Second), &job{msg: message{ID: "m2"}})
	if runs := s.next(t0.Add(2 * time.Second)); len(runs) != 0 {
		t.Fatalf("started %v before the window or a full batch", runIDs(runs))
	}
	if got := s.wake(t0.Add(2 * time.Second)); !got.Equal(t0.Add(5 * time.Second)) {
		t.Fatalf("wake = %v, want the window's end 5 s after the first message", got)
	}
	// Once the window is over, a batch still not started waits on what held it back (the
	// limits, the shared slots), which wake the loop themselves: not a wake-up at once.
	if got := s.wake(t0.Add(5 * time.Second)); !got.IsZero() {
		t.Fatalf("wake = %v with the window over, want never", got)
	}
	if got := s.room(); got != 1 {
		t.Fatalf("room = %d, want 1 (3 per batch, 2 held)", got)
	}
	runs := s.next(t0.Add(5 * time.Second))
	if diff := cmp.Diff([]string{"m1 m2"}, runIDs(runs)); diff != "" {
		t.Fatalf("window end (-want +got):\n%s", diff)
	}
	// A full batch starts at once; with the one slot busy nothing starts and the window's
	// end does not wake the loop.
	s.add(t0.Add(6*time.Second), &job{msg: message{ID: "m3"}}, &job{msg: message{ID: "m4"}}, &job{msg: message{ID: "m5"}})
	if runs := s.next(t0.Add(6 * time.Second)); len(runs) != 0 {
		t.Fatalf("started %v with no free slot", runIDs(runs))
	}
	if w := s.wake(t0.Add(6 * time.Second)); !w.IsZero() {
		t.Fatalf("wake = %v with no free slot, want never", w)
	}
	s.ended(runs[0], 0)
	if diff := cmp.Diff([]string{"m3 m4 m5"}, runIDs(s.next(t0.Add(6*time.Second)))); diff != "" {
		t.Fatalf("full batch (-want +got):\n%s", diff)
	}
	checkBooks(t, s)
}

// TestSchedulerFIFO walks the per-group rules step by step: each step applies one event and
// says what must start.
// fifoStep is one step of a FIFO scheduling script: an event, then what must start, go back
// and be left as room.
type fifoStep struct {
	name  string
	do    func(s *scheduler, st *state) []*job // returns what must go back to SQS
	at    time.Duration
	start []string // runs started next, as "a1 a2"
	back  string   // messages handed back, in order
	room  int
}

// check runs the step on s and checks its decisions and the scheduler's books.
func (fs fifoStep) check(t *testing.T, s *scheduler, st *state) {
	t.Helper()
	now := t0.Add(fs.at)
	st.now = now
	var back []*job
	if fs.do != nil {
		back = fs.do(s, st)
	}
	runs := s.next(now)
	for _, r := range runs {
		st.runs[ids(r)] = r
	}
	got := runIDs(runs)
	if got == nil {
		got = []string{}
	}
	want := fs.start
	if want == nil {
		want = []string{}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("%s: runs (-want +got):\n%s", fs.name, diff)
	}
	if ids(back) != fs.back {
		t.Fatalf("%s: handed back %q, want %q", fs.name, ids(back), fs.back)
	}
	if fs.room != 0 && s.room() != fs.room {
		t.Fatalf("%s: room = %d, want %d", fs.name, s.room(), fs.room)
	}
	checkBooks(t, s)
}

func TestSchedulerFIFO(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		slots     int
		batchSize int
		steps     []fifoStep
	}{
		{"one at a time per group, groups side by side", 4, 1, []fifoStep{
			{name: "receive", do: add("a1", "a2", "a3", "b1"), start: []string{"a1", "b1"}, room: 2},
			{name: "a1 done: a2 next, in order", do: fin("a1", done), start: []string{"a2"}, room: 2},
			{name: "b1 done: group b empty", do: fin("b1", done), room: 3},
			{name: "a2 done", do: fin("a2", done), start: []string{"a3"}, room: 3},
		}},
		{"out-of-order arrival is run in sequence order", 2, 1, []fifoStep{
			{name: "receive a3 then a1 a2", do: add("a3", "a1", "a2"), start: []string{"a1"}, room: 1},
			{name: "a1 done", do: fin("a1", done), start: []string{"a2"}},
			{name: "a2 done", do: fin("a2", done), start: []string{"a3"}},
		}},
		{"a retry in place waits without a slot and keeps the group's place", 1, 1, []fifoStep{
			{name: "receive", do: add("a1", "a2"), start: []string{"a1"}},
			{name: "a1 fails: retried in place in 2 s; the slot is free", do: fin("a1", retryAt(t0.Add(2*time.Second))), room: 1},
			{name: "b1 arrives and runs meanwhile", do: add("b1"), start: []string{"b1"}},
			{name: "b1 done", at: time.Second, do: fin("b1", done), room: 1},
			{name: "a1's delay ends: a1 again, before a2", at: 2 * time.Second, start: []string{"a1"}},
			{name: "a1 done", at: 3 * time.Second, do: fin("a1", done), start: []string{"a2"}},
		}},
		{"a message handed back takes its group's held messages with it", 2, 1, []fifoStep{
			{name: "receive", do: add("a1", "a2", "a3", "b1"), start: []string{"a1", "b1"}},
			{name: "a1 released (exit 4)", do: fin("a1", back), back: "a2 a3", room: 1},
			{name: "b1 done", do: fin("b1", done), room: 2},
		}},
		{"batch: a group's messages in order, one batch per group at a time", 2, 10, []fifoStep{
			{name: "receive", do: add("a1", "b1", "a2", "a3", "b2"), start: []string{"a1 a2 a3 b1 b2"}},
			{name: "a2 fails: a3 held behind it; a1, b1, b2 done", do: fin("a1 a2 a3 b1 b2", done, retryAt(t0.Add(time.Second)), heldBehind(false), done, done), room: 10},
			{name: "a2 a3 come back together, after the delay, in order", at: time.Second, start: []string{"a2 a3"}},
		}},
		{"batch: a group split by the batch size waits for the rest", 2, 2, []fifoStep{
			{name: "receive", do: add("a1", "a2", "a3"), start: []string{"a1 a2"}},
			{name: "b1 arrives: another slot, another group (window 0)", do: add("b1"), start: []string{"b1"}},
			{name: "a1 a2 done: a3 after them", do: fin("a1 a2", done, done), start: []string{"a3"}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newScheduler(tt.slots, tt.batchSize, 0, true, nil, false)
			st := &state{jobs: map[string]*job{}, runs: map[string][]*job{}}
			for _, step := range tt.steps {
				step.check(t, s, st)
			}
		})
	}
}

// state tracks a FIFO walk's jobs and runs by their ids.
type state struct {
	now  time.Time
	jobs map[string]*job
	runs map[string][]*job
}

func add(names ...string) func(*scheduler, *state) []*job {
	return func(s *scheduler, st *state) []*job {
		for _, n := range names {
			j := sj(n)
			st.jobs[n] = j
			s.add(st.now, j)
		}
		return nil
	}
}

func fin(run string, d ...disposition) func(*scheduler, *state) []*job {
	return func(s *scheduler, st *state) []*job {
		r := st.runs[run]
		if r == nil {
			panic("no run " + run)
		}
		delete(st.runs, run)
		return finishAll(s, r, st.now, d...)
	}
}

func TestSchedulerAttemptsCountInPlaceRuns(t *testing.T) {
	t.Parallel()
	s := newScheduler(1, 10, 0, true, nil, false)
	a1, a2, a3 := sj("a1"), sj("a2"), sj("a3")
	s.add(t0, a1, a2, a3)
	run := s.next(t0)[0]
	// a1 failed; a2 failed too, behind it; a3 was acked by the worker but is held behind.
	finishAll(s, run, t0, retryAt(t0), heldBehind(true), heldBehind(false))
	if a1.attempt != 2 || a2.attempt != 2 || a3.attempt != 1 {
		t.Fatalf("attempts a1 %d a2 %d a3 %d, want 2 2 1: a held message counts an attempt only when it did not succeed", a1.attempt, a2.attempt, a3.attempt)
	}
	if got := ids(s.next(t0)[0]); got != "a1 a2 a3" {
		t.Fatalf("next batch %q, want a1 a2 a3 in order", got)
	}
}

func TestSchedulerRoomFIFO(t *testing.T) {
	t.Parallel()
	s := newScheduler(2, 1, 0, true, nil, false)
	// Ten of group a: one runs, nine wait behind it. They block no one (SQS keeps group a
	// locked while watchbot holds them), so one more group may still be received for the
	// other slot.
	for i := 1; i <= 10; i++ {
		s.add(t0, sj(fmt.Sprintf("a%d", i)))
	}
	s.next(t0)
	if got := s.room(); got != 1 {
		t.Fatalf("room = %d, want 1: one free slot", got)
	}
	s.add(t0, sj("b1"))
	if got := s.room(); got != 0 {
		t.Fatalf("room = %d with b1 ready for the free slot, want 0", got)
	}
	s.next(t0)
	if got := s.room(); got != 0 {
		t.Fatalf("room = %d with both slots busy, want 0", got)
	}
	// The hold limit bounds what waits behind running messages: 2 slots × (1 + 10).
	if s.holdLimit != 22 {
		t.Fatalf("holdLimit = %d, want 22", s.holdLimit)
	}
}

func TestSchedulerDropAndDrain(t *testing.T) {
	t.Parallel()
	s := newScheduler(2, 1, 0, true, nil, false)
	a1, a2, a3, b1, b2, c1 := sj("a1"), sj("a2"), sj("a3"), sj("b1"), sj("b2"), sj("c1")
	s.add(t0, a1, a2, a3, b1, b2, c1)
	runs := s.next(t0) // a1, b1
	// b1 fails and waits 30 s in place, b2 behind it.
	finishAll(s, runs[1], t0, retryAt(t0.Add(30*time.Second)))
	s.next(t0) // c1 takes the free slot
	// a2's lease is lost while a1 runs: a2 and what is behind it go; a1 runs on.
	found, wait, behind := s.drop(a2, t0)
	if !found || wait != 0 || ids(behind) != "a3" {
		t.Fatalf("drop(a2) = %v %v %q, want found, no wait, a3 behind", found, wait, ids(behind))
	}
	if found, _, _ := s.drop(a1, t0); found {
		t.Fatal("drop found a1, which is in a run")
	}
	checkBooks(t, s)
	// At a stop, the waiting head keeps what is left of its delay; its successor goes at once.
	got := s.drain(t0.Add(10 * time.Second))
	var desc []string
	for _, g := range got {
		desc = append(desc, fmt.Sprintf("%s+%v", g.j.msg.ID, g.wait))
	}
	if diff := cmp.Diff([]string{"b1+20s", "b2+0s"}, desc); diff != "" {
		t.Fatalf("drain (-want +got):\n%s", diff)
	}
	if s.held != 0 || s.room() != 0 {
		t.Fatalf("after drain: held %d, room %d (two runs open)", s.held, s.room())
	}
	checkBooks(t, s)
}

func TestCompareSequence(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a, b string
		want int
	}{
		{"9", "10", -1},
		{"18849496460467696128", "18849496460467696129", -1},
		{"100000000000000000000", "99999999999999999999", 1},
		{"5", "5", 0},
		{"", "", 0},
	}
	for _, tt := range tests {
		if got := compareSequence(tt.a, tt.b); (got > 0) != (tt.want > 0) || (got < 0) != (tt.want < 0) {
			t.Errorf("compareSequence(%q, %q) = %d, want sign %d", tt.a, tt.b, got, tt.want)
		}
	}
}
