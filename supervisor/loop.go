package supervisor

import (
	"context"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/alarms"
)

// loop is the state of the loop goroutine, which owns the scheduler. It holds what the
// receive loop brings, starts what the scheduler says, and keeps the scheduler's books as
// runs end and settle and as the heartbeat stops held messages. It asks for messages
// while there is room and no stop was requested. Once a stop is requested (or --once has
// started its message) it hands back every held message, and it returns when no run or
// receive is under way. What to do is the scheduler's decision (receive, draining, in
// decide.go); loop carries it out.
type loop struct {
	s       *Supervisor
	sched   *scheduler
	slots   int
	asks    chan<- receiveAsk
	answers <-chan receiveAnswer
	timer   *time.Timer

	stopping bool
	// stopRequested is the stop request, nil once it has been seen.
	stopRequested <-chan struct{}
	// drainsReadAhead: a stop may run what is held but not started, rather than hand it back
	// (a standard queue, per message, not --once); drainEnds is when its window closes.
	drainsReadAhead bool
	drainEnds       time.Time
	// rs is what receive decisions go on beyond the scheduler's books, the receives under
	// way among them.
	rs receiveState
	// later holds hand-backs put off while a stop waits for a receive under way: a message
	// made visible then would be taken by that very receive and released again, one more
	// receive on its count for nothing.
	later             []handBack
	received, started int
	// pool is this queue's seat in the slots of the listen's queues; ended is how many runs
	// ended since the pool was last told.
	pool  *slotSeat
	ended int
}

// loop runs the loop goroutine until the drain is over, closing asks, and returns how many
// messages were received. stop is the stop request; runs run on jobs.
func (s *Supervisor) loop(stop, jobs context.Context, asks chan<- receiveAsk, answers <-chan receiveAnswer) int {
	defer close(asks)
	l := &loop{s: s, slots: s.brake.concurrency, asks: asks, answers: answers, timer: time.NewTimer(time.Hour),
		stopRequested: stop.Done(), drainsReadAhead: !s.fifo && !s.cfg.Once && s.cfg.BatchSize == 1,
		rs: receiveState{lastEmpty: true, gather: s.cfg.ReceiveGather}, pool: s.slots}
	l.sched = newScheduler(l.slots, s.cfg.BatchSize, s.cfg.BatchWindow, s.fifo, s.gate, s.slots.shared())
	defer l.pool.leave()
	defer l.timer.Stop()
	defer func() { s.load.set(time.Now(), loadState{slots: l.slots}) }()
	for !l.step(jobs, time.Now()) {
		select {
		case a := <-l.answers:
			l.onReceived(a)
		case e := <-s.events:
			if e.finished {
				l.onRunSettled(e)
			} else {
				l.onWorkerEnded(e)
			}
		case <-s.heldStops.ready:
			l.onHeldStopped()
		case <-l.timer.C:
		case <-s.limitsChanged:
			l.sched.limitsChanged()
		case <-l.pool.granted():
		case <-l.stopRequested:
			l.beginDrain()
		}
	}
	return l.received
}

// step does what the scheduler says now: it starts runs, and asks for messages, or drains
// at a stop; then it sets the timer for the next decision that no event brings. It reports
// whether the drain is over.
func (l *loop) step(jobs context.Context, now time.Time) (over bool) {
	gate := l.s.runGate()
	l.sched.limit(gate.limit)
	l.rs.gate = gate
	// A stop runs a standard queue's read-ahead in its drain when it fits the shutdown
	// window, rather than hand it back: every message handed back is received again, one
	// more receive on its count toward the redrive policy.
	runHeld := l.stopping && l.drainsReadAhead && l.sched.runsBy(now, l.drainEnds)
	if !l.stopping || runHeld {
		l.startRuns(jobs, now) // --once stops here once its message has started
	} else {
		l.pool.acquire(l.ended, 0) // nothing starts: slots kept for this queue go to the others
		l.ended = 0
	}
	l.sched.sharedView(l.pool.view())
	var wake time.Time
	if l.stopping {
		if l.drain(now, l.sched.draining(l.rs.polls > 0, runHeld)) {
			return true
		}
	} else {
		wake = l.ask(now)
	}
	running, held := l.sched.load()
	l.s.load.set(now, loadState{slots: l.slots, limit: gate.limit, running: running, held: held,
		active: !l.sched.empty(), braking: gate.braking})
	if wake.IsZero() {
		l.timer.Stop()
	} else {
		l.timer.Reset(time.Until(wake))
	}
	return false
}

