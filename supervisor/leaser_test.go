package supervisor

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// leaseRig is a leaser with its acknowledger and heartbeat running, over a fakeQueue. Jobs
// it gives up on that run in no worker are collected in released.
type leaseRig struct {
	*leaser
	cfg      Config
	mu       sync.Mutex
	released []*job
}

func newLeaseRig(t *testing.T, cfg Config) (*leaseRig, *fakeQueue, func()) {
	return newHealthLeaseRig(t, cfg, nil)
}

// newHealthLeaseRig is newLeaseRig with a leaser that tells health of each heartbeat.
func newHealthLeaseRig(t *testing.T, cfg Config, health *Health) (*leaseRig, *fakeQueue, func()) {
	q := newFakeQueue()
	acks := newAcker(q, "q", cfg.AckLinger, cfg.AckTimeout, nil, nil)
	r := &leaseRig{cfg: cfg}
	r.leaser = newLeaser(cfg, acks, slog.New(slog.DiscardHandler), func(j *job) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.released = append(r.released, j)
	}, health, nil)
	ctx, cancel := context.WithCancel(t.Context())
	var ackWG, hbWG sync.WaitGroup
	ackWG.Go(func() { acks.run(ctx) })
	hbWG.Go(func() { r.run(ctx) })
	// As the supervisor does: the heartbeat first (it waits for its renewals' answers), then
	// the acknowledger.
	return r, q, func() { cancel(); hbWG.Wait(); acks.close(); ackWG.Wait() }
}

// hold registers a received message as a running job and returns it with its stop cause.
func (r *leaseRig) hold(q *fakeQueue, id string, receivedAt time.Time) (*job, func() error) {
	j := r.heldJob(q, id, receivedAt)
	ctx, stop := context.WithCancelCause(context.Background())
	j.attach(stop, false)
	return j, func() error { return context.Cause(ctx) }
}

// heldJob registers a received message held in no run.
func (r *leaseRig) heldJob(q *fakeQueue, id string, receivedAt time.Time) *job {
	q.add(id, "body")
	m, _ := q.receive(r.cfg.receiveVisibility())
	j := r.newJob(parseMessage(m), receivedAt, slog.New(slog.DiscardHandler))
	j.leaseUntil = time.Now().Add(r.cfg.receiveVisibility())
	r.add(j)
	return j
}

func (r *leaseRig) releasedJobs() []*job {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*job(nil), r.released...)
}

func heartbeatConfig() Config {
	cfg := DefaultConfig()
	cfg.VisibilityTimeout = 30 * time.Second
	cfg.ReceiveVisibility = cfg.VisibilityTimeout // a receive takes the whole lease; see TestReceiveLease
	cfg.HeartbeatInterval = 10 * time.Second
	return cfg
}

func TestHeartbeatRenewsPastTheVisibilityTimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s, q, stop := newLeaseRig(t, heartbeatConfig())
		defer stop()
		_, cause := s.hold(q, "m1", time.Now())
		// Ten minutes: twenty visibility timeouts. The message must never become visible.
		for range 60 {
			time.Sleep(10 * time.Second)
			synctest.Wait()
			if q.visible("m1") {
				t.Fatalf("message became visible at %v while its job runs", time.Now())
			}
		}
		if err := cause(); err != nil {
			t.Fatalf("job stopped: %v", err)
		}
		if n := q.count("ChangeMessageVisibility"); n < 55 {
			t.Fatalf("%d renewals in 10 minutes at a 10 s heartbeat, want about 60", n)
		}
	})
}

func TestHeartbeatStopsJobBeforeTwelveHours(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s, q, stop := newLeaseRig(t, heartbeatConfig())
		defer stop()
		// Received 11h59m ago: at the first tick 50 s are left, less than the margin
		// (heartbeat 10 s + kill grace 5 s + 1 m) needed to stop the worker and release.
		_, cause := s.hold(q, "old", time.Now().Add(-11*time.Hour-59*time.Minute))
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if err := cause(); !errors.Is(err, errCeiling) {
			t.Fatalf("cause = %v, want errCeiling", err)
		}
		// Received 11h50m ago: renewed, but never past 12 h since the receive.
		_, cause = s.hold(q, "oldish", time.Now().Add(-11*time.Hour-50*time.Minute))
		time.Sleep(10*time.Second + time.Second) // past the tick and the acker's linger
		synctest.Wait()
		if err := cause(); err != nil {
			t.Fatalf("job near but not at the limit stopped: %v", err)
		}
		q.mu.Lock()
		calls := q.msgs["oldish"].lastVisCalls
		q.mu.Unlock()
		// 9m50s were left: renewed, each time for the full 30 s.
		if len(calls) == 0 || slices.ContainsFunc(calls, func(v int32) bool { return v != 30 }) {
			t.Fatalf("renewals = %v, want 30 s each (calls %v)", calls, q.calls)
		}
	})
}

