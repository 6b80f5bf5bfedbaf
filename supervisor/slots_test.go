package supervisor

import (
	"math"
	"testing"
)

// poolSim drives a slotPool as the queues' loops do: each queue wants what it has waiting,
// starts what it is granted, and a run's end gives its slot back, oldest run first.
type poolSim struct {
	p       *slotPool
	waiting []int // messages each queue has waiting (-1: endless backlog)
	runs    []int // queue of each run under way, oldest first
	starts  []int // starts per queue
}

func newPoolSim(total int, policy QueuePolicy, weights, reserves, waiting []int) *poolSim {
	return &poolSim{p: newSlotPool(total, policy, weights, reserves), waiting: waiting, starts: make([]int, len(weights))}
}

// step lets every queue acquire what it waits for, in order, and starts what it gets.
func (s *poolSim) step() {
	for i := range s.waiting {
		want := s.waiting[i]
		if want < 0 {
			want = 1000
		}
		n := s.p.acquire(i, 0, want)
		for range n {
			s.runs = append(s.runs, i)
			s.starts[i]++
			if s.waiting[i] > 0 {
				s.waiting[i]--
			}
		}
	}
}

// end ends the oldest run.
func (s *poolSim) end() {
	q := s.runs[0]
	s.runs = s.runs[1:]
	s.p.release(q, 1)
}

func TestSlotPoolSplit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		policy    QueuePolicy
		total     int
		weights   []int
		reserves  []int
		waiting   []int
		rounds    int
		wantShare []float64 // of the starts, per queue
	}{
		{"weighted 3:1 backlogged", PolicyWeighted, 8, []int{3, 1}, []int{0, 0}, []int{-1, -1}, 400, []float64{0.75, 0.25}},
		{"weighted equal", PolicyWeighted, 8, []int{1, 1}, []int{0, 0}, []int{-1, -1}, 400, []float64{0.5, 0.5}},
		{"weighted 1:1:2", PolicyWeighted, 5, []int{1, 1, 2}, []int{0, 0, 0}, []int{-1, -1, -1}, 400, []float64{0.25, 0.25, 0.5}},
		{"weighted, one queue idle", PolicyWeighted, 8, []int{3, 1}, []int{0, 0}, []int{0, -1}, 400, []float64{0, 1}},
		{"strict: the first queue takes every slot", PolicyStrict, 8, []int{1, 1}, []int{0, 0}, []int{-1, -1}, 400, []float64{1, 0}},
		{"strict: the second runs when the first is idle", PolicyStrict, 8, []int{1, 1}, []int{0, 0}, []int{0, -1}, 400, []float64{0, 1}},
		{"strict with a reserve for the second", PolicyStrict, 4, []int{1, 1}, []int{0, 1}, []int{-1, -1}, 400, []float64{0.75, 0.25}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newPoolSim(tt.total, tt.policy, tt.weights, tt.reserves, tt.waiting)
			s.step()
			before := append([]int(nil), s.starts...)
			for range tt.rounds {
				s.end()
				s.step()
			}
			for i, want := range tt.wantShare {
				got := float64(s.starts[i]-before[i]) / float64(tt.rounds)
				if math.Abs(got-want) > 0.02 {
					t.Errorf("queue %d took %.3f of the starts, want %.3f (starts %v)", i, got, want, s.starts)
				}
			}
			if len(s.runs) != tt.total {
				t.Errorf("%d runs under way, want every slot (%d) busy", len(s.runs), tt.total)
			}
		})
	}
}