// startRuns starts the runs that the slots, the scheduler and the limits say can start, and
// releases the messages held back for their key past --limit-wait; --once stops once one
// has started.
func (l *loop) startRuns(jobs context.Context, now time.Time) {
	for _, run := range l.nextRuns(now) {
		l.s.startRun(jobs, run)
		l.s.load.runStarted(run[0], now)
		l.started++
	}
	l.handBackOverdue(now)
	l.handBackPaused(now)
	if l.s.cfg.Once && l.started > 0 && !l.stopping {
		l.beginDrain()
	}
}

// nextRuns is a pass over what is held: the pool grants slots for what could start, the
// limits' gate admits runs within them, and what was granted but not started goes back to the
// pool. Granted nothing while other queues share the slots, the gate's pass is not begun (it
// would forget when the messages held back for their key were first held back); only a pause
// is looked at, and the messages held back for their key past --limit-wait are released all
// the same. A queue alone makes its pass at every step, its free slots all granted
// (scheduler.startable).
func (l *loop) nextRuns(now time.Time) [][]*job {
	if l.s.gate.due(now) {
		l.sched.heldBackDue()
	}
	if n := l.s.limiter.BatchSize(); n > 0 && l.s.cfg.BatchSize > 1 {
		l.sched.setBatchSize(n)
	}
	granted := l.pool.acquire(l.ended, l.sched.startable(now))
	l.ended = 0
	if granted == 0 && l.pool.shared() {
		if !l.s.gate.pause(now).IsZero() {
			l.sched.gateShut()
		}
		l.s.gate.releaseDue(now)
		return nil
	}
	paused := l.s.gate.begin(now)
	runs := l.sched.nextUpTo(now, granted)
	if l.s.gate.end(len(runs) > 0) || paused {
		l.sched.gateShut()
	}
	l.pool.release(granted - len(runs)) // granted but not started: back to the pool
	return runs
}

// drain carries out a stop's plan: once no receive is under way, what is held (unless it
// runs in the drain) and what was put off is handed back. What is held goes back unrun,
// one more receive on its count, so it is counted. It reports whether the drain is over.
func (l *loop) drain(now time.Time, plan drainPlan) bool {
	if !plan.handBackNow {
		return false
	}
	if plan.drainHeld {
		unrun := l.sched.drain(now)
		if len(unrun) > 0 {
			l.s.metrics.Add(alarms.StopReleases, float64(len(unrun)))
		}
		l.later = append(l.later, unrun...)
	}
	l.s.startHandBacks(l.later, "watchbot is stopping")
	l.later = nil
	return plan.over
}

// ask asks the receive loop for messages, as many times as the scheduler says so, and
// returns when the next receive decision is due without another event (zero: none).
func (l *loop) ask(now time.Time) time.Time {
	var wake time.Time
	for {
		p := l.sched.receive(now, l.rs)
		l.rs.gatherUntil = p.gatherUntil
		wake = p.wake
		if p.n == 0 {
			break
		}
		wait := l.s.cfg.WaitTime
		if l.s.fifo && !l.sched.empty() {
			wait = min(wait, fifoBusyPoll)
		}
		l.asks <- receiveAsk{n: p.n, wait: wait, at: now}
		l.rs.polls++
		l.rs.inbound += p.n
	}
	for _, w := range []time.Time{l.sched.wake(now), l.s.gate.wake(now)} {
		if !w.IsZero() && (wake.IsZero() || w.Before(wake)) {
			wake = w
		}
	}
	return wake
}

// onReceived holds what a receive brought; stopping, they join the read-ahead (run in the
// drain if it fits, else handed back), or are released at once when the drain runs no
// read-ahead.
func (l *loop) onReceived(a receiveAnswer) {
	msgs := a.msgs
	l.rs.polls--
	l.rs.inbound -= a.ask.n
	if l.stopping && !l.drainsReadAhead {
		l.s.releaseAtStop(msgs)
		return
	}
	// A receive that had to be retried brings no other along: a throttled service would
	// refuse them too.
	l.rs.lastEmpty, l.rs.lastFull = len(msgs) == 0, len(msgs) >= a.ask.n && !a.troubled
	l.received += len(msgs)
	if len(msgs) > 0 {
		// A long poll that waited for messages to arrive says little: capped.
		took := min(time.Since(a.ask.at), time.Second)
		if l.rs.latency == 0 {
			l.rs.latency = took
		} else {
			l.rs.latency = (3*l.rs.latency + took) / 4
		}
	}
	l.s.hold(l.sched, msgs)
}

