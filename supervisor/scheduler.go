package supervisor

import (
	"slices"
	"sort"
	"time"

	"github.com/watchbot/watchbot/internal/sqsspec"
)

// scheduler decides which held messages start next and how many more may be received. It is
// pure: data in, decisions out, no SQS, no goroutines, no clock of its own (callers pass now).
// The supervisor's loop goroutine owns it.
//
// Its rules:
//   - At most slots runs at once. A run is one message, or in batch mode up to batchSize.
//   - Per-message mode starts a message as soon as a slot is free. Batch mode starts a batch
//     when batchSize messages could go into it, or when window has passed since the oldest of
//     them could.
//   - Messages are kept in groups. On a standard queue every message is a group of its own. On
//     a FIFO queue a group is a MessageGroupId: its messages are kept in SequenceNumber order,
//     and a group with a message in a run starts nothing else until that run has settled, so a
//     group's messages run one at a time, in order. A batch takes a group's messages in order.
//   - A FIFO message retried in place stays at the head of its group and waits out its delay
//     without a slot; its group waits with it.
//   - Room (how many messages to receive): never more than could start at once, counting the
//     messages running and those that could start now. Messages that cannot start (behind their
//     group's running message, or waiting out an in-place retry) do not count there, since their
//     group is locked in SQS while they are held and holding them delays no one; they count
//     against holdLimit instead, which bounds memory.
//   - On a FIFO queue in per-message mode, room counts groups: a free slot takes one new
//     group. SQS fills a receive with as many messages of one group as it can, so a receive
//     asks for the free slots times the messages per group recent receives brought (depth):
//     with deep groups a free slot brings a run of its group in one receive, with shallow
//     ones (a message per group) no more groups come than there are free slots. The run is
//     at most readAhead of work at the jobs' recent duration: what waits behind a running
//     message goes back to SQS at a stop, one more receive on each count, so long jobs get
//     none held behind them.
//   - On a standard queue, a receive may bring more than could start at once (spare): a read-ahead of at
//     most a receive's worth, so the slots that free up while a receive is on its way have
//     work at once. It too is at most readAhead of work across the slots at the jobs' recent
//     duration, and none before a run has ended: a message waiting for a slot is out of every
//     other watchbot's reach, and goes back to SQS at a stop.
type scheduler struct {
	slots int
	// capacity is the slots the listen started with, which the brake lowers slots from.
	capacity  int
	batchSize int
	window    time.Duration
	fifo      bool
	holdLimit int

	runs    int // runs whose worker has not ended
	runMsgs int // messages in those runs
	open    int // runs not yet finished (settled), for idle
	held    int // messages held, in no run

	groups    map[string]*group // FIFO groups by MessageGroupId
	ready     []*group          // groups whose head may start now, in the order they became ready
	readyMsgs int               // messages held in ready groups
	waiting   []*group          // groups whose head waits out an in-place retry
	// depth is the messages per new group recent FIFO receives brought (1 when shallow, up
	// to a receive's 10), averaged; took is the recent worker runs' duration, averaged (0
	// before any).
	depth float64
	took  time.Duration

	// gate, when set, admits each run the slots allow (the limits, limits.go). In the latest
	// pass of next, heldBack ready groups at the front of ready were held back for their
	// key, and gateClosed says the gate admitted no run at all: until the next pass such
	// groups are not counted as startable, and nothing is received while it is closed.
	gate       runGate
	heldBack   int
	gateClosed bool

	// shared: other queues share the slots (slotPool); fill and share are the pool's view
	// of this queue, which room goes on instead of slots (sharedRoom). A queue alone in the
	// pool is granted every free slot, so its slots are its room's bound.
	shared      bool
	fill, share int
}

// runGate decides whether a run may start beyond the slots.
type runGate interface {
	admit(run []*job, now time.Time) verdict
}

// readAhead is how much work (at the jobs' recent duration) a FIFO receive may bring for one
// group: enough to keep a short-job group busy between receives, little enough that a stop,
// which hands the held messages back, costs few of them a receive.
const readAhead = 10 * time.Second

// group is the messages of one message group that watchbot holds, and where the group stands.
type group struct {
	key   string
	jobs  []*job // held, in order
	inRun int    // the group's messages in runs not yet finished
	state groupState
	// readyAt is when the head may start (an in-place retry's end); since is when the group
	// became ready, which starts a batch window.
	readyAt, since time.Time
}

type groupState int

const (
	groupIdle    groupState = iota // in a run, or empty
	groupReady                     // in ready
	groupWaiting                   // in waiting
)

func newScheduler(slots, batchSize int, window time.Duration, fifo bool, gate runGate, shared bool) *scheduler {
	s := &scheduler{slots: slots, capacity: slots, window: window, fifo: fifo, gate: gate, shared: shared, groups: map[string]*group{}, depth: 1}
	s.setBatchSize(batchSize)
	return s
}