// A slot that frees while the first queue (strict) waits is kept for it: the queue whose run
// ended cannot take it back, however deep its backlog.
func TestSlotPoolFreedSlotKeptForWaitingQueue(t *testing.T) {
	t.Parallel()
	for _, policy := range []QueuePolicy{PolicyStrict, PolicyWeighted} {
		t.Run(string(policy), func(t *testing.T) {
			p := newSlotPool(8, policy, []int{1, 1}, []int{0, 0})
			if n := p.acquire(1, 0, 500); n != 8 {
				t.Fatalf("bulk got %d slots, want 8", n)
			}
			if n := p.acquire(0, 0, 1); n != 0 {
				t.Fatalf("urgent got %d slots while all are busy", n)
			}
			p.release(1, 1) // a bulk run ends
			if n := p.acquire(1, 0, 492); n != 0 {
				t.Fatalf("bulk took back the freed slot (%d) while urgent waits", n)
			}
			select {
			case <-p.qs[0].wake:
			default:
				t.Fatal("urgent's loop was not woken")
			}
			if n := p.acquire(0, 0, 1); n != 1 {
				t.Fatalf("urgent got %d slots, want the freed one", n)
			}
		})
	}
}

// A reserved slot stays free for its queue while another queue has a backlog, and goes to
// its queue at once.
func TestSlotPoolReserve(t *testing.T) {
	t.Parallel()
	p := newSlotPool(4, PolicyWeighted, []int{1, 1}, []int{1, 0})
	if n := p.acquire(1, 0, 100); n != 3 {
		t.Fatalf("bulk got %d slots, want 3 (one reserved)", n)
	}
	p.release(1, 1)
	if n := p.acquire(1, 0, 100); n != 1 {
		t.Fatalf("bulk got %d slots back, want 1", n)
	}
	if fill, _ := p.view(1); fill != 0 {
		t.Errorf("bulk may fill %d more slots, want 0: the free one is reserved", fill)
	}
	if fill, _ := p.view(0); fill != 1 {
		t.Errorf("urgent may fill %d slots, want its reserved 1", fill)
	}
	if n := p.acquire(0, 0, 2); n != 1 {
		t.Fatalf("urgent got %d slots, want its reserved 1", n)
	}
}

// Slots granted to a queue that no longer has the runs waiting go back to the pool.
func TestSlotPoolGrantReturned(t *testing.T) {
	t.Parallel()
	p := newSlotPool(2, PolicyStrict, []int{1, 1}, []int{0, 0})
	p.acquire(1, 0, 10)
	p.acquire(0, 0, 1) // waits
	p.release(1, 1)    // granted to queue 0
	if n := p.acquire(0, 0, 0); n != 0 {
		t.Fatalf("queue 0 started %d runs with none waiting", n)
	}
	if n := p.acquire(1, 0, 10); n != 1 {
		t.Fatalf("queue 1 got %d slots, want the slot queue 0 gave back", n)
	}
}

func TestSlotPoolShare(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		policy    QueuePolicy
		weights   []int
		reserves  []int
		waiting   []int
		wantShare []int
	}{
		{"weighted, both with work", PolicyWeighted, []int{3, 1}, []int{0, 0}, []int{5, 5}, []int{6, 2}},
		{"weighted, the other idle", PolicyWeighted, []int{3, 1}, []int{0, 0}, []int{0, 0}, []int{8, 8}},
		{"weighted, one idle", PolicyWeighted, []int{3, 1}, []int{0, 0}, []int{0, 5}, []int{6, 8}},
		{"strict, both with work", PolicyStrict, []int{1, 1}, []int{0, 0}, []int{5, 5}, []int{8, 0}},
		{"strict, the first idle", PolicyStrict, []int{1, 1}, []int{0, 0}, []int{0, 5}, []int{8, 8}},
		{"strict, a reserve", PolicyStrict, []int{1, 1}, []int{0, 2}, []int{5, 5}, []int{6, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newSlotPool(8, tt.policy, tt.weights, tt.reserves)
			for i, w := range tt.waiting {
				p.qs[i].waiting = w
			}
			for i, want := range tt.wantShare {
				if got := p.share(i); got != want {
					t.Errorf("queue %d: share %d, want %d", i, got, want)
				}
			}
		})
	}
}
