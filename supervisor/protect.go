package supervisor

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/backoff"
	"github.com/watchbot/watchbot/internal/ecsagent"
)

// ProtectionAPI is the ECS agent's task scale-in protection endpoint, satisfied by
// *ecsagent.Client.
type ProtectionAPI interface {
	SetProtection(ctx context.Context, enabled bool, expires time.Duration) (ecsagent.Protection, error)
}

var _ ProtectionAPI = (*ecsagent.Client)(nil)

// protectionPolicy says when to call the ECS agent so that the task is protected from
// scale-in and deployments while watchbot runs or holds any message, and is not otherwise:
//   - busy (a message held or running): protected, asking for expiry each time; renewed
//     once half of what the agent granted is left, so a busy watchbot stays protected and
//     one that stops renewing is unprotected within expiry;
//   - idle: still protected for idle after the last message, so a busy queue's short gaps do
//     not make a call per message; then unprotected;
//   - an unprotect or a renewal comes at least gap after the call before it, and a protect
//     comes at once, since a job may already be running; so there are at most two calls per
//     gap (24 a minute for a 5 s gap) however the load flaps, and far fewer in practice, as
//     the idle hold absorbs short gaps. The agent grants whole minutes, so a renewal at half
//     the grant is never put off by the gap.
//   - a failed call is retried after retry's backoff, never sooner.
//
// It is pure: the state in, the next call (or when to look again) out.
type protectionPolicy struct {
	expiry, idle, gap time.Duration
	retry             backoff.Exponential
}

// newProtectionPolicy is the policy for cfg: renewals when half the grant is left, calls at
// least 5 s apart (12 a minute at most), failures retried after 1 s doubling to a minute.
func newProtectionPolicy(cfg Config) protectionPolicy {
	return protectionPolicy{
		expiry: cfg.protectionExpiry(),
		idle:   cfg.ProtectionIdle,
		gap:    5 * time.Second,
		retry:  backoff.Exponential{Base: time.Second, Max: time.Minute, Jitter: backoff.Equal},
	}
}

// protection is where the task's protection stands as the protector knows it.
type protection struct {
	on        bool      // the last successful call turned protection on
	until     time.Time // when that protection lapses
	granted   time.Duration
	idleSince time.Time // when watchbot last became idle; zero before it was ever busy
	lastCall  time.Time
	failures  int // consecutive failed calls
	retryAt   time.Time
}

