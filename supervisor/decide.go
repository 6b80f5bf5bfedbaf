package supervisor

import (
	"time"

	"github.com/watchbot/watchbot/internal/sqsspec"
)

// The loop's decisions, as pure methods of the scheduler: its books and the loop's state in,
// what to do out. The loop (loop.go) carries them out.

// receiveState is what a receive decision goes on beyond the scheduler's books.
type receiveState struct {
	gate brakeGate
	// lastEmpty: the last receive brought nothing (a long poll waits anyway).
	lastEmpty bool
	// gather is --receive-gather, how long to wait for more room (0: never); gatherUntil is
	// when the wait under way ends (zero: none).
	gather      time.Duration
	gatherUntil time.Time
	// latency is how long recent receives that brought messages took to answer, averaged.
	latency time.Duration
	// polls is how many receives are under way, and inbound how many messages they asked
	// for; lastFull: the last receive brought all it asked for, so the queue has a backlog,
	// and was not retried.
	polls, inbound int
	lastFull       bool
}

// maxPolls is how many receives may be under way at once. One receive answers at most
// sqsspec.MaxReceive messages, and the next is asked for only once its answer is in: with
// room for several receives' worth (batches, many slots) a lone receive leaves the slots
// waiting on its round trip. A few at once keep a receive at SQS while the last answer is
// held and started; more would only hold messages longer.
const maxPolls = 4

// receivePlan is a receive decision.
type receivePlan struct {
	// n is how many messages to ask for now; 0 asks for none.
	n int
	// gatherUntil is when the wait for more room ends (zero: none under way); wake is when
	// to decide again without another event (zero: never).
	gatherUntil, wake time.Time
}

// receive decides whether to ask for messages now, and how many, when no receive is under
// way and no stop was requested. With few slots free it waits a moment for more (gather),
// so a busy supervisor makes few, full receives; not when the queue was empty last time (a
// long poll waits anyway), nor on a FIFO queue whose groups are deep: a receive then fills
// from one group, so waiting for more room would not bring more groups, only leave slots
// idle. Braking, one message is received to probe with, when the next probe is due, and none
// while a probe is held.
func (s *scheduler) receive(now time.Time, st receiveState) receivePlan {
	if st.polls > 0 {
		return receivePlan{n: s.another(st), gatherUntil: st.gatherUntil}
	}
	room := s.room()
	gate := st.gate
	if gate.braking {
		room = min(room, 1)
		if gate.hold || now.Before(gate.receiveAt) {
			room = 0
		}
	}
	p := receivePlan{gatherUntil: st.gatherUntil}
	if room == 0 {
		p.gatherUntil = time.Time{} // nothing to gather for: no wake-up for it
	}
	enough := room >= s.target() || st.lastEmpty || st.gather == 0 || s.deep() || gate.braking || s.refill(st.latency)
	if room > 0 && !enough && p.gatherUntil.IsZero() {
		p.gatherUntil = now.Add(st.gather)
	}
	if room > 0 && (enough || !now.Before(p.gatherUntil)) {
		p.n, p.gatherUntil = room, time.Time{}
	}
	p.wake = p.gatherUntil
	if gate.braking && !gate.hold && now.Before(gate.receiveAt) {
		p.wake = gate.receiveAt
	}
	return p
}

// another is how many messages a receive asked for while others are under way brings: a
// full receive's worth, when the queue has a backlog (the last receive came back full) and the
// room, less what the receives under way asked for, has that much beyond them; none
// otherwise. A FIFO queue has one receive at a time: its groups and its retried receives'
// attempt ids go by it. So have shared slots, whose room is the pool's to give, and a brake.
func (s *scheduler) another(st receiveState) int {
	if s.fifo || s.shared || st.gate.braking || !st.lastFull || st.polls >= maxPolls {
		return 0
	}
	if s.roomBeyond(st.inbound) < sqsspec.MaxReceive {
		return 0
	}
	return sqsspec.MaxReceive
}

// drainPlan is what a stop's drain does next. While a receive is under way it does nothing:
// the long poll is left to answer, since a message SQS gives a poll that was cancelled
// stays out of every consumer's reach for --receive-visibility, and what it brings joins the
// drain.
type drainPlan struct {
	// handBackNow: no receive is under way, so what was put off is handed back now, with what
	// is held when drainHeld; over: no run is under way either, and the drain is over.
	handBackNow, drainHeld, over bool
}

// draining decides a stop's next step. receiving says a receive is under way (hand-backs
// then wait for it to end: what it brings could otherwise take them at once), runHeld that
// what is held runs in the drain rather than go back. With no run under way once the
// runs that could start have started, what is still held cannot start now (a limit or a
// pause holds it, or its retry in place is not due): it goes back rather than wait past the
// drain's end, unrenewed.
func (s *scheduler) draining(receiving, runHeld bool) drainPlan {
	if receiving {
		return drainPlan{}
	}
	return drainPlan{handBackNow: true, drainHeld: !runHeld || s.idle(), over: s.idle()}
}
