package supervisor

import (
	"time"

	"github.com/watchbot/watchbot/internal/sqsspec"
)

// How much the scheduler may receive: its room, the read-ahead beyond what could start at
// once, and whether what is held runs within a stop's window. Pure, as the rest of the
// scheduler: its books in, a number out.

// room returns how many messages may be received now.
func (s *scheduler) room() int {
	if s.gateClosed {
		return 0 // nothing may start: what is received would only wait
	}
	if s.shared {
		return s.sharedRoom()
	}
	if s.fifo && s.batchSize == 1 {
		return s.groupRoom(s.slots - s.runMsgs - (len(s.ready) - s.heldBack)) // groups that could start at once
	}
	return min(sqsspec.MaxReceive, s.roomBeyond(0))
}

// roomBeyond is a standard queue's room, uncapped by a receive's most, less inbound: the
// messages receives under way may bring.
func (s *scheduler) roomBeyond(inbound int) int {
	if s.gateClosed {
		return 0
	}
	startable := s.readyMsgs
	if s.batchSize == 1 {
		startable = len(s.ready) - s.heldBack
	}
	return max(0, min(s.slots*s.batchSize+s.spare()-s.runMsgs-startable, s.holdLimit-s.held)-inbound)
}

// groupRoom is a FIFO queue's room in per-message mode for free new groups: free times the
// messages per group recent receives brought, at most readAhead of work per group.
func (s *scheduler) groupRoom(free int) int {
	if free <= 0 {
		return 0
	}
	perGroup := s.depth
	if s.took > 0 {
		perGroup = min(perGroup, max(1, float64(readAhead)/float64(s.took)))
	}
	return max(0, min(sqsspec.MaxReceive, int(float64(free)*perGroup), s.holdLimit-s.held))
}

// sharedRoom is room when the slots are shared with other queues: enough for the slots this
// queue could take now (fill), and a read-ahead counted against its share (sharedAhead), so
// that it keeps receiving while every slot is busy and its next message is at hand when a
// slot goes to it, but holds no more than its share lets it start soon.
func (s *scheduler) sharedRoom() int {
	ahead := s.sharedAhead()
	if s.fifo && s.batchSize == 1 {
		return s.groupRoom(s.fill + ahead - (len(s.ready) - s.heldBack)) // groups that could start soon
	}
	startable := s.readyMsgs
	if s.batchSize == 1 {
		startable = len(s.ready) - s.heldBack
	}
	return max(0, min(sqsspec.MaxReceive, s.fill*s.batchSize+ahead-startable, s.holdLimit-s.held))
}

// sharedAhead is the read-ahead of a queue that shares the slots: a receive's worth, or
// readAhead of work across its share of the slots at the jobs' recent duration when that is
// less, and the share's worth of messages before a run has ended; at least one message while
// the share has a slot, none while it has none.
func (s *scheduler) sharedAhead() int {
	ahead := s.share * s.batchSize
	if ahead == 0 {
		return 0
	}
	if s.took > 0 {
		ahead = max(1, int(float64(ahead)*float64(readAhead)/float64(s.took)))
	}
	return min(sqsspec.MaxReceive, ahead)
}

// spare is the read-ahead of a standard queue: how many messages
// may be held beyond what could start at once. It is a receive's worth, or readAhead of work
// across the slots at the jobs' recent duration when that is less; none before a run has
// ended, when the duration is not known.
func (s *scheduler) spare() int {
	if s.fifo || s.took == 0 {
		return 0
	}
	return int(min(float64(sqsspec.MaxReceive), float64(s.slots*s.batchSize)*float64(readAhead)/float64(s.took)))
}

// runsBy reports whether the messages waiting for a slot would all have run by deadline at
// the jobs' recent duration, twice over for margin: a round of the slots for the runs under
// way, then a round for each slotful waiting. Before a run has ended the duration is not
// known: then only what starts at once in the free slots runs, and has until deadline, as
// the runs under way do. Past deadline nothing more runs.
func (s *scheduler) runsBy(now, deadline time.Time) bool {
	if !now.Before(deadline) {
		return s.readyMsgs == 0
	}
	if s.took == 0 {
		return s.readyMsgs <= max(0, s.slots-s.runs)*s.batchSize
	}
	capacity := s.slots * s.batchSize
	rounds := 1 + (s.readyMsgs+capacity-1)/capacity
	return !now.Add(2 * time.Duration(rounds) * s.took).After(deadline)
}

// refill reports whether a receive for less than target should start now: the read-ahead
// would run dry before a receive answers, at the rate the slots take messages (their count
// over the jobs' recent duration) and twice the receives' recent latency. Then half a
// receive's room is enough to ask for, so the slots that free meanwhile find work; with long
// jobs, or no read-ahead, it never is.
func (s *scheduler) refill(latency time.Duration) bool {
	if s.spare() == 0 || s.room() < sqsspec.MaxReceive/2 {
		return false
	}
	rate := float64(s.slots*s.batchSize) / s.took.Seconds()
	return float64(s.readyMsgs) <= rate*2*latency.Seconds()
}

// deep reports that recent FIFO receives brought several messages per group: a receive then
// fills from one group, so a larger one does not bring more groups.
func (s *scheduler) deep() bool { return s.fifo && s.batchSize == 1 && s.depth >= 2 }

// target is the room worth a receive without waiting for more: a full receive, or the
// capacity when it is smaller.
func (s *scheduler) target() int {
	if s.shared {
		// The most room this queue can have now: waiting for more leaves its slots idle.
		return max(1, min(sqsspec.MaxReceive, s.fill*s.batchSize+s.sharedAhead()))
	}
	return min(sqsspec.MaxReceive, s.slots*s.batchSize+s.spare())
}
