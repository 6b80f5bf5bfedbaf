package supervisor

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestHealth(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig() // wait 20s, grace 1m, ack timeout 15s
	cfg.HeartbeatInterval = 90 * time.Second
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	started := func() *Health {
		h := NewHealth(cfg)
		h.start(&workersState{})
		h.beat(t0)
		return h
	}
	for _, tc := range []struct {
		name   string
		setup  func(h *Health)
		now    time.Time
		reason string // "" for healthy
	}{
		{name: "idle between receives", setup: func(h *Health) {}, now: at(time.Minute)},
		{name: "long-polling", setup: func(h *Health) { h.receiveStarted(t0) }, now: at(45 * time.Second)},
		{name: "a receive hung past the poll and the stall", setup: func(h *Health) { h.receiveStarted(t0) }, now: at(51 * time.Second),
			reason: "a receive has been under way for 51s (the long poll is 20s)"},
		{name: "receives failing within the grace", setup: func(h *Health) { h.receiveEnded(0, t0, errors.New("connection refused")) }, now: at(time.Minute)},
		{name: "receives failing past the grace", setup: func(h *Health) { h.receiveEnded(0, t0, errors.New("connection refused")) }, now: at(61 * time.Second),
			reason: "receives have failed for 1m1s: connection refused"},
		{name: "a success ends the failing", setup: func(h *Health) {
			h.receiveEnded(0, t0, errors.New("refused"))
			h.receiveEnded(0, at(50*time.Second), nil)
		}, now: at(2 * time.Minute)},
		{name: "an ack call within its timeout", setup: func(h *Health) { h.ackStarted(t0) }, now: at(40 * time.Second)},
		{name: "an ack call hung", setup: func(h *Health) { h.ackStarted(t0) }, now: at(46 * time.Second),
			reason: "an acknowledgement call has been under way for 46s (its timeout is 15s)"},
		{name: "an ack call ended", setup: func(h *Health) { h.ackEnded(h.ackStarted(t0)) }, now: at(time.Hour), reason: "heartbeat"},
		{name: "the heartbeat stopped", setup: func(h *Health) {}, now: at(211 * time.Second),
			reason: "the lease heartbeat has not run for 3m31s (every 1m30s)"},
		{name: "draining: the heartbeat may stop", setup: func(h *Health) { h.drain() }, now: at(time.Hour)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := started()
			tc.setup(h)
			ok, reason := h.Check(tc.now)
			if ok != (tc.reason == "") || !strings.Contains(reason, tc.reason) {
				t.Errorf("Check = %v %q, want reason %q", ok, reason, tc.reason)
			}
		})
	}
}

func TestReadiness(t *testing.T) {
	t.Parallel()
	h := NewHealth(DefaultConfig())
	if ok, why := h.Ready(); ok || why != "startup checks under way" {
		t.Errorf("before start: %v %q", ok, why)
	}
	if ok, _ := h.Check(time.Now()); !ok {
		t.Error("unhealthy before start: the startup checks may take a while")
	}
	workers := &workersState{}
	h.start(workers)
	if ok, _ := h.Ready(); !ok {
		t.Error("not ready after start")
	}
	workers.reason = "runtime 1 failed its init"
	if ok, why := h.Ready(); ok || why != workers.reason {
		t.Errorf("workers not ready: %v %q, want their reason", ok, why)
	}
	workers.reason = ""
	if ok, _ := h.Ready(); !ok {
		t.Error("not ready once the workers are again")
	}
	workers.reason = "runtime 1 failed its init"
	h.drain()
	if ok, why := h.Ready(); ok || why != "draining: a stop was requested" {
		t.Errorf("draining: %v %q", ok, why)
	}
}

// workersState is a worker kind's readiness as a test sets it: ready without a reason.
type workersState struct{ reason string }

func (w *workersState) Ready() (bool, string) { return w.reason == "", w.reason }
