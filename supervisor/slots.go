package supervisor

import (
	"slices"
	"sync"
)

// QueuePolicy is how the worker slots that several queues share go to them (--queue-policy).
type QueuePolicy string

// The --queue-policy values.
const (
	// PolicyWeighted gives the free slots to the queues with work in proportion to their
	// weights (smooth weighted round-robin of starts).
	PolicyWeighted QueuePolicy = "weighted"
	// PolicyStrict gives a free slot to the first queue, in the order given, with work. It
	// never stops a running job.
	PolicyStrict QueuePolicy = "strict"
)

// slotPool shares --concurrency worker slots among the loops of a listen's queues, one or
// several (a single queue is a pool of one seat, granted every free slot it asks for). Each loop
// says how many runs it could start now (acquire), and starts what it is granted; a run's
// end gives its slot back (release). A slot freed while other queues wait goes to the queue
// the policy picks, kept for it (granted) until its loop, woken, takes it up: no other queue
// can take it meanwhile, so a message waiting on a high-priority queue takes the next slot
// that frees, however deep the other backlogs are.
//
// Its rules, as data in and decisions out under one lock held only to compute them:
//   - A queue may take a slot only while more slots are free than the other queues' unmet
//     reserves (--queue-reserve: a reserve is unmet by the slots its queue neither runs nor
//     was granted). So reserved slots stay free for their queue; a queue within its own
//     reserve always finds one.
//   - Among the queues that may take a slot and have a run waiting, weighted picks by smooth
//     weighted round-robin (each pick adds each candidate's weight to its credit, takes the
//     highest credit, and takes the candidates' total weight off the winner), strict the
//     first in the order given.
//   - share (share) is the slots the policy would give a queue if it had work now, beside the
//     queues that have work: it bounds the queue's read-ahead, so messages received ahead of
//     a slot are counted against their queue's share.
//
// Wake-ups go out after the lock is released, on channels that hold one each, so neither a
// loop nor the pool ever waits on the other.
type slotPool struct {
	mu     sync.Mutex
	total  int
	policy QueuePolicy
	qs     []*poolQueue
}

// poolQueue is one queue's books in the pool.
type poolQueue struct {
	weight, reserve int
	running         int // slots in use: runs started whose worker has not ended
	granted         int // slots kept for the queue, not yet taken up
	waiting         int // runs the queue could start now, as it last said
	credit          int // smooth weighted round-robin credit
	// wake holds one wake-up for the queue's loop: a slot was granted, or its share grew.
	wake chan struct{}
}

// newSlotPool returns a pool of total slots for queues with these weights and reserves (in
// the order given).
func newSlotPool(total int, policy QueuePolicy, weights, reserves []int) *slotPool {
	p := &slotPool{total: total, policy: policy}
	for i := range weights {
		p.qs = append(p.qs, &poolQueue{weight: weights[i], reserve: reserves[i], wake: make(chan struct{}, 1)})
	}
	return p
}

// acquire gives back the slots of queue i's runs that ended since its last call, records
// that it could start want runs now, hands out the free slots, and returns how many runs
// queue i may start: they count as running from now on. Slots granted beyond want go back
// to the pool. Ended runs are given back here rather than as they end, so that the policy
// judges the freed slots with what the queue has waiting now: a queue whose run ended cannot
// take its slot back from a queue ahead of it on the strength of a stale account.
func (p *slotPool) acquire(i, ended, want int) int {
	p.mu.Lock()
	q := p.qs[i]
	q.running -= ended
	q.waiting = max(0, want)
	q.granted = min(q.granted, q.waiting)
	wake := p.distribute(i)
	if ended > 0 && p.free() > 0 {
		wake = p.wakeOthers(wake, i)
	}
	n := q.granted
	q.running += n
	q.waiting -= n
	q.granted = 0
	p.mu.Unlock()
	p.signal(wake)
	return n
}

// release gives back n slots of queue i: runs ended, or slots acquired and not used.
func (p *slotPool) release(i, n int) {
	if n <= 0 {
		return
	}
	p.mu.Lock()
	p.qs[i].running -= n
	wake := p.distribute(i)
	if p.free() > 0 {
		wake = p.wakeOthers(wake, i)
	}
	p.mu.Unlock()
	p.signal(wake)
}

// wakeOthers adds to wake every queue but i: a slot that no queue waits for leaves room for
// their read-ahead. The lock is held.
func (p *slotPool) wakeOthers(wake []int, i int) []int {
	for j := range p.qs {
		if j != i && !slices.Contains(wake, j) {
			wake = append(wake, j)
		}
	}
	return wake
}