// onWorkerEnded frees the slot of a run whose worker has ended; its messages may still be
// settling.
func (l *loop) onWorkerEnded(e runEvent) {
	l.s.gate.done(e.run)
	l.sched.ended(e.run, e.took)
	l.s.load.runEnded(e.run[0])
	l.ended++ // its slot goes back to the pool at the next step
}

// onRunSettled keeps the books of a run whose messages are all settled, and hands back what
// the run's end sends back to SQS (a FIFO group's messages behind one that went back).
func (l *loop) onRunSettled(e runEvent) {
	l.s.load.runEnded(e.run[0]) // a run whose worker never started reports no end of it
	for i, j := range e.run {
		if !e.disps[i].keep {
			l.s.brake.left(time.Now(), j)
		}
	}
	l.handBackOrPutOff(atOnce(l.sched.finish(e.run, e.disps, time.Now())), "an earlier message of its group went back to the queue")
}

// handBackOrPutOff hands back items, or, while a stop waits for a receive under way, puts
// them off (later) so that the receive cannot take them only to release them again.
func (l *loop) handBackOrPutOff(items []handBack, why string) {
	if l.stopping && l.rs.polls > 0 {
		l.later = append(l.later, items...)
		return
	}
	l.s.startHandBacks(items, why)
}

// handBackOverdue hands back, visible after --limit-wait, the messages whose limit key stayed
// full for --limit-wait, with their group's messages behind them (visible at once): each
// costs a receive, so each is counted and logged.
func (l *loop) handBackOverdue(now time.Time) {
	for _, j := range l.s.gate.takeOverdue() {
		found, _, behind := l.sched.drop(j, now)
		if !found {
			continue
		}
		l.sched.heldBackLeft()
		l.s.brake.left(now, j)
		l.s.metrics.Add(alarms.LimitReleases, 1)
		j.log.Info("limit key stayed full for --limit-wait: message released with a delay; its next receive counts toward the redrive policy",
			"limit_key", limitKey(l.s.cfg.Limits.Key, j.msg), "limit_wait", l.s.cfg.Limits.Wait.String())
		l.handBackOrPutOff([]handBack{{j: j, wait: l.s.cfg.Limits.Wait}}, "its limit key stayed full for --limit-wait")
		l.handBackOrPutOff(atOnce(behind), "an earlier message of its group went back to the queue")
	}
}

// handBackPaused hands back, visible at once, the messages held and not started once an
// operator's pause has held the queue for --limit-wait: a pause that long would keep them
// from every other consumer, and every task of the fleet is paused alike. Each costs a
// receive, so each is counted.
func (l *loop) handBackPaused(now time.Time) {
	if !l.s.gate.pausedLong(now) {
		return
	}
	held := l.sched.drain(now)
	if len(held) == 0 {
		return
	}
	l.sched.heldBackDue()
	for _, it := range held {
		l.s.brake.left(now, it.j)
	}
	l.s.metrics.Add(alarms.LimitReleases, float64(len(held)))
	l.s.log.Info("the fleet is paused past --limit-wait: messages held and not started go back to the queue", "messages", len(held),
		"limit_wait", l.s.cfg.Limits.Wait.String())
	l.handBackOrPutOff(held, "the fleet is paused")
}

// onHeldStopped hands back the held jobs the heartbeat stopped.
func (l *loop) onHeldStopped() {
	for _, j := range l.s.heldStops.take() {
		l.handBackStopped(j)
	}
}

// beginDrain begins the drain: at the stop request, or once --once has started its message.
func (l *loop) beginDrain() {
	l.stopping, l.stopRequested = true, nil
	l.drainEnds = time.Now().Add(l.s.cfg.ShutdownTimeout)
	l.s.health.drain()
}

// hold registers received messages with the leaser and the scheduler. A message that
// watchbot already holds (delivered again because its lease lapsed) is taken over by its job.
func (s *Supervisor) hold(sched *scheduler, msgs []types.Message) {
	now := time.Now()
	jobs := make([]*job, 0, len(msgs))
	for _, m := range msgs {
		s.metrics.Add(alarms.MessageReceives, 1)
		msg := parseMessage(m)
		noteTrace(msg, s.log, s.metrics)
		lease, renew := s.leaser.received()
		if j := s.leaser.get(msg.ID); j != nil {
			relay := s.leaser.dedupe.holds(j) && j.reachedLimit(now, s.cfg.inFlight())
			if j.takeOver(msg, now, lease, renew) {
				if relay {
					s.metrics.Add(alarms.Relays, 1)
				}
				continue
			}
			j.log.Warn("message delivered again while its last delivery was settling (its lease had lapsed): the new delivery is a new attempt",
				"receive_count", msg.Attempt)
		}
		j := s.leaser.newJob(msg, now, s.log)
		s.leaser.add(j)
		jobs = append(jobs, j)
	}
	sched.add(now, jobs...)
}

