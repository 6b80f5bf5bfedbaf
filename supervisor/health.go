package supervisor

import (
	"fmt"
	"sync"
	"time"
)

// Health is whether a running supervisor makes progress and takes work, for a health and a
// readiness endpoint. The supervisor's goroutines write it; build it with NewHealth and pass
// it in QueueDeps to read it.
//
// Unhealthy means watchbot is stuck and should be restarted:
//   - a receive has been under way longer than the long poll plus receiveStall (the SDK and
//     SQS answer well within that; longer is a hung connection or a wedged loop);
//   - receives have failed without a break for longer than the grace (--health-grace): SQS
//     unreachable, or credentials gone, for long enough that a restart may help;
//   - an acknowledgement call (delete, visibility change) has been under way longer than its
//     timeout plus receiveStall, though it is bounded by that timeout;
//   - the heartbeat, which renews the running jobs' leases, has not run for two of its
//     intervals plus twice the ack timeout.
//
// Not ready means: the startup checks have not passed yet, the workers take no work (a Lambda
// runtime fails its init), or watchbot is draining.
type Health struct {
	mu sync.Mutex
	// Bounds, from the configuration, set by NewHealth.
	wait, grace, ackTimeout, beatEvery time.Duration

	phase phase
	// workers say whether the worker kind takes work, from the start on.
	workers      readiness
	receives     map[int]time.Time // the receives under way, by token, since when
	receiveSeq   int
	failingSince time.Time // receives failing without a break since; zero when the last succeeded
	lastError    string
	lastReceive  time.Time // the last receive that answered
	acks         map[int]time.Time
	ackSeq       int
	lastBeat     time.Time
}

type phase int

const (
	phaseStarting phase = iota
	phaseReceiving
	phaseDraining
)

// readiness is what the worker kind tells of its readiness (worker.Kind's Ready).
type readiness interface {
	Ready() (ok bool, reason string)
}

// receiveStall is how long past its due time a receive or an ack call may take before
// watchbot is judged stuck.
const receiveStall = 30 * time.Second

// NewHealth returns the health of a supervisor of cfg that has not started: its bounds are
// cfg's long poll, --health-grace, --ack-timeout and heartbeat interval.
func NewHealth(cfg Config) *Health {
	return &Health{wait: cfg.WaitTime, grace: cfg.HealthGrace, ackTimeout: cfg.AckTimeout, beatEvery: cfg.heartbeat(),
		acks: map[int]time.Time{}, receives: map[int]time.Time{}}
}

// start records that the startup checks passed and workers started: watchbot receives now.
func (h *Health) start(workers readiness) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.phase, h.lastBeat, h.workers = phaseReceiving, time.Now(), workers
}

// drain records that a stop was requested.
func (h *Health) drain() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.phase = phaseDraining
}

// receiveStarted records a receive and returns its token for receiveEnded.
func (h *Health) receiveStarted(now time.Time) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.receiveSeq++
	h.receives[h.receiveSeq] = now
	return h.receiveSeq
}

func (h *Health) receiveEnded(token int, now time.Time, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.receives, token)
	if err != nil {
		if h.failingSince.IsZero() {
			h.failingSince = now
		}
		h.lastError = err.Error()
		return
	}
	h.failingSince, h.lastError, h.lastReceive = time.Time{}, "", now
}

// ackStarted records an ack call and returns its token for ackEnded.
func (h *Health) ackStarted(now time.Time) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ackSeq++
	h.acks[h.ackSeq] = now
	return h.ackSeq
}

func (h *Health) ackEnded(token int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.acks, token)
}

func (h *Health) beat(now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastBeat = now
}

// LastReceive returns when a receive last answered (zero before the first).
func (h *Health) LastReceive() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lastReceive
}

// Check reports whether watchbot makes progress at now, and if not why, in one line.
func (h *Health) Check(now time.Time) (ok bool, reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.phase == phaseStarting {
		return true, "" // not started: alive, and not ready
	}
	for _, since := range h.receives {
		if d := now.Sub(since); d > h.wait+receiveStall {
			return false, fmt.Sprintf("a receive has been under way for %s (the long poll is %s)", d.Round(time.Second), h.wait)
		}
	}
	if !h.failingSince.IsZero() {
		if d := now.Sub(h.failingSince); d > h.grace {
			return false, fmt.Sprintf("receives have failed for %s: %s", d.Round(time.Second), h.lastError)
		}
	}
	for _, since := range h.acks {
		if d := now.Sub(since); d > h.ackTimeout+receiveStall {
			return false, fmt.Sprintf("an acknowledgement call has been under way for %s (its timeout is %s)", d.Round(time.Second), h.ackTimeout)
		}
	}
	if d := now.Sub(h.lastBeat); h.phase == phaseReceiving && d > 2*h.beatEvery+2*h.ackTimeout {
		return false, fmt.Sprintf("the lease heartbeat has not run for %s (every %s)", d.Round(time.Second), h.beatEvery)
	}
	return true, ""
}

// Ready reports whether watchbot takes work: after the startup checks, while its workers
// do, until a stop.
func (h *Health) Ready() (ok bool, reason string) {
	h.mu.Lock()
	phase, workers := h.phase, h.workers
	h.mu.Unlock()
	switch phase {
	case phaseStarting:
		return false, "startup checks under way"
	case phaseDraining:
		return false, "draining: a stop was requested"
	}
	return workers.Ready()
}
