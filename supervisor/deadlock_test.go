package supervisor

import (
	"log/slog"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// A renewal that SQS does not answer past the message's lease, at the moment that message
// is delivered again and another held message is given up: the loop takes the redelivered
// message over while the heartbeat reports the message it gives up, and the renewal's answer
// comes back. None of them may wait on another. The supervisor must go on receiving, and stop
// within its shutdown window. Default settings: a 20 s receive lease, its first renewal at
// 6.5 s, a 15 s call timeout, a stop deadline 7 s before a lease lapses.
func TestHungRenewalAtRedelivery(t *testing.T) {
	t.Parallel()
	type send struct {
		at     time.Duration
		bodies []string
	}
	for _, tc := range []struct {
		name  string
		batch bool
		// sends are the messages sent, and when; hung the bodies whose renewals hang until
		// t=30 s.
		sends []send
		hung  []string
		// handedBack are the bodies given up while in no worker and handed back: delivered
		// again before their hand-back ended, each must be a new job, held and renewed.
		handedBack []string
	}{
		{
			// Y and W run in one batch from t=0; Y's renewal goes out at 6.5 s and hangs.
			// X runs alone from t=7 (every worker of batch mode is shared, so its lost lease
			// gives it up to the loop rather than stopping a worker). At t=20 Y's lease lapses,
			// SQS delivers it again, and X's stop deadline falls due.
			name: "batch", batch: true,
			sends: []send{{0, []string{"Y", "W"}}, {7 * time.Second, []string{"X"}}},
			hung:  []string{"Y", "W", "X"},
		},
		{
			// One slot: A runs and ends (a read-ahead follows a first run), R runs from
			// t=1.1, Y waits in the read-ahead from t=5 (its renewal at 11.5 s hangs), X from
			// t=12. At t=25 Y's lease lapses, SQS delivers it again, and X's stop deadline
			// falls due: X, in no worker, is given up to the loop to be handed back.
			name:       "read-ahead, one slot",
			sends:      []send{{0, []string{"A"}}, {1100 * time.Millisecond, []string{"R"}}, {5 * time.Second, []string{"Y"}}, {12 * time.Second, []string{"X"}}},
			hung:       []string{"Y", "X"},
			handedBack: []string{"Y", "X"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, "TestHungRenewalAtRedelivery/"+tc.name, 60*time.Second, func(t *testing.T) {
				hungRenewalAtRedelivery(t, tc.batch, tc.hung, tc.handedBack, func(r *chaosRig) {
					for _, s := range tc.sends {
						time.Sleep(s.at - time.Since(t0Bubble))
						r.send(s.bodies...)
					}
				})
			})
		})
	}
}

// hungRenewalAtRedelivery runs one case: renewals of the hung bodies hang until t=30 s, sends
// sends the messages, Z is sent at 45 s and must be received by 65 s, and the stop must end
// in its window.
func hungRenewalAtRedelivery(t *testing.T, batch bool, hung, handedBack []string, sends func(*chaosRig)) {
	r := newChaosRig(t, false, 5)
	if batch {
		r.cfg.Concurrency, r.cfg.BatchSize = 2, 2
	}
	r.took = func(body string) time.Duration {
		if body == "A" || body == "Z" {
			return time.Second
		}
		return 300 * time.Second
	}
	r.sqs.setPlan(func(op string, bodies []string) fault {
		if !strings.HasPrefix(op, "ChangeMessageVisibility") || time.Since(t0Bubble) >= 30*time.Second {
			return fault{}
		}
		for _, b := range bodies {
			if slices.Contains(hung, b) {
				return fault{hang: true}
			}
		}
		return fault{}
	})
	stop := r.start(Deps{})
	sends(r)
	time.Sleep(45*time.Second - time.Since(t0Bubble))
	r.send("Z")
	time.Sleep(20 * time.Second)
	if !received(r, "Z") {
		t.Errorf("Z, sent at 45 s, not received by 65 s: the supervisor stopped receiving\n%s", r.logs)
	}
	if n := receives(r, "Y"); n < 2 {
		t.Errorf("Y received %d times: the test did not reach the moment it is about\n%s", n, r.logs)
	}
	for _, b := range handedBack {
		// A third receive would mean the new delivery was dropped with the old job and came
		// back when its lease lapsed.
		if n := receives(r, b); n != 2 {
			t.Errorf("%s received %d times by 65 s, want 2\n%s", b, n, r.logs)
		}
	}
	took, err := stop()
	if err != nil {
		t.Errorf("Run: %v", err)
	}
	if limit := r.cfg.ShutdownTimeout + r.cfg.KillGrace + 2*time.Second; took > limit {
		t.Errorf("stop took %v, want at most %v", took, limit)
	}
	if twice := r.ranTwice(); len(twice) > 0 {
		t.Errorf("ran twice at once: %v", twice)
	}
}