// view returns what queue i's receives go on: fill, the slots it could take now, and share,
// the slots its policy gives it beside the queues that have work.
func (p *slotPool) view(i int) (fill, share int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := p.qs[i]
	return q.granted + max(0, p.free()-p.unmetBesides(i)), p.share(i)
}

// free is the slots neither running nor granted. The lock is held.
func (p *slotPool) free() int {
	n := p.total
	for _, q := range p.qs {
		n -= q.running + q.granted
	}
	return n
}

// unmetBesides is the reserved slots of the queues other than i that they neither run nor
// were granted. The lock is held.
func (p *slotPool) unmetBesides(i int) int {
	n := 0
	for j, q := range p.qs {
		if j != i {
			n += max(0, q.reserve-q.running-q.granted)
		}
	}
	return n
}

// share is the slots queue i's policy gives it when it has work, beside the queues with
// work now. The lock is held.
func (p *slotPool) share(i int) int {
	q := p.qs[i]
	busy := func(o *poolQueue) bool { return o == q || o.running+o.granted+o.waiting > 0 }
	othersReserve := 0
	for j, o := range p.qs {
		if j != i && busy(o) {
			othersReserve += o.reserve
		}
	}
	open := p.total - othersReserve
	switch p.policy {
	case PolicyStrict:
		for _, o := range p.qs[:i] {
			if busy(o) {
				return q.reserve
			}
		}
		return open
	default:
		sum := 0
		for _, o := range p.qs {
			if busy(o) {
				sum += o.weight
			}
		}
		return min(open, max(q.reserve, (p.total*q.weight+sum-1)/sum))
	}
}

// distribute grants the free slots, one at a time, to the queues the policy picks among
// those that may take one and wait for one, and returns the queues other than self to
// wake. The lock is held.
func (p *slotPool) distribute(self int) (wake []int) {
	for free := p.free(); free > 0; free-- {
		i := p.pick(free)
		if i < 0 {
			break
		}
		p.qs[i].granted++
		if i != self && p.qs[i].granted == 1 {
			wake = append(wake, i)
		}
	}
	return wake
}

// pick returns the queue that the next of free slots goes to, or -1 when none may take it.
// The lock is held.
func (p *slotPool) pick(free int) int {
	best, sum := -1, 0
	for i, q := range p.qs {
		if q.waiting-q.granted <= 0 || free <= p.unmetBesides(i) {
			continue
		}
		if p.policy == PolicyStrict {
			return i
		}
		q.credit += q.weight
		sum += q.weight
		if best < 0 || q.credit > p.qs[best].credit {
			best = i
		}
	}
	if best >= 0 {
		p.qs[best].credit -= sum
	}
	return best
}

// signal wakes the loops of the queues listed; a wake-up already pending stands for the new
// one.
func (p *slotPool) signal(queues []int) {
	for _, i := range queues {
		select {
		case p.qs[i].wake <- struct{}{}:
		default:
		}
	}
}

// leave gives up what queue i waits for and was granted, at its loop's end.
func (p *slotPool) leave(i int) {
	p.mu.Lock()
	q := p.qs[i]
	q.waiting, q.granted = 0, 0
	wake := p.distribute(i)
	p.mu.Unlock()
	p.signal(wake)
}

// slotSeat is one queue's handle on the slots of its listen's pool: a pool of one seat for
// a single queue, which has every slot to itself.
type slotSeat struct {
	pool *slotPool
	i    int
}

// seat returns queue i's handle on the pool.
func (p *slotPool) seat(i int) *slotSeat { return &slotSeat{pool: p, i: i} }

func (h *slotSeat) acquire(ended, want int) int { return h.pool.acquire(h.i, ended, want) }

func (h *slotSeat) release(n int) { h.pool.release(h.i, n) }

func (h *slotSeat) view() (fill, share int) { return h.pool.view(h.i) }

func (h *slotSeat) leave() { h.pool.leave(h.i) }

// shared reports whether other queues share the slots: a queue alone needs no read-ahead to
// claim a slot, and wakes no other queue when it asks for slots its gate then refuses.
func (h *slotSeat) shared() bool { return len(h.pool.qs) > 1 }

// granted receives when the pool granted the queue a slot or its share may have grown; only
// another queue's step sends on it.
func (h *slotSeat) granted() <-chan struct{} { return h.pool.qs[h.i].wake }
