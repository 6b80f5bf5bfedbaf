package supervisor

import (
	"testing"
	"time"
)

func TestSchedulerReceive(t *testing.T) {
	t.Parallel()
	now := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	later, earlier := now.Add(time.Second), now.Add(-time.Second)
	gather := 20 * time.Millisecond
	// busy is a scheduler of 10 slots with 7 messages running: room for 3, short of a full
	// receive.
	busy := func() *scheduler {
		s := newScheduler(10, 1, 0, false, nil, false)
		s.runs, s.runMsgs, s.open = 7, 7, 7
		return s
	}
	idle := func() *scheduler { return newScheduler(4, 1, 0, false, nil, false) }
	full := func() *scheduler {
		s := newScheduler(2, 1, 0, false, nil, false)
		s.runs, s.runMsgs, s.open = 2, 2, 2
		return s
	}
	// batches is 8 slots of batches of 10, idle: room for 80 messages, eight receives' worth.
	batches := func() *scheduler { return newScheduler(8, 10, 0, false, nil, false) }
	fifoBatches := func() *scheduler { return newScheduler(8, 10, 0, true, nil, false) }
	for _, tc := range []struct {
		name  string
		sched func() *scheduler
		st    receiveState
		want  receivePlan
	}{
		{"room for a full receive: asked for at once", idle, receiveState{gather: gather}, receivePlan{n: 4}},
		{"a receive under way, a backlog, room for another full one: asked for", batches, receiveState{polls: 1, inbound: 10, lastFull: true},
			receivePlan{n: 10}},
		{"receives under way, the last one short: none more", batches, receiveState{polls: 1, inbound: 10}, receivePlan{}},
		{"receives under way, less than a full receive's room beyond them: none more", batches,
			receiveState{polls: 3, inbound: 75, lastFull: true}, receivePlan{}},
		{"the most receives under way: none more", batches, receiveState{polls: maxPolls, inbound: 40, lastFull: true}, receivePlan{}},
		{"a receive under way on a FIFO queue: none more", fifoBatches, receiveState{polls: 1, inbound: 10, lastFull: true}, receivePlan{}},
		{"a receive under way, braking: none more", batches, receiveState{polls: 1, inbound: 1, lastFull: true, gate: brakeGate{braking: true}},
			receivePlan{}},
		{"little room: gathers for more", busy, receiveState{gather: gather},
			receivePlan{gatherUntil: now.Add(gather), wake: now.Add(gather)}},
		{"little room, gathering: keeps waiting", busy, receiveState{gather: gather, gatherUntil: later},
			receivePlan{gatherUntil: later, wake: later}},
		{"little room, gather over: asks for what there is", busy, receiveState{gather: gather, gatherUntil: earlier},
			receivePlan{n: 3}},
		{"little room, the last receive empty: asks at once", busy, receiveState{gather: gather, lastEmpty: true}, receivePlan{n: 3}},
		{"little room, no gather: asks at once", busy, receiveState{}, receivePlan{n: 3}},
		{"no room: nothing asked, the gather forgotten", full, receiveState{gather: gather, gatherUntil: later}, receivePlan{}},
		{"braking: one message to probe with", idle, receiveState{gather: gather, gate: brakeGate{braking: true}}, receivePlan{n: 1}},
		{"braking, a probe held: none", idle, receiveState{gate: brakeGate{braking: true, hold: true}}, receivePlan{}},
		{"braking, the next probe not due: none until it is", idle, receiveState{gate: brakeGate{braking: true, receiveAt: later}},
			receivePlan{wake: later}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.sched().receive(now, tc.st); got != tc.want {
				t.Errorf("receive = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestSchedulerDraining(t *testing.T) {
	t.Parallel()
	empty := func() *scheduler { return newScheduler(2, 1, 0, false, nil, false) }
	holding := func() *scheduler {
		s := newScheduler(2, 1, 0, false, nil, false)
		s.held = 1
		return s
	}
	running := func() *scheduler {
		s := newScheduler(2, 1, 0, false, nil, false)
		s.runs, s.runMsgs, s.open = 1, 1, 1
		return s
	}
	heldAndRunning := func() *scheduler {
		s := running()
		s.held = 1
		return s
	}
	for _, tc := range []struct {
		name      string
		sched     func() *scheduler
		receiving bool
		runHeld   bool
		want      drainPlan
	}{
		{"receiving, nothing held: the long poll is left to answer", empty, true, false, drainPlan{}},
		{"receiving, messages held: the receive is awaited", holding, true, false, drainPlan{}},
		{"not receiving: held messages handed back, over", holding, false, false, drainPlan{handBackNow: true, drainHeld: true, over: true}},
		{"not receiving, the read-ahead runs in the drain", heldAndRunning, false, true, drainPlan{handBackNow: true}},
		{"not receiving, nothing runs: what could not start goes back, over", holding, false, true, drainPlan{handBackNow: true, drainHeld: true, over: true}},
		{"not receiving, a run under way: not over", running, false, false, drainPlan{handBackNow: true, drainHeld: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.sched().draining(tc.receiving, tc.runHeld); got != tc.want {
				t.Errorf("draining = %+v, want %+v", got, tc.want)
			}
		})
	}
}
