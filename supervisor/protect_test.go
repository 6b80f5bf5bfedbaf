package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/internal/ecsagent"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

func TestProtectionExpiry(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		lease, maxJob, want time.Duration
	}{
		{3 * time.Minute, 0, 4 * time.Minute},
		{3 * time.Minute, time.Hour, 4 * time.Minute},
		{time.Hour, 10 * time.Minute, 11 * time.Minute},
		{10 * time.Second, 0, 70 * time.Second},
		{12 * time.Hour, 0, 12*time.Hour + time.Minute},
	} {
		cfg := DefaultConfig()
		cfg.VisibilityTimeout, cfg.MaxJobDuration = tc.lease, tc.maxJob
		if got := cfg.protectionExpiry(); got != tc.want {
			t.Errorf("lease %v, max job %v: expiry %v, want %v", tc.lease, tc.maxJob, got, tc.want)
		}
	}
}

func TestProtectionPolicyNext(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	p := protectionPolicy{expiry: 4 * time.Minute, idle: 30 * time.Second, gap: 5 * time.Second}
	on := protection{on: true, until: at(4 * time.Minute), granted: 4 * time.Minute, lastCall: t0}
	idle := on
	idle.idleSince = at(time.Minute)
	for _, tc := range []struct {
		name       string
		st         protection
		busy       bool
		now        time.Time
		call, want bool
		wake       time.Time
	}{
		{name: "never busy: nothing to do", st: protection{}, now: t0},
		{name: "busy, unprotected: protect now", st: protection{}, busy: true, now: t0, call: true, want: true},
		{name: "busy, protected: renew when half the grant is left", st: on, busy: true, now: at(time.Minute), wake: at(2 * time.Minute)},
		{name: "busy, half the grant gone: renew", st: on, busy: true, now: at(2 * time.Minute), call: true, want: true},
		{name: "agent granted less than asked: renew at half of that", st: protection{on: true, until: at(time.Minute), granted: time.Minute, lastCall: t0},
			busy: true, now: at(10 * time.Second), wake: at(30 * time.Second)},
		{name: "idle within the hold: stay protected until it ends", st: idle, now: at(time.Minute + 10*time.Second), wake: at(time.Minute + 30*time.Second)},
		{name: "idle past the hold: unprotect", st: idle, now: at(time.Minute + 30*time.Second), call: true},
		{name: "idle, renewal due, but the grant outlasts the hold: no renewal",
			st:  protection{on: true, until: at(150 * time.Second), granted: 4 * time.Minute, lastCall: at(-90 * time.Second), idleSince: at(115 * time.Second)},
			now: at(2 * time.Minute), wake: at(145 * time.Second)},
		{name: "idle, the hold outlasts the grant: renew",
			st:  protection{on: true, until: at(130 * time.Second), granted: 4 * time.Minute, lastCall: at(-110 * time.Second), idleSince: at(115 * time.Second)},
			now: at(2 * time.Minute), call: true, want: true},
		{name: "idle, unprotected: nothing", st: protection{idleSince: t0, lastCall: t0}, now: at(time.Hour)},
		{name: "protect at once, even right after an unprotect", st: protection{lastCall: t0, idleSince: at(-time.Minute)}, busy: true, now: at(time.Second), call: true, want: true},
		{name: "renewals at least gap apart", st: protection{on: true, until: at(6 * time.Second), granted: 6 * time.Second, lastCall: t0}, busy: true, now: at(3 * time.Second), wake: at(5 * time.Second)},
		{name: "a failed call waits for its retry", st: protection{lastCall: t0, failures: 2, retryAt: at(3 * time.Second)}, busy: true, now: at(2 * time.Second), wake: at(3 * time.Second)},
		{name: "retry due", st: protection{lastCall: t0, failures: 3, retryAt: at(8 * time.Second)}, busy: true, now: at(8 * time.Second), call: true, want: true},
		{name: "unprotect waits for the gap too", st: protection{on: true, until: at(time.Hour), granted: time.Hour, lastCall: t0, idleSince: at(-time.Minute)},
			now: at(2 * time.Second), wake: at(5 * time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			call, want, wake := p.next(tc.st, tc.busy, tc.now)
			if call != tc.call || want != tc.want || !wake.Equal(tc.wake) {
				t.Errorf("next = (call %v, enable %v, wake %v), want (%v, %v, %v)", call, want, wake, tc.call, tc.want, tc.wake)
			}
		})
	}
}