func TestHeartbeatStopsJobWhoseLeaseIsGone(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s, q, stop := newLeaseRig(t, heartbeatConfig())
		defer stop()
		_, cause := s.hold(q, "m1", time.Now())
		// The message is received again by someone else: the job's handle is stale.
		time.Sleep(11 * time.Second)
		synctest.Wait()
		q.mu.Lock()
		q.msgs["m1"].visibleAt = time.Now()
		q.mu.Unlock()
		if _, ok := q.receive(time.Minute); !ok {
			t.Fatal("could not steal the message")
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if err := cause(); !errors.Is(err, errLeaseLost) {
			t.Fatalf("cause = %v, want errLeaseLost", err)
		}
	})
}

func TestHeartbeatSkipsSettledJobs(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s, q, stop := newLeaseRig(t, heartbeatConfig())
		defer stop()
		j, _ := s.hold(q, "m1", time.Now())
		j.mu.Lock()
		j.settled = true
		j.mu.Unlock()
		time.Sleep(25 * time.Second)
		synctest.Wait()
		if n := q.count("ChangeMessageVisibility"); n != 0 {
			t.Fatalf("%d renewals of a settled job, want 0", n)
		}
	})
}

func TestTakeOverKeepsOneJobPerMessage(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	l := newLeaser(DefaultConfig(), nil, log, nil, nil, nil)
	first := l.newJob(message{ID: "m", ReceiptHandle: "rh-1", Attempt: 1}, time.Now().Add(-time.Hour), log)
	l.add(first)
	again := message{ID: "m", ReceiptHandle: "rh-2", Attempt: 2}
	now := time.Now()
	// The job still runs: the new delivery's handle and lease become the job's.
	if j := l.get("m"); j != first || !j.takeOver(again, now, time.Minute, 20*time.Second) {
		t.Fatal("a running job did not take over the new delivery")
	}
	if first.handle() != "rh-2" || !first.receivedAt.Equal(now) {
		t.Fatalf("handle %q received %v, want the new delivery's", first.handle(), first.receivedAt)
	}
	// The job has settled (a retry made the message visible): the delivery is a new attempt.
	first.mu.Lock()
	first.settled = true
	first.mu.Unlock()
	if first.takeOver(message{ID: "m", ReceiptHandle: "rh-3"}, now, time.Minute, 20*time.Second) {
		t.Fatal("a settled job took over a new attempt")
	}
	second := l.newJob(message{ID: "m", ReceiptHandle: "rh-3", Attempt: 3}, now, log)
	l.add(second)
	l.remove(first) // the old job finishing must not forget the new one
	if l.get("m") != second {
		t.Fatal("removing the settled job removed the new attempt's job")
	}
}

// TestLateRenewalIsReported: a renewal sent after the lease it renews has lapsed (the
// machine too busy to run the heartbeat in time) says so, for SQS may have delivered the
// message again meanwhile; one sent in time says nothing.
func TestLateRenewalIsReported(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		lapsed time.Duration
		warns  bool
	}{
		{"in time", -time.Second, false},
		{"after the lease", 1500 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var logs strings.Builder
			log := slog.New(slog.NewJSONHandler(&logs, nil))
			q := newFakeQueue()
			acks := newAcker(q, "q", 0, time.Second, nil, nil)
			ctx, cancel := context.WithCancel(t.Context())
			var wg sync.WaitGroup
			wg.Go(func() { acks.run(ctx) })
			defer func() { cancel(); acks.close(); wg.Wait() }()
			l := newLeaser(heartbeatConfig(), acks, log, nil, nil, nil)
			q.add("m", "body")
			m, _ := q.receive(time.Minute)
			j := l.newJob(parseMessage(m), time.Now(), log)
			j.leaseUntil = time.Now().Add(-tc.lapsed)
			l.add(j)
			l.renew(map[*job]*renewal{}, []*job{j}) // logs before it returns
			if got := testenv.Logged(logs.String(), "level", "WARN", "message_id", "m", "lapsed_for", "*"); got != tc.warns {
				t.Fatalf("lapse reported %v, want %v; log:\n%s", got, tc.warns, logs.String())
			}
		})
	}
}