// setBatchSize sets the most messages of a run, and the most messages held with it: a batch
// for each slot and a receive's worth. Runs under way keep their size.
func (s *scheduler) setBatchSize(n int) {
	s.batchSize = n
	s.holdLimit = s.capacity * n
	if s.fifo {
		// Room for a receive's worth behind each slot's running message.
		s.holdLimit += s.capacity * sqsspec.MaxReceive
	} else {
		s.holdLimit += sqsspec.MaxReceive // the read-ahead
	}
}

// limit sets how many runs may be under way at once (the brake lowers it); runs under way
// beyond it go on.
func (s *scheduler) limit(n int) { s.slots = n }

// disposition is how a job left its run, as far as scheduling goes.
type disposition struct {
	// keep: the job stays held at its group's head (FIFO): retried in place, or held behind a
	// message of its group that is.
	keep bool
	// returned: the job went back to SQS, or is no longer watchbot's; the group's held
	// messages behind it must go back too.
	returned bool
	// left: the message left the queue (deleted; a dead letter's copy written first), so its
	// dedupe claim may forget the key's runs.
	left bool
	// With keep: when it may start again, and whether the run counted as an attempt.
	at      time.Time
	attempt bool
	// With keep: an outcome to apply again without running the worker (a delete or a
	// dead-letter send that failed).
	pending *outcome
}

// add holds the messages of one receive. A FIFO message joins its group in SequenceNumber
// order.
func (s *scheduler) add(now time.Time, js ...*job) {
	if s.fifo && len(js) > 0 {
		fresh := map[string]bool{}
		for _, j := range js {
			if s.groups[j.msg.GroupID] == nil {
				fresh[j.msg.GroupID] = true
			}
		}
		if len(fresh) > 0 {
			s.depth = (s.depth + float64(len(js))/float64(len(fresh))) / 2
		}
	}
	for _, j := range js {
		s.held++
		if !s.fifo {
			g := &group{key: j.msg.ID, jobs: []*job{j}}
			j.grp = g
			s.place(g, now)
			continue
		}
		g := s.groups[j.msg.GroupID]
		if g == nil {
			g = &group{key: j.msg.GroupID}
			s.groups[g.key] = g
		}
		j.grp = g
		// After every message of the group that is not later: arrival order breaks ties.
		i := sort.Search(len(g.jobs), func(i int) bool { return compareSequence(g.jobs[i].msg.Sequence, j.msg.Sequence) > 0 })
		g.jobs = slices.Insert(g.jobs, i, j)
		switch g.state {
		case groupReady:
			s.readyMsgs++
		case groupIdle:
			if g.inRun == 0 {
				s.place(g, now)
			}
		}
	}
}

// place puts a group that has no run under way where it belongs: ready, waiting, or gone.
func (s *scheduler) place(g *group, now time.Time) {
	switch {
	case len(g.jobs) == 0:
		delete(s.groups, g.key)
	case now.Before(g.readyAt):
		g.state = groupWaiting
		s.waiting = append(s.waiting, g)
	default:
		g.state, g.since = groupReady, now
		s.ready = append(s.ready, g)
		s.readyMsgs += len(g.jobs)
	}
}

// promote makes ready the waiting groups whose time has come.
func (s *scheduler) promote(now time.Time) {
	s.waiting = slices.DeleteFunc(s.waiting, func(g *group) bool {
		if now.Before(g.readyAt) {
			return false
		}
		g.state = groupIdle
		s.place(g, now)
		return true
	})
}

// next returns the runs to start now and counts them as running. With a gate, each run the
// slots allow starts only if the gate admits it: a run whose key is full is passed over for
// the next ready one (heldBack counts them), and a gate closed to every run ends the pass.
func (s *scheduler) next(now time.Time) [][]*job { return s.nextUpTo(now, s.slots) }

// startable returns how many slots a queue asks the pool for: alone, every slot free within
// the brake's limit, so that its pass tries again at every step the groups held back for
// their key and a gate that was closed; sharing the slots, how many runs next could start
// now within them, leaving out the groups the latest pass held back for their key, and none
// while the gate is closed (until the limiter says a refused start may now succeed). A
// queue that asked for slots its gate then refuses would hand them back only to ask again,
// with every other queue woken each time.
func (s *scheduler) startable(now time.Time) int {
	s.promote(now)
	free := s.slots - s.runs
	if !s.shared {
		return max(0, free)
	}
	ready := len(s.ready) - s.heldBack
	if free <= 0 || ready <= 0 || s.gateClosed {
		return 0
	}
	if s.batchSize == 1 {
		return min(free, ready)
	}
	if s.readyMsgs < s.batchSize && now.Before(s.ready[0].since.Add(s.window)) {
		return 0
	}
	return min(free, (s.readyMsgs+s.batchSize-1)/s.batchSize)
}