// agentCall is one call a fakeProtection took.
type agentCall struct {
	at     time.Duration // since the test began
	enable bool
	failed bool
}

// fakeProtection answers like the agent (a grant of the minutes asked, rounded up), failing
// while fail is set.
type fakeProtection struct {
	start time.Time
	mu    sync.Mutex
	fail  error
	calls []agentCall
}

func (f *fakeProtection) SetProtection(ctx context.Context, enable bool, expires time.Duration) (ecsagent.Protection, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	f.calls = append(f.calls, agentCall{at: now.Sub(f.start), enable: enable, failed: f.fail != nil})
	if f.fail != nil {
		return ecsagent.Protection{}, f.fail
	}
	if !enable {
		return ecsagent.Protection{}, nil
	}
	return ecsagent.Protection{Enabled: true, Expires: now.Add(expires.Round(time.Minute))}, nil
}

func (f *fakeProtection) setFail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = err
}

func (f *fakeProtection) log() []agentCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]agentCall(nil), f.calls...)
}

func (f *fakeProtection) String() string {
	var b strings.Builder
	for _, c := range f.log() {
		fmt.Fprintf(&b, "%v enable=%v failed=%v\n", c.at, c.enable, c.failed)
	}
	return b.String()
}

// protectorRig runs a protector on a Load the test sets, on synctest's clock.
type protectorRig struct {
	api     *fakeProtection
	load    *Load
	metrics *countingRecorder
	logs    *testenv.Buffer
	stop    func()
	sick    atomic.Bool // the supervisor is stuck
}

func startProtector(t *testing.T) *protectorRig {
	t.Helper()
	cfg := DefaultConfig() // lease 3m: expiry 4m
	cfg.ProtectionIdle = 30 * time.Second
	r := &protectorRig{api: &fakeProtection{start: time.Now()}, load: NewLoad(), metrics: &countingRecorder{}, logs: &testenv.Buffer{}}
	p := &protector{api: r.api, load: r.load, policy: newProtectionPolicy(cfg), metrics: r.metrics,
		log: slog.New(slog.NewJSONHandler(r.logs, nil)), random: func() float64 { return 0.5 },
		healthy: func() bool { return !r.sick.Load() }}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); p.run(ctx) }()
	r.stop = func() { cancel(); <-done }
	return r
}

func (r *protectorRig) busy(b bool) {
	r.load.set(time.Now(), loadState{slots: 4, limit: 4, active: b})
	synctest.Wait()
}

// want checks the calls made so far: their times since the start and what they asked.
func (r *protectorRig) want(t *testing.T, calls ...agentCall) {
	t.Helper()
	synctest.Wait()
	got := r.api.log()
	if len(got) != len(calls) {
		t.Fatalf("%d calls, want %d:\n%s", len(got), len(calls), r.api)
	}
	for i := range calls {
		if got[i] != calls[i] {
			t.Fatalf("call %d = %+v, want %+v; all:\n%s", i, got[i], calls[i], r.api)
		}
	}
}

func TestProtectorFollowsTheLoad(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := startProtector(t)
		time.Sleep(time.Minute)
		r.want(t) // never busy: no call at all
		r.busy(true)
		r.want(t, agentCall{at: time.Minute, enable: true})
		// A busy queue's gaps shorter than the idle hold make no call.
		for range 20 {
			time.Sleep(2 * time.Second)
			r.busy(false)
			time.Sleep(3 * time.Second)
			r.busy(true)
		}
		// Busy until 9m01s: renewed each time half the 4-minute grant is left.
		time.Sleep(9*time.Minute + time.Second - 160*time.Second)
		r.want(t, agentCall{at: time.Minute, enable: true}, agentCall{at: 3 * time.Minute, enable: true},
			agentCall{at: 5 * time.Minute, enable: true}, agentCall{at: 7 * time.Minute, enable: true},
			agentCall{at: 9 * time.Minute, enable: true})
		r.busy(false) // at 9m01s
		time.Sleep(29 * time.Second)
		r.want(t, r.api.log()[:5]...)
		time.Sleep(time.Second)
		r.want(t, append(r.api.log()[:5], agentCall{at: 9*time.Minute + 31*time.Second})...)
		// Idle for an hour: nothing more.
		time.Sleep(time.Hour)
		r.stop()
		if n := len(r.api.log()); n != 6 {
			t.Errorf("%d calls, want 6 (nothing while idle, nothing at a stop when unprotected):\n%s", n, r.api)
		}
		// One record of each change: protected (with its expiry), then unprotected.
		if n, p := testenv.LogCount(r.logs.String(), "level", "INFO"), testenv.LogCount(r.logs.String(), "level", "INFO", "expires", "*"); n != 2 || p != 1 {
			t.Errorf("%d records of protection changes, %d of them protecting; want 2 and 1:\n%s", n, p, r.logs)
		}
	})
}