// startRun runs a worker for the run (one message, or a batch) in a goroutine of s.runs, which
// reports to the loop when the worker has ended and when every message is settled.
func (s *Supervisor) startRun(ctx context.Context, run []*job) {
	s.runs.Go(func() {
		disps := s.runner.run(ctx, run, func(took time.Duration) { s.events <- runEvent{run: run, took: took} })
		for i, j := range run {
			if !disps[i].keep {
				s.leaser.remove(j)
			}
		}
		s.events <- runEvent{run: run, disps: disps, finished: true}
	})
}

// heldStopped is the leaser's report of a held job that must stop, for the loop to hand
// back. It never waits: the loop may be waiting on the heartbeat's goroutine's work.
func (s *Supervisor) heldStopped(j *job) { s.heldStops.post(j) }

// handBackStopped hands back a held job the heartbeat stopped, with its group's messages
// behind it: near the 12 h ceiling it is released (keeping what is left of an in-place
// retry); with its lease lost it is no longer watchbot's and is let go.
func (l *loop) handBackStopped(j *job) {
	if j.stopped() == nil {
		return // delivered again since it was stopped (takeOver): watchbot's again
	}
	found, wait, behind := l.sched.drop(j, time.Now())
	if !found {
		return // in a run: the run settles it by its cause
	}
	l.s.brake.left(time.Now(), j)
	if errors.Is(j.stopped(), errLeaseLost) {
		l.handBackOrPutOff([]handBack{{j: j, lost: true}}, "lease lost")
	} else {
		l.handBackOrPutOff([]handBack{{j: j, wait: wait}}, "near SQS's 12h in-flight limit")
	}
	l.handBackOrPutOff(atOnce(behind), "an earlier message of its group went back to the queue")
}

// atOnce lists messages to hand back visible at once.
func atOnce(js []*job) []handBack {
	out := make([]handBack, len(js))
	for i, j := range js {
		out[i] = handBack{j: j}
	}
	return out
}

// startHandBacks hands held messages back to SQS, each in a goroutine owned by s.handBacks:
// visible after what is left of its in-place retry, or at once. A message with a delete or
// dead-letter send still pending gets that instead. Every hand-back raises the message's
// receive count when it is received again.
func (s *Supervisor) startHandBacks(items []handBack, why string) {
	for _, it := range items {
		// Marked here, on the loop's goroutine, before the hand-back runs: a new delivery of
		// the message that the loop takes meanwhile becomes a new job rather than being
		// handed back with this one.
		it.j.beginHandBack()
		s.handBacks.Go(func() {
			j := it.j
			o := outcome{Action: actRelease, Reason: why}
			switch {
			case it.lost:
				o = outcome{Action: actAbandon, Reason: why}
			case j.pending != nil:
				o = *j.pending
			case it.wait > 0:
				o = outcome{Action: actRetry, Delay: it.wait, Reason: why + "; visible when its retry delay ends"}
			}
			// A hand-back the settle keeps (a FIFO delete that failed) stays settled: the
			// message will be delivered again when its lease ends.
			s.runner.settleHandBack(context.Background(), j, o)
			s.leaser.remove(j)
		})
	}
}

// releaseAtStop makes messages received after the stop request visible again at once, when
// the drain runs no read-ahead (FIFO, batches, --once); each costs a receive, so each is
// counted. A
// new delivery of a message watchbot holds is taken over by its job instead, as hold does:
// released, it would go to another consumer while the job, its worker perhaps still running,
// holds a receipt that no longer works. The loop alone calls it.
func (s *Supervisor) releaseAtStop(msgs []types.Message) {
	now := time.Now()
	lease, renew := s.leaser.received()
	for _, m := range msgs {
		if j := s.leaser.get(aws.ToString(m.MessageId)); j != nil && j.takeOver(parseMessage(m), now, lease, renew) {
			continue
		}
		s.metrics.Add(alarms.StopReleases, 1)
		s.handBacks.Go(func() {
			if err := s.acks.changeVisibility(aws.ToString(m.ReceiptHandle), 0); err != nil {
				s.log.Error("could not release a message received as watchbot stopped; it will be visible again when its lease ends",
					"message_id", aws.ToString(m.MessageId), "error", err)
				return
			}
			s.log.Info("message received as watchbot stopped: released", "message_id", aws.ToString(m.MessageId))
		})
	}
}