// nextUpTo is next starting at most n runs.
func (s *scheduler) nextUpTo(now time.Time, n int) [][]*job {
	s.promote(now)
	s.heldBack, s.gateClosed = 0, false
	var runs [][]*job
	for s.runs < s.slots && len(s.ready) > s.heldBack && len(runs) < n {
		if s.batchSize > 1 && s.readyMsgs < s.batchSize && now.Before(s.ready[0].since.Add(s.window)) {
			break
		}
		// In per-message mode the run is the head of a ready group; held-back groups keep
		// their place at the front of ready.
		at := s.heldBack
		if s.gate != nil {
			switch s.gate.admit(s.candidate(at), now) {
			case keyFull:
				s.heldBack++
				continue
			case closed:
				s.gateClosed = true
				return runs
			}
		}
		runs = append(runs, s.take(at))
	}
	return runs
}

// limitsChanged is told that a start the limiter refused, over all keys or for a key, may
// now succeed: the groups held back count as startable again, and the gate is open until
// the next pass finds otherwise.
func (s *scheduler) limitsChanged() { s.gateClosed, s.heldBack = false, 0 }

// gateShut records that the limits admit no run until they change: the latest pass started
// nothing the gate looked at, or a pause is in force.
func (s *scheduler) gateShut() { s.gateClosed = true }

// heldBackDue counts the groups held back for their key as startable again, so that the
// next pass finds those held back past --limit-wait.
func (s *scheduler) heldBackDue() { s.heldBack = 0 }

// heldBackLeft is told that a group held back for its key was handed back (--limit-wait).
func (s *scheduler) heldBackLeft() { s.heldBack = max(0, s.heldBack-1) }

// sharedView records the shared slots' view of this queue: the slots it could take now
// (fill) and its share of them, which room goes on (sharedRoom).
func (s *scheduler) sharedView(fill, share int) { s.fill, s.share = fill, share }

// load returns the runs under way, and the messages held or running, for the gauges.
func (s *scheduler) load() (running, held int) { return s.runs, s.held + s.runMsgs }

// candidate returns the run that take(at) would start, without taking it.
func (s *scheduler) candidate(at int) []*job {
	if s.batchSize == 1 {
		return s.ready[at].jobs[:1]
	}
	var run []*job
	for _, g := range s.ready {
		run = append(run, g.jobs[:min(len(g.jobs), s.batchSize-len(run))]...)
		if len(run) == s.batchSize {
			break
		}
	}
	return run
}

// take starts the next run: the head of the ready group at (per-message mode), or a batch
// from the ready groups in order.
func (s *scheduler) take(at int) []*job {
	var run []*job
	for len(s.ready) > at && len(run) < s.batchSize {
		g := s.ready[at]
		n := min(len(g.jobs), s.batchSize-len(run))
		if s.batchSize == 1 {
			n = 1
		}
		run = append(run, g.jobs[:n]...)
		g.jobs = slices.Clone(g.jobs[n:])
		g.inRun += n
		s.readyMsgs -= n
		if s.fifo || len(g.jobs) == 0 || s.batchSize == 1 {
			// A FIFO group starts nothing else until this run has settled.
			s.ready = slices.Delete(s.ready, at, at+1)
			s.readyMsgs -= len(g.jobs)
			g.state = groupIdle
		}
		if s.batchSize == 1 {
			break
		}
	}
	s.held -= len(run)
	s.runs++
	s.open++
	s.runMsgs += len(run)
	return run
}

// wake returns when next could start something without any other event: the end of an
// in-place retry, or of a batch window while a slot is free. Zero means never. A batch
// window already over at now is none: the pass just made found the batch due and did not
// start it, because the limits or the shared slots held it back, and those wake the loop
// themselves (the limiter's Changed and the gate's retry, the pool's grant); a wake-up at
// once would only find the same, again and again.
func (s *scheduler) wake(now time.Time) time.Time {
	var at time.Time
	earlier := func(t time.Time) {
		if at.IsZero() || t.Before(at) {
			at = t
		}
	}
	for _, g := range s.waiting {
		earlier(g.readyAt)
	}
	if s.batchSize > 1 && s.runs < s.slots && len(s.ready) > 0 {
		if end := s.ready[0].since.Add(s.window); end.After(now) {
			earlier(end)
		}
	}
	return at
}

// ended frees the slot of a run whose worker has ended after took (0 when no worker ran);
// its messages may still be settling.
func (s *scheduler) ended(run []*job, took time.Duration) {
	s.runs--
	s.runMsgs -= len(run)
	if took > 0 {
		if s.took == 0 {
			s.took = took
		} else {
			s.took = (3*s.took + took) / 4
		}
	}
}

// empty reports that nothing is held or running.
func (s *scheduler) empty() bool { return s.held == 0 && s.open == 0 }

// idle reports that no run is under way or settling.
func (s *scheduler) idle() bool { return s.open == 0 }

// compareSequence orders two FIFO SequenceNumbers: decimal strings of up to 128 bits, so the
// shorter is the smaller and equal lengths compare as text.
func compareSequence(a, b string) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