func TestHeartbeatStopsJobBeforeAnUnrenewableLeaseLapses(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cfg := heartbeatConfig() // visibility 30 s, heartbeat 10 s, kill grace 5 s
		s, q, stop := newLeaseRig(t, cfg)
		defer stop()
		_, cause := s.hold(q, "m1", time.Now())
		q.setDown(true)
		// The lease lapses at 30 s; the worker needs up to 5 s (kill grace) to stop, and the
		// stop margin is 2 s: it must be stopped by 23 s. Renewals fail from 10 s on and are
		// retried after 5 s, then at half the time left (19, 21, 22, 22.5, 22.8 and 22.9 s:
		// each answer comes after the acknowledger's linger), until no retry fits.
		time.Sleep(22*time.Second + 850*time.Millisecond)
		synctest.Wait()
		if err := cause(); err != nil {
			t.Fatalf("stopped by 22.85 s with 7.15 s of lease left: %v", err)
		}
		time.Sleep(150 * time.Millisecond)
		synctest.Wait()
		if err := cause(); !errors.Is(err, errLeaseLost) {
			t.Fatalf("cause at 23 s = %v, want errLeaseLost, kill grace + 2 s before the lease lapses", err)
		}
		if n := q.count("ChangeMessageVisibility"); n != 8 {
			t.Errorf("%d renewal attempts, want 8 (10, 15, 19, 21, 22, 22.5, 22.8 and 22.9 s)", n)
		}
		time.Sleep(4 * time.Second)
		synctest.Wait()
		if n := q.count("ChangeMessageVisibility"); n != 8 {
			t.Errorf("%d renewal attempts by 27 s, want still 8: a stopped job's lease is tried every 5 s", n)
		}
	})
}

// A receive lease of 4 s with a kill grace of 1 s leaves 1 s to renew in before the job must
// be stopped: the first renewal goes out halfway through it, and is retried within it.
func TestShortReceiveLease(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cfg := heartbeatConfig()
		cfg.ReceiveVisibility, cfg.KillGrace = 4*time.Second, time.Second
		s, q, stop := newLeaseRig(t, cfg)
		defer stop()
		_, kept := s.hold(q, "kept", time.Now())
		time.Sleep(600 * time.Millisecond)
		synctest.Wait()
		q.mu.Lock()
		calls := q.msgs["kept"].lastVisCalls
		q.mu.Unlock()
		if len(calls) != 1 || calls[0] != 30 {
			t.Fatalf("renewals by 0.6 s = %v, want [30] (at 0.5 s)", calls)
		}
		for range 12 {
			time.Sleep(5 * time.Second)
			synctest.Wait()
			if q.visible("kept") {
				t.Fatalf("message became visible at %v while its job runs", time.Now())
			}
		}
		if err := kept(); err != nil {
			t.Fatalf("job stopped: %v", err)
		}

		_, lost := s.hold(q, "lost", time.Now())
		q.setDown(true)
		before := q.count("ChangeMessageVisibility")
		time.Sleep(900 * time.Millisecond)
		synctest.Wait()
		if n := q.count("ChangeMessageVisibility") - before; n < 2 {
			t.Errorf("%d renewal attempts in the window, want the first at 0.5 s and a retry", n)
		}
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		if err := lost(); !errors.Is(err, errLeaseLost) {
			t.Fatalf("cause at 1 s = %v, want errLeaseLost, 3 s before the 4 s lease lapses", err)
		}
	})
}