func TestProtectorDropsProtectionAtAStop(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := startProtector(t)
		r.busy(true)
		time.Sleep(10 * time.Second)
		r.busy(false) // the drain finished; the idle hold would keep it for 30 s
		r.stop()
		r.want(t, agentCall{at: 0, enable: true}, agentCall{at: 10 * time.Second})
	})
}

func TestProtectorRetriesFailuresWithBackoff(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := startProtector(t)
		r.api.setFail(&ecsagent.Error{Status: 500, Code: "ServerException", Message: "boom"})
		r.busy(true)
		time.Sleep(3 * time.Minute)
		calls := r.api.log()
		// Retried after the backoff: equal jitter at 0.5 over 1 s doubling to a minute.
		var at []time.Duration
		for _, c := range calls {
			if !c.failed || !c.enable {
				t.Fatalf("unexpected call %+v", c)
			}
			at = append(at, c.at)
		}
		ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
		want := []time.Duration{0, ms(750), ms(2250), ms(5250), ms(11250), ms(23250), ms(47250), ms(92250), ms(137250)}
		if fmt.Sprint(at) != fmt.Sprint(want) {
			t.Errorf("calls at %v, want %v", at, want)
		}
		if got := r.metrics.get(alarms.ScaleInProtectionErrors); got != float64(len(calls)) {
			t.Errorf("ScaleInProtectionErrors = %v, want %d", got, len(calls))
		}
		// Logged at most once a minute: the first failure, then the first a minute later (92 s).
		if n := testenv.LogCount(r.logs.String(), "level", "WARN", "consecutive_failures", "*"); n != 2 {
			t.Errorf("%d failure log lines in 3 minutes, want 2:\n%s", n, r.logs)
		}
		r.api.setFail(nil)
		time.Sleep(time.Minute)
		last := r.api.log()[len(r.api.log())-1]
		if last.failed || !last.enable {
			t.Errorf("after the agent recovered, last call %+v, want a successful protect", last)
		}
		if !testenv.Logged(r.logs.String(), "level", "INFO", "after_failures", "*") {
			t.Errorf("recovery not logged:\n%s", r.logs)
		}
		r.stop()
	})
}

func TestProtectorTriesTheOffCallOnceAtAStop(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := startProtector(t)
		r.busy(true)
		r.busy(false)
		r.api.setFail(errors.New("connect: connection refused"))
		start := time.Now()
		r.stop() // the off call fails: one attempt, bounded, then the protector returns
		if took := time.Since(start); took > protectCallTimeout {
			t.Errorf("stop took %v", took)
		}
		r.want(t, agentCall{at: 0, enable: true}, agentCall{at: 0, failed: true})
	})
}

func TestProtectorStopsCallingForAStandaloneTask(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := startProtector(t)
		r.api.setFail(&ecsagent.Error{Status: 200, Code: "TASK_NOT_VALID", Message: "The task is not part of a service"})
		r.busy(true)
		time.Sleep(time.Hour)
		r.busy(false)
		r.busy(true)
		time.Sleep(time.Hour)
		r.stop()
		r.want(t, agentCall{at: 0, enable: true, failed: true})
		if got := r.metrics.get(alarms.ScaleInProtectionErrors); got != 1 {
			t.Errorf("ScaleInProtectionErrors = %v, want 1", got)
		}
		if !testenv.Logged(r.logs.String(), "level", "WARN", "error", "*") {
			t.Errorf("not logged:\n%s", r.logs)
		}
	})
}

// TestProtectorLetsAStuckWatchbotGo: a watchbot that holds messages but makes no progress
// stops renewing; its task is unprotected at the renewal that was due plus the idle hold.
func TestProtectorLetsAStuckWatchbotGo(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := startProtector(t)
		r.busy(true)
		r.sick.Store(true) // stuck from now on, still holding its messages
		time.Sleep(3 * time.Hour)
		// Protected at 0 for 4m; at 2m the renewal finds it stuck: idle from then, unprotected
		// 30 s later; nothing after.
		r.want(t, agentCall{at: 0, enable: true}, agentCall{at: 2*time.Minute + 30*time.Second})
		r.stop()
	})
}