// next returns whether to call the agent now, and with what; otherwise when to look again
// (zero: only when the load changes).
func (p protectionPolicy) next(s protection, busy bool, now time.Time) (call, enable bool, wake time.Time) {
	want := busy || (!s.idleSince.IsZero() && now.Before(s.idleSince.Add(p.idle)))
	var due time.Time // when the call wanted now should be made
	switch {
	case want && !s.on, !want && s.on:
		due = now
	case want && s.on:
		if end := s.idleSince.Add(p.idle); !busy && !end.After(s.until) {
			// Idle, and the grant outlasts the hold: no renewal; look again when it ends.
			return false, false, end
		}
		due = s.until.Add(-s.granted / 2)
	default:
		return false, false, time.Time{}
	}
	if s.on && !s.lastCall.IsZero() {
		due = later(due, s.lastCall.Add(p.gap))
	}
	due = later(due, s.retryAt)
	if !now.Before(due) {
		return true, want, time.Time{}
	}
	wake = due
	if want && !busy {
		// The idle hold ends before then: look again when it does.
		if end := s.idleSince.Add(p.idle); end.Before(wake) {
			wake = end
		}
	}
	return false, false, wake
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// protectErrorLogEvery bounds the protector's failure log lines.
const protectErrorLogEvery = time.Minute

// protectCallTimeout bounds one call to the agent.
const protectCallTimeout = 5 * time.Second

// protector keeps the task's scale-in protection in step with a supervisor's load.
type protector struct {
	api     ProtectionAPI
	load    activity
	policy  protectionPolicy
	metrics alarms.Recorder
	log     *slog.Logger
	random  func() float64
	// healthy reports whether the supervisor makes progress (nil: always). A stuck watchbot
	// counts as idle, so it stops renewing and its task is unprotected within the idle hold
	// after the next renewal was due, however long it stays stuck.
	healthy func() bool
	// cut ends a call to the agent at a stop's last moment, the last unprotect's included:
	// protection left on lapses by itself when it expires.
	cut *cutoff

	st         protection
	lastErrLog time.Time
	// notInService is set when ECS refused protection because the task is not part of a
	// service (a standalone RunTask, typical of --once): no call can succeed, so none is made.
	notInService bool
}

// activity is what the protector follows: whether watchbot holds or runs any message, and a
// channel that receives when that may have changed. A *Load is one queue's; a loadSet, the
// queues' of a listen.
type activity interface {
	Active() bool
	Changed() <-chan struct{}
}

// loadSet is the activity of a listen's queues' loads. Its own channel receives what relay
// copies from theirs.
type loadSet struct {
	loads   []*Load
	changed chan struct{}
}

func newLoadSet(loads []*Load) loadSet {
	return loadSet{loads: loads, changed: make(chan struct{}, 1)}
}

// Active reports whether any of the queues holds or runs a message.
func (ls loadSet) Active() bool {
	for _, l := range ls.loads {
		if l.Active() {
			return true
		}
	}
	return false
}

// Changed receives when any of the queues' Active may have changed.
func (ls loadSet) Changed() <-chan struct{} { return ls.changed }

// relay copies each load's changes to the set's channel until ctx ends, in goroutines that
// owned waits for.
func (ls loadSet) relay(ctx context.Context, owned *sync.WaitGroup) {
	to := []chan struct{}{ls.changed}
	for _, l := range ls.loads {
		owned.Go(func() { fanOut(ctx, l.Changed(), to) })
	}
}

// taskNotValid is ECS's failure reason for a task that is not part of a service.
const taskNotValid = "TASK_NOT_VALID"

// run keeps the protection in step with the load until ctx ends (the drain has finished),
// then turns it off and returns. Failures are logged at most once a minute, counted in
// ScaleInProtectionErrors and retried with backoff; they never touch the work.
func (p *protector) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	wasBusy := false
	for {
		busy := p.load.Active() && (p.healthy == nil || p.healthy())
		now := time.Now()
		if wasBusy && !busy {
			p.st.idleSince = now
		}
		wasBusy = busy
		call, enable, wake := p.policy.next(p.st, busy, now)
		if p.notInService {
			call, wake = false, time.Time{}
		}
		if call {
			p.call(ctx, enable)
			continue
		}
		if wake.IsZero() {
			timer.Stop()
		} else {
			timer.Reset(time.Until(wake))
		}
		select {
		case <-ctx.Done():
			if p.st.on {
				p.call(context.WithoutCancel(ctx), false)
			}
			return
		case <-p.load.Changed():
		case <-timer.C:
		}
	}
}

// call makes one call to the agent and books its outcome.
func (p *protector) call(ctx context.Context, enable bool) {
	ctx, cancel := p.cut.bound(ctx, protectCallTimeout)
	defer cancel()
	now := time.Now()
	p.st.lastCall = now
	got, err := p.api.SetProtection(ctx, enable, p.policy.expiry)
	if agentErr, ok := errors.AsType[*ecsagent.Error](err); ok && agentErr.Code == taskNotValid {
		p.metrics.Add(alarms.ScaleInProtectionErrors, 1)
		p.log.Warn("ECS refuses scale-in protection for a task that is not part of a service; no more calls will be made",
			"error", err)
		p.notInService = true
		return
	}
	if err != nil {
		p.st.failures++
		p.st.retryAt = time.Now().Add(p.policy.retry.Delay(p.st.failures, p.random))
		p.metrics.Add(alarms.ScaleInProtectionErrors, 1)
		if p.st.failures == 1 || time.Since(p.lastErrLog) >= protectErrorLogEvery {
			p.log.Warn("ECS task scale-in protection call failed; retrying, work goes on regardless",
				"enable", enable, "error", err, "consecutive_failures", p.st.failures,
				"retry_in", time.Until(p.st.retryAt).Round(time.Millisecond).String())
			p.lastErrLog = time.Now()
		}
		return
	}
	if p.st.failures > 0 {
		p.log.Info("ECS task scale-in protection calls work again", "after_failures", p.st.failures)
	}
	p.st.failures, p.st.retryAt = 0, time.Time{}
	p.st.until, p.st.granted = now.Add(p.policy.expiry), p.policy.expiry
	if enable && got.Expires.After(now) {
		p.st.until, p.st.granted = got.Expires, got.Expires.Sub(now)
	}
	switch {
	case enable && !p.st.on:
		p.log.Info("task protected from scale-in: watchbot holds messages", "expires", p.st.until.UTC().Format(time.RFC3339))
	case enable:
		p.log.Debug("task scale-in protection renewed", "expires", p.st.until.UTC().Format(time.RFC3339))
	case p.st.on:
		p.log.Info("task no longer protected from scale-in: watchbot is idle")
	}
	p.st.on = enable
}