// A stalled endpoint answers nothing: the renewal's call waits out its timeout (15 s here,
// past the lease's end). The job must still be stopped kill grace + 2 s before its lease
// lapses, without waiting for the call, and the other jobs' renewals must go on meanwhile.
func TestHeartbeatStopsJobWhoseRenewalGoesUnanswered(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cfg := heartbeatConfig() // visibility 30 s, heartbeat 10 s, kill grace 5 s
		s, q, stop := newLeaseRig(t, cfg)
		defer stop()
		_, stalledCause := s.hold(q, "stalled", time.Now())
		q.stallNext("ChangeMessageVisibility") // the first renewal, at 10 s, hangs until 25 s
		time.Sleep(6 * time.Second)
		_, laterCause := s.hold(q, "later", time.Now()) // renewed at 16 s, apart from the hung call
		time.Sleep(16*time.Second + 900*time.Millisecond)
		synctest.Wait()
		if err := stalledCause(); err != nil {
			t.Fatalf("stopped at 22.9 s: %v", err)
		}
		q.mu.Lock()
		later := q.msgs["later"].lastVisCalls
		q.mu.Unlock()
		if len(later) != 1 {
			t.Fatalf("the other job's renewals while a call hangs: %v, want one at 16 s", later)
		}
		time.Sleep(200 * time.Millisecond)
		synctest.Wait()
		if err := stalledCause(); !errors.Is(err, errLeaseLost) {
			t.Fatalf("cause at 23.1 s = %v, want errLeaseLost while the renewal still hangs", err)
		}
		time.Sleep(10 * time.Second) // the hung call times out at 25 s; "later" is renewed at 26 s
		synctest.Wait()
		if err := laterCause(); err != nil {
			t.Fatalf("the other job was stopped: %v", err)
		}
	})
}

func TestHeartbeatSurvivesAShortOutage(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s, q, stop := newLeaseRig(t, heartbeatConfig())
		defer stop()
		_, cause := s.hold(q, "m1", time.Now())
		q.setDown(true)
		time.Sleep(12 * time.Second) // the 10 s renewal fails
		q.setDown(false)
		time.Sleep(50 * time.Second)
		synctest.Wait()
		if err := cause(); err != nil {
			t.Fatalf("a 12 s outage stopped the job: %v", err)
		}
		if q.visible("m1") {
			t.Fatal("the message became visible: the retry after the outage did not renew")
		}
	})
}

func TestHeartbeatReportsHeldJobsItGivesUpOn(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s, q, stop := newLeaseRig(t, heartbeatConfig())
		defer stop()
		// Held in no run (waiting for a slot, or out an in-place retry), 50 s before the 12 h
		// limit at the first tick: nothing to stop, so the loop is told to hand it back.
		old := s.heldJob(q, "old", time.Now().Add(-11*time.Hour-59*time.Minute))
		// Its run has ended (a FIFO message kept for an in-place retry): the old worker's
		// cancel is gone, so it too is reported, not "stopped" through a finished run.
		kept, _ := s.hold(q, "kept", time.Now().Add(-11*time.Hour-59*time.Minute))
		kept.detach()
		// Its lease is lost while it waits.
		gone := s.heldJob(q, "gone", time.Now())
		q.mu.Lock()
		q.msgs["gone"].visibleAt = time.Now()
		q.mu.Unlock()
		if _, ok := q.receive(time.Minute); !ok {
			t.Fatal("could not steal the message")
		}
		time.Sleep(10*time.Second + time.Second)
		synctest.Wait()
		got := map[*job]error{}
		for _, j := range s.releasedJobs() {
			got[j] = j.stopped()
		}
		if len(got) != 3 || !errors.Is(got[old], errCeiling) || !errors.Is(got[kept], errCeiling) || !errors.Is(got[gone], errLeaseLost) {
			t.Fatalf("reported %v; want old and kept at the ceiling, gone with its lease lost", got)
		}
	})
}

// TestReceiveLease: a receive leases a message for --receive-visibility (20 s here); the
// heartbeat gives it the whole lease once it has been held a third of that, and a message
// settled before then costs no renewal at all.
func TestReceiveLease(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cfg := heartbeatConfig()
		cfg.ReceiveVisibility = 0 // the default: min(30 s, max(20 s, kill grace 5 s + 15 s))
		if got := cfg.receiveVisibility(); got != 20*time.Second {
			t.Fatalf("receive visibility %v, want 20s", got)
		}
		s, q, stop := newLeaseRig(t, cfg)
		defer stop()
		short := s.heldJob(q, "short", time.Now())
		_, cause := s.hold(q, "long", time.Now())
		time.Sleep(2 * time.Second) // the short job is over
		s.remove(short)
		time.Sleep(6 * time.Second) // past 6.7 s: the long one's first renewal
		synctest.Wait()
		q.mu.Lock()
		shortCalls, longCalls := q.msgs["short"].lastVisCalls, q.msgs["long"].lastVisCalls
		q.mu.Unlock()
		if len(shortCalls) != 0 {
			t.Errorf("a message settled within a third of its receive lease was renewed: %v", shortCalls)
		}
		if len(longCalls) != 1 || longCalls[0] != 30 {
			t.Fatalf("renewals of the running job = %v, want [30] by 8 s", longCalls)
		}
		// Then every heartbeat interval; the message never becomes visible.
		for range 12 {
			time.Sleep(5 * time.Second)
			synctest.Wait()
			if q.visible("long") {
				t.Fatalf("message became visible at %v while its job runs", time.Now())
			}
		}
		if err := cause(); err != nil {
			t.Fatalf("job stopped: %v", err)
		}
	})
}