// received reports whether a message with body has been received; receives how often.
func received(r *chaosRig, body string) bool { return receives(r, body) > 0 }

func receives(r *chaosRig, body string) int {
	n := 0
	for _, m := range r.srv.Messages(r.queue) {
		if m.Body == body {
			n = max(n, m.ReceiveCount)
		}
	}
	for _, m := range r.srv.Messages(r.dlq) {
		if m.Body == body {
			n = max(n, m.ReceiveCount)
		}
	}
	return n
}

// The loop decides a hand-back before its goroutine runs; a new delivery of the message that
// the loop takes in between is a new job, not one dropped with the old job's hand-back.
func TestRedeliveryAfterHandBackIsANewJob(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	l := newLeaser(DefaultConfig(), nil, log, nil, nil, nil)
	old := l.newJob(message{ID: "m", ReceiptHandle: "rh-1", Attempt: 1}, time.Now(), log)
	l.add(old)
	old.beginHandBack()
	if old.takeOver(message{ID: "m", ReceiptHandle: "rh-2", Attempt: 2}, time.Now(), time.Minute, 20*time.Second) {
		t.Fatal("a job being handed back took over a new delivery")
	}
	if got := old.handle(); got != "rh-1" {
		t.Errorf("the hand-back settles %q, want its own delivery rh-1", got)
	}
}

// A renewal's answer applies only to the receipt it renewed: a new delivery, or a settle
// begun meanwhile, drops it; and a settle waits for the renewal under way, holding no lock.
func TestRenewalAnswerForAnOldReceiptIsDropped(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		log := slog.New(slog.DiscardHandler)
		l := newLeaser(DefaultConfig(), nil, log, nil, nil, nil)
		now := time.Now()
		j := l.newJob(message{ID: "m", ReceiptHandle: "rh-1", Attempt: 1}, now, log)
		done := j.beginRenewal("rh-1")
		if done == nil {
			t.Fatal("no renewal began")
		}
		if j.beginRenewal("rh-1") != nil {
			t.Error("a second renewal began while one was under way")
		}
		if !j.takeOver(message{ID: "m", ReceiptHandle: "rh-2", Attempt: 2}, now, time.Minute, 20*time.Second) {
			t.Fatal("a running job did not take over the new delivery while a renewal was under way")
		}
		if _, current := j.renewed("rh-1", true, now.Add(time.Hour)); current {
			t.Error("an answer for the old receipt was applied")
		}
		settled := make(chan delivery)
		go func() { settled <- j.beginSettle() }()
		synctest.Wait()
		select {
		case <-settled:
			t.Fatal("the settle did not wait for the renewal under way")
		default:
		}
		j.setKill(func() {}) // the job's lock is free while the settle waits
		j.endRenewal(done)
		if d := <-settled; d.receipt != "rh-2" {
			t.Errorf("settled %q, want the new delivery rh-2", d.receipt)
		}
		if _, current := j.renewed("rh-2", true, now.Add(time.Hour)); current {
			t.Error("an answer was applied to a job that has begun to settle")
		}
	})
}

// A new delivery of a held message that a receive brings after a stop request is taken over
// by its job, not released: released, it would go to another consumer while the job's
// worker may still run under a receipt that no longer works.
func TestRedeliveryReceivedAtAStopIsTakenOver(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	l := newLeaser(DefaultConfig(), nil, log, nil, nil, nil)
	j := l.newJob(message{ID: "m", ReceiptHandle: "rh-1", Attempt: 1}, time.Now(), log)
	l.add(j)
	s := &Supervisor{leaser: l, log: log}
	s.releaseAtStop([]types.Message{{MessageId: aws.String("m"), ReceiptHandle: aws.String("rh-2")}})
	s.handBacks.Wait()
	if got := j.handle(); got != "rh-2" {
		t.Errorf("the held job's receipt is %q, want the new delivery's rh-2", got)
	}
}