func TestReceiveVisibilityIsChecked(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		v, grace time.Duration
		ok       bool
	}{
		{"default", 0, 5 * time.Second, true},
		{"the whole lease", 30 * time.Second, 5 * time.Second, true},
		{"kill grace + 3 s", 8 * time.Second, 5 * time.Second, true},
		{"too short for the kill grace", 7 * time.Second, 5 * time.Second, false},
		{"short, with a short kill grace", 4 * time.Second, time.Second, true},
		{"longer than the lease", 31 * time.Second, 5 * time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := heartbeatConfig()
			cfg.QueueURL = "https://sqs.us-east-1.amazonaws.com/123456789012/q"
			cfg.Command = []string{"true"}
			cfg.ReceiveVisibility, cfg.KillGrace = tc.v, tc.grace
			err := cfg.Validate()
			if (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tc.ok)
			}
			if err != nil && !strings.Contains(err.Error(), "ReceiveVisibility") {
				t.Errorf("error %q does not name ReceiveVisibility", err)
			}
		})
	}
}

// Jobs come and go more often than any renewal falls due (short jobs at a steady rate): each
// one wakes the heartbeat, which must still beat every interval, or the health check would
// report it stuck.
func TestHeartbeatBeatsUnderSteadyShortJobs(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cfg := heartbeatConfig() // heartbeat 10 s
		h := NewHealth(cfg)
		h.start(&workersState{})
		s, q, stop := newHealthLeaseRig(t, cfg, h)
		defer stop()
		for i := range 300 {
			j := s.heldJob(q, strconv.Itoa(i), time.Now())
			time.Sleep(100 * time.Millisecond)
			s.remove(j)
			time.Sleep(900 * time.Millisecond)
			synctest.Wait()
			if ok, reason := h.Check(time.Now()); !ok {
				t.Fatalf("unhealthy after %d s of short jobs: %s", i+1, reason)
			}
			h.mu.Lock()
			since := time.Since(h.lastBeat)
			h.mu.Unlock()
			if since > cfg.HeartbeatInterval+time.Second {
				t.Fatalf("no heartbeat for %v after %d s of short jobs (every %v)", since, i+1, cfg.HeartbeatInterval)
			}
		}
	})
}

// A heartbeat interval close to the visibility timeout would put the next renewal after the
// moment a job must be stopped if it fails: renewals come at most halfway through the time
// the lease leaves before then, so an outage still stops the job kill grace + 2 s before its
// lease lapses.
func TestHeartbeatRenewsInTimeWithALongInterval(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cfg := heartbeatConfig()
		cfg.HeartbeatInterval = 28 * time.Second // visibility 30 s, kill grace 5 s
		s, q, stop := newLeaseRig(t, cfg)
		defer stop()
		_, cause := s.hold(q, "m1", time.Now())
		// The first renewal comes at 10 s (a third of the receive's 30 s lease) and extends
		// the lease to 40 s; the next is due at 21.5 s, halfway to the 33 s stop deadline.
		time.Sleep(15 * time.Second)
		synctest.Wait()
		q.setDown(true)
		time.Sleep(17*time.Second + 800*time.Millisecond)
		synctest.Wait()
		if err := cause(); err != nil {
			t.Fatalf("stopped by 32.8 s: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
		synctest.Wait()
		if err := cause(); !errors.Is(err, errLeaseLost) {
			t.Fatalf("cause at 33 s = %v, want errLeaseLost, kill grace + 2 s before the lease lapses at 40 s", err)
		}
	})
}
