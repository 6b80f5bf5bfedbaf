package supervisor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/internal/dlqattr"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// noFailures are the counts of a run in which nothing failed.
var noFailures = map[alarms.Metric]float64{alarms.WorkerErrors: 0, alarms.DeadLetter: 0, alarms.DedupeErrors: 0}

// queueKinds are the queues and modes the supervisor's dedupe tests run on.
var queueKinds = []struct {
	name      string
	fifo      bool
	batchSize int
}{
	{"standard", false, 1},
	{"standard batch", false, 5},
	{"FIFO", true, 1},
	{"FIFO batch", true, 5},
}

func TestDedupeRunsEachKeyOnce(t *testing.T) {
	t.Parallel()
	for _, tt := range queueKinds {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newDedupeRig(t, tt.fifo, rigOptions{batchSize: tt.batchSize})
				r.start()
				// Every job but c1's is sent twice, with different message ids: a1 and a3 carry k1.
				r.sendKeyed("a1=k1", "b1=k2", "a2=k3", "a3=k1", "b2=k2", "a4=k3", "c1=k4")
				r.waitFor("an empty queue", 5*time.Minute, r.empty)
				if err := r.stop(); err != nil {
					t.Fatalf("Run: %v", err)
				}
				for key, bodies := range map[string][]string{"k1": {"a1", "a3"}, "k2": {"b1", "b2"}, "k3": {"a2", "a4"}, "k4": {"c1"}} {
					runs := 0
					for _, b := range bodies {
						runs += r.runsOf()[b]
					}
					if runs != 1 {
						t.Errorf("key %s ran %d times, want once: runs %v", key, runs, r.bodies())
					}
				}
				if got := r.metrics.get(alarms.DuplicatesSkipped); got != 3 {
					t.Errorf("DuplicatesSkipped = %v, want 3", got)
				}
				if got := r.metrics.get(alarms.MessagesProcessed); got != 4 {
					t.Errorf("MessagesProcessed = %v, want 4", got)
				}
				for _, k := range []string{"k1", "k2", "k3", "k4"} {
					if rec := r.db.record(k); rec == nil || rec.state != "completed" || rec.expires.Before(time.Now().Add(72*time.Hour)) {
						t.Errorf("record of %s = %+v, want completed for the queue's retention (4 days)", k, rec)
					}
				}
				if tt.fifo {
					r.check()
				}
			})
		})
	}
}

func TestDedupeFailedRunReleasesItsKey(t *testing.T) {
	t.Parallel()
	for _, fifo := range []bool{false, true} {
		t.Run(map[bool]string{false: "standard", true: "FIFO"}[fifo], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newDedupeRig(t, fifo, rigOptions{})
				r.behave = func(c workerCall) workerAct {
					if c.Body == "a1" && c.Run == 1 {
						return workerAct{Took: time.Second, Exit: 1}
					}
					return workerAct{Took: time.Second}
				}
				r.start()
				r.sendKeyed("a1=k1")
				r.waitFor("an empty queue", 2*time.Minute, r.empty)
				if runs := r.runsOf()["a1"]; runs != 2 {
					t.Fatalf("a1 ran %d times, want twice (failed, then retried): %v", runs, r.bodies())
				}
				if got := r.db.count("Release"); got != 1 {
					t.Errorf("%d releases, want 1 (after the failure)", got)
				}
				// A duplicate sent now is skipped.
				r.sendKeyed("a9=k1")
				r.waitFor("an empty queue", 2*time.Minute, r.empty)
				if runs := r.runsOf()["a9"]; runs != 0 {
					t.Errorf("the duplicate ran %d times, want 0", runs)
				}
				if got := r.metrics.get(alarms.DuplicatesSkipped); got != 1 {
					t.Errorf("DuplicatesSkipped = %v, want 1", got)
				}
			})
		})
	}
}

// TestDedupeHeldKey: a key held by another run. On a standard queue the message is
// released, visible again after a short wait that grows with its receive count and never
// outlasts the holder's claim; on a FIFO queue it waits in place, leased, and the wait is no
// attempt. Once the holder is gone it runs; once the holder completed it is skipped.
func TestDedupeHeldKey(t *testing.T) {
	t.Parallel()
	for _, tt := range queueKinds {
		for _, holder := range []string{"crashes", "completes"} {
			t.Run(tt.name+", the holder "+holder, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					r := newDedupeRig(t, tt.fifo, rigOptions{batchSize: tt.batchSize, maxReceiveCount: 20})
					// Another task holds k1 for 45 s more: it crashes (its claim lapses
					// then), or completes the key at 20 s.
					lapse := time.Now().Add(45 * time.Second)
					r.db.hold("k1", "elsewhere", lapse)
					r.start()
					r.sendKeyed("a1=k1", "a2=k2", "b1=k3")
					if holder == "completes" {
						time.Sleep(20 * time.Second)
						r.db.complete("k1")
					}
					r.waitFor("an empty queue", 5*time.Minute, r.empty)
					calls := r.callsOf("a1")
					switch {
					case holder == "completes" && len(calls) != 0:
						t.Fatalf("a1 ran %v, want it skipped: its key was completed", calls)
					case holder == "completes" && r.metrics.get(alarms.DuplicatesSkipped) != 1:
						t.Errorf("DuplicatesSkipped = %v, want 1", r.metrics.get(alarms.DuplicatesSkipped))
					case holder == "crashes" && (len(calls) != 1 || calls[0].At.Before(lapse)):
						t.Fatalf("a1 ran %v, want once, after the other run's claim lapsed at 45 s", calls)
					case holder == "crashes" && calls[0].At.Sub(lapse) > 5*time.Second:
						t.Errorf("a1 ran %v after the holder's claim lapsed: its waits must end by then", calls[0].At.Sub(lapse))
					case holder == "crashes" && tt.fifo && (calls[0].Attempt != 2 || tt.batchSize == 1 && calls[0].ReceiveCount != 1):
						t.Errorf("a1 ran as attempt %d, receive count %d; want 2 (the crashed run counted) and 1: a wait in place is not an attempt", calls[0].Attempt, calls[0].ReceiveCount)
					case holder == "crashes" && !tt.fifo && (calls[0].Attempt != 2 || tt.batchSize == 1 && calls[0].ReceiveCount < 3):
						t.Errorf("a1 ran as attempt %d, receive count %d; want 2 (the crashed run counted) and a few: released, then received again, no attempt", calls[0].Attempt, calls[0].ReceiveCount)
					}
					if !tt.fifo {
						if v := r.sqs.visibilityChanges()["a1"]; v < 1 || v > 30 {
							t.Errorf("a1's last release made it visible in %d s, want 1..30", v)
						}
						if n := testenv.LogCount(r.logs.String(), "visible_in_seconds", "*"); n < 3 {
							t.Errorf("a1 released %d times while held, want a few", n)
						}
					}
					wantCounts(t, noFailures, r.metrics) // a held key is no failure
					b := r.callsOf("b1")
					if len(b) != 1 || b[0].At.Sub(t0Bubble) > 5*time.Second {
						t.Errorf("b1 ran %v, want once at once: another key does not wait", b)
					}
					a2 := r.callsOf("a2")
					if tt.fifo && (len(a2) != 1 || holder == "crashes" && a2[0].At.Before(calls[0].At) || a2[0].At.Before(t0Bubble.Add(20*time.Second))) {
						t.Errorf("a2 ran %v, before a1 was run or skipped: the group's order broke", a2)
					}
					if !tt.fifo && (len(a2) != 1 || a2[0].At.Sub(t0Bubble) > 5*time.Second) {
						t.Errorf("a2 ran %v, want at once on a standard queue", a2)
					}
					if tt.fifo {
						r.check()
					}
				})
			})
		}
	}
}

// TestDedupeUnclaimedIsNoAttempt: a message whose key cannot be claimed runs nothing, so
// its retries are no attempts, whatever its receive count and --max-attempts: watchbot never
// dead-letters it, and the redrive policy alone moves it to the DLQ, at maxReceiveCount. It
// never runs, and no WorkerError or DeadLetter is counted.
func TestDedupeUnclaimedIsNoAttempt(t *testing.T) {
	t.Parallel()
	for _, cause := range []string{"held", "table down"} {
		for _, maxAttempts := range []int{0, 1, 2} {
			t.Run(fmt.Sprintf("%s, --max-attempts %d", cause, maxAttempts), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					r := newDedupeRig(t, false, rigOptions{maxReceiveCount: 3})
					r.cfg.MaxAttempts = maxAttempts
					r.db.hold("k1", "elsewhere", time.Now().Add(time.Hour))
					r.start()
					time.Sleep(time.Second) // the startup check passed
					if cause == "table down" {
						r.db.setDown(errors.New("connection refused"))
					}
					r.sendKeyed("a1=k1")
					r.waitFor("an empty queue", 5*time.Minute, r.empty)
					if runs := r.bodies(); len(runs) != 0 {
						t.Errorf("ran %v, want nothing", runs)
					}
					dlq := r.sqs.Messages(r.dlq)
					if len(dlq) != 1 || dlq[0].Body != "a1" {
						t.Fatalf("DLQ holds %v, want a1, moved by the redrive policy", dlq)
					}
					if n := testenv.LogCount(r.logs.String(), "dead_letter_queue", "*", "reason", "*"); n != 0 {
						t.Errorf("watchbot dead-lettered the message %d times, want never: it ran nothing", n)
					}
					wantCounts(t, map[alarms.Metric]float64{alarms.DeadLetter: 0, alarms.WorkerErrors: 0}, r.metrics)
					if got, down := r.metrics.get(alarms.DedupeErrors), cause == "table down"; down && got < 3 || !down && got != 0 {
						t.Errorf("DedupeErrors = %v (%s), want one per failed claim", got, cause)
					}
				})
			})
		}
	}
}

// TestDedupeAttemptsAreRuns: with a dedupe table a message's attempt is its key's run. A
// message that fails every run, received more often than it runs (its claims throttled
// between its runs), runs exactly --max-attempts times, as attempts 1, 2, 3, and is
// dead-lettered by watchbot with the reason after the last; its receive count is higher.
func TestDedupeAttemptsAreRuns(t *testing.T) {
	t.Parallel()
	for _, tt := range queueKinds {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newDedupeRig(t, tt.fifo, rigOptions{batchSize: tt.batchSize, maxReceiveCount: 20})
				r.cfg.MaxAttempts = 3
				r.behave = func(c workerCall) workerAct {
					// Between its runs the table throttles two claims: receives, or waits
					// in place, that run nothing.
					r.db.throttle(2)
					return workerAct{Took: time.Second, Exit: 1}
				}
				r.start()
				r.sendKeyed("a1=k1")
				r.waitFor("the message dead-lettered and its key forgotten", 5*time.Minute, func() bool { return len(r.sqs.Messages(r.dlq)) == 1 && r.db.record("k1") == nil })
				calls := r.callsOf("a1")
				var attempts []int
				for _, c := range calls {
					attempts = append(attempts, c.Attempt)
				}
				if !slices.Equal(attempts, []int{1, 2, 3}) {
					t.Fatalf("a1 ran as attempts %v, want each run an attempt, up to 3", attempts)
				}
				out, err := r.sqs.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(r.dlq), MessageAttributeNames: []string{"All"}})
				if err != nil || len(out.Messages) != 1 {
					t.Fatalf("receive from the DLQ: %v, %v", out, err)
				}
				attrs := out.Messages[0].MessageAttributes
				if reason := aws.ToString(attrs[dlqattr.Reason].StringValue); aws.ToString(out.Messages[0].Body) != "a1" || !strings.Contains(reason, "last attempt (3 of 3)") ||
					aws.ToString(attrs[dlqattr.Attempts].StringValue) != "3" {
					t.Errorf("DLQ holds %s with reason %q, attempts %s; want a1, dead-lettered by watchbot on its last attempt, 3",
						aws.ToString(out.Messages[0].Body), reason, aws.ToString(attrs[dlqattr.Attempts].StringValue))
				}
				if last := calls[len(calls)-1]; !tt.fifo && tt.batchSize == 1 && last.ReceiveCount <= 3 {
					t.Errorf("a1's last run was its receive %d, want more than its 3 runs: the held key's receives are no attempts", last.ReceiveCount)
				}
				wantCounts(t, map[alarms.Metric]float64{alarms.DeadLetter: 1}, r.metrics)
			})
		})
	}
}

// TestDedupeDuplicatesShareTheRuns: with --dedupe-key attr:NAME the runs are the key's, as
// docs/dedupe.md words it: a1 fails run 1, its duplicate b1 runs on as run 2, and the next
// run, 3, is the last; the message that made it is dead-lettered and the key forgotten, so
// the other starts again from run 1 and is dead-lettered after its own three.
func TestDedupeDuplicatesShareTheRuns(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newDedupeRig(t, false, rigOptions{maxReceiveCount: 20})
		r.cfg.MaxAttempts = 3
		r.behave = func(workerCall) workerAct { return workerAct{Took: time.Second, Exit: 1} }
		r.start()
		r.sendKeyed("a1=k1")
		r.waitFor("a1's first run to end", time.Minute, func() bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			return len(r.runs) == 1 && r.busy == 0
		})
		r.sendKeyed("b1=k1")
		r.waitFor("both dead-lettered and the key forgotten", 10*time.Minute, func() bool {
			return len(r.sqs.Messages(r.dlq)) == 2 && r.db.record("k1") == nil
		})
		var runs []string
		var attempts []int
		r.mu.Lock()
		for _, c := range r.runs {
			runs, attempts = append(runs, fmt.Sprintf("%s@%d", c.Body, c.Attempt)), append(attempts, c.Attempt)
		}
		r.mu.Unlock()
		if !slices.Equal(attempts, []int{1, 2, 3, 1, 2, 3}) || runs[1] != "b1@2" {
			t.Fatalf("runs %v, want a1@1, b1@2, one of them @3 and dead-lettered, then the other @1, @2, @3", runs)
		}
		wantCounts(t, map[alarms.Metric]float64{alarms.DeadLetter: 2}, r.metrics)
	})
}

// TestDedupeDeadLetterSendFailureKeepsTheRuns: the last run's failure whose dead-letter copy
// cannot be written leaves the message in the queue, and its key keeps its count of runs.
// On a standard queue each next delivery runs as the run after it (not as run 1 again, which
// would give the message every attempt anew), and its failure is dead-lettered: two sends
// fail here, so runs 3 and 4 follow. On a FIFO queue the send is tried again in place, the
// worker not run again, the claim kept meanwhile. The key is forgotten once the copy is
// written and the message deleted.
func TestDedupeDeadLetterSendFailureKeepsTheRuns(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		fifo bool
		want []int
	}{{"standard", false, []int{1, 2, 3, 4}}, {"FIFO", true, []int{1, 2}}} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newDedupeRig(t, tt.fifo, rigOptions{maxReceiveCount: 20})
				r.cfg.MaxAttempts = 2
				r.sqs.failDLQSends = 2
				r.behave = func(workerCall) workerAct { return workerAct{Took: time.Second, Exit: 1} }
				r.start()
				r.sendKeyed("a1=k1")
				r.waitFor("the message dead-lettered and its key forgotten", 5*time.Minute, func() bool {
					return len(r.sqs.Messages(r.dlq)) == 1 && r.db.record("k1") == nil
				})
				var attempts []int
				for _, c := range r.callsOf("a1") {
					attempts = append(attempts, c.Attempt)
				}
				if !slices.Equal(attempts, tt.want) {
					t.Fatalf("a1 ran as attempts %v, want %v: its runs kept while its copy could not be written", attempts, tt.want)
				}
				if n := len(r.sqs.Messages(r.queue)); n != 0 {
					t.Errorf("the queue holds %d messages, want none", n)
				}
			})
		})
	}
}

func TestDedupeTableDownRunsNothing(t *testing.T) {
	t.Parallel()
	for _, tt := range queueKinds {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newDedupeRig(t, tt.fifo, rigOptions{batchSize: tt.batchSize, concurrency: 2, maxReceiveCount: 20})
				r.start()
				time.Sleep(time.Second) // the startup check passed
				r.db.setDown(errors.New("dial tcp 127.0.0.1:8000: connect: connection refused"))
				r.sendKeyed("a1=k1", "b1=k2", "c1=k3")
				time.Sleep(3 * time.Minute)
				if runs := r.bodies(); len(runs) != 0 {
					t.Fatalf("ran %v while the table was down, want nothing", runs)
				}
				if got := r.metrics.get(alarms.DedupeErrors); got < 3 {
					t.Errorf("DedupeErrors = %v, want a count of the failed claims", got)
				}
				if n := testenv.LogCount(r.logs.String(), "level", "ERROR", "failures_not_logged", "*"); n < 1 || n > 8 {
					t.Errorf("%d error lines in 3 minutes, want a few (at most one per 30 s)", n)
				}
				// Nothing lost: none deleted, none dead-lettered.
				if left := r.sqs.left(); len(left) != 0 {
					t.Errorf("deleted %v while the table was down", left)
				}
				if n := len(r.sqs.Messages(r.queue)); n != 3 {
					t.Errorf("%d messages in the queue, want the 3", n)
				}
				if dlq := r.sqs.Messages(r.dlq); len(dlq) != 0 {
					t.Errorf("dead-lettered %d messages while the table was down", len(dlq))
				}
				counts := r.receiveCounts()
				for body, n := range counts {
					switch {
					case tt.fifo && n > 1:
						// Those received wait in place (as many as watchbot holds); the rest stay in the queue.
						t.Errorf("%s received %d times while waiting in place, want at most once", body, n)
					case !tt.fifo && n < 4:
						t.Errorf("%s received %d times in 3 minutes, want it released after each backoff (1 s, 2 s, 4 s …) and received again", body, n)
					}
				}
				if !tt.fifo {
					if v := r.sqs.visibilityChanges()["a1"]; v < 1 {
						t.Errorf("a1 released visible in %d s, want its backoff", v)
					}
				}
				// Back: every key runs once.
				r.db.setDown(nil)
				r.waitFor("an empty queue", 2*time.Minute, r.empty)
				for _, b := range []string{"a1", "b1", "c1"} {
					if n := r.runsOf()[b]; n != 1 {
						t.Errorf("%s ran %d times once the table was back, want once", b, n)
					}
				}
				wantCounts(t, map[alarms.Metric]float64{alarms.WorkerErrors: 0, alarms.DeadLetter: 0}, r.metrics)
			})
		})
	}
}

// TestDedupeLostClaimAnswer: a claim whose write landed but whose answer was lost is removed,
// so the message's retry finds its key free rather than held by its own claim until it lapses.
func TestDedupeLostClaimAnswer(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newDedupeRig(t, false, rigOptions{})
		r.db.lostAnswers = 1
		r.start()
		r.sendKeyed("a1=k1")
		r.waitFor("an empty queue", 2*time.Minute, r.empty)
		calls := r.callsOf("a1")
		if len(calls) != 1 || calls[0].Attempt != 1 || calls[0].At.Sub(t0Bubble) > 5*time.Second {
			t.Fatalf("a1 ran %v, want once, after its 1 s backoff, as attempt 1: the lost claim's run was taken back", calls)
		}
		if rec := r.db.record("k1"); rec == nil || rec.state != "completed" {
			t.Errorf("record of k1 = %+v, want completed", rec)
		}
	})
}

// TestDedupeStopDuringAClaim: a claim cut short by the shutdown window releases its message
// at once, as a stopped worker's, unrun; it is no failure of the table.
func TestDedupeStopDuringAClaim(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newDedupeRig(t, false, rigOptions{})
		r.cfg.ShutdownTimeout = 2 * time.Second // shorter than a claim's timeout
		r.start()
		time.Sleep(time.Second) // the startup check passed
		r.db.hang = true
		r.sendKeyed("a1=k1")
		r.waitFor("a1 to be received", time.Minute, func() bool { return r.receiveCounts()["a1"] == 1 })
		if err := r.stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
		msgs := r.sqs.Messages(r.queue)
		if len(msgs) != 1 || msgs[0].VisibleAt.After(time.Now()) || len(r.bodies()) != 0 {
			t.Fatalf("after the stop %+v in the queue, runs %v; want a1 visible at once, unrun", msgs, r.bodies())
		}
		if !testenv.Logged(r.logs.String(), "visible_in_seconds", "0") {
			t.Errorf("a1 not released:\n%s", r.logs)
		}
		wantCounts(t, noFailures, r.metrics)
	})
}

// TestDedupeTableDownAtAStopHandsMessagesBack: FIFO messages waiting in place are handed back
// at a stop, unrun.
func TestDedupeTableDownAtAStopHandsMessagesBack(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newDedupeRig(t, true, rigOptions{})
		r.start()
		time.Sleep(time.Second)
		r.db.setDown(errors.New("connection refused"))
		r.sendKeyed("a1=k1", "b1=k2")
		time.Sleep(time.Minute)
		if err := r.stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
		msgs := r.sqs.Messages(r.queue)
		if len(msgs) != 2 || len(r.bodies()) != 0 {
			t.Fatalf("after the stop %d messages in the queue and runs %v; want both messages kept, none run", len(msgs), r.bodies())
		}
		for _, m := range msgs {
			if m.VisibleAt.Sub(time.Now()) > 31*time.Second {
				t.Errorf("%s visible in %v after the stop, want within its wait", m.Body, time.Until(m.VisibleAt))
			}
		}
	})
}

func TestDedupeMissingKeyDeadLetters(t *testing.T) {
	t.Parallel()
	for _, fifo := range []bool{false, true} {
		t.Run(map[bool]string{false: "standard", true: "FIFO"}[fifo], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newDedupeRig(t, fifo, rigOptions{})
				r.start()
				r.sendKeyed("a1=", "a2=k2")
				r.waitFor("an empty queue", 2*time.Minute, r.empty)
				if runs := r.runsOf(); runs["a1"] != 0 || runs["a2"] != 1 {
					t.Errorf("runs %v: the keyless a1 must not run, a2 (its group's next) must", r.bodies())
				}
				dlq := r.sqs.Messages(r.dlq)
				if len(dlq) != 1 || dlq[0].Body != "a1" {
					t.Fatalf("DLQ holds %v, want a1", dlq)
				}
				if got := r.metrics.get(alarms.DeadLetter); got != 1 {
					t.Errorf("DeadLetter = %v, want 1", got)
				}
				if !testenv.Logged(r.logs.String(), "level", "ERROR", "dead_letter_queue", "*") {
					t.Errorf("the dead-letter is not logged:\n%s", r.logs)
				}
			})
		})
	}
}

func TestDedupeExtendsClaimsWithTheLease(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newDedupeRig(t, false, rigOptions{visibility: 30 * time.Second})
		r.behave = func(workerCall) workerAct { return workerAct{Took: 3 * time.Minute} }
		r.start()
		r.sendKeyed("a1=k1")
		r.waitFor("a1 to start", time.Minute, func() bool { return len(r.bodies()) == 1 })
		for range 10 {
			time.Sleep(15 * time.Second)
			rec := r.db.record("k1")
			if rec == nil || rec.state != "in_progress" {
				t.Fatalf("record %+v while a1 runs", rec)
			}
			// The claim's lease outlasts the message's (at most 30 s ahead) by a margin.
			if left := time.Until(rec.lease); left < 30*time.Second {
				t.Fatalf("%v into the job the claim lapses in %v, want more than the message's lease", time.Since(r.callsOf("a1")[0].At), left)
			}
		}
		r.waitFor("an empty queue", time.Minute, r.empty)
		rec := r.db.record("k1")
		if rec == nil || rec.state != "completed" || rec.extends < 8 {
			t.Errorf("record %+v, want completed after about 12 extensions", rec)
		}
	})
}

// The table's extensions answer only when they time out (10 s): the heartbeat must still
// renew the other messages' leases when they fall due. With a 4 s receive lease a message
// received during the hang must be renewed within a second, or SQS delivers it again.
func TestDedupeHungExtensionsHoldUpNoRenewal(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newDedupeRig(t, false, rigOptions{visibility: 30 * time.Second})
		r.cfg.ReceiveVisibility, r.cfg.KillGrace = 4*time.Second, time.Second
		r.db.hangExtend = true
		r.behave = func(workerCall) workerAct { return workerAct{Took: time.Minute} }
		r.start()
		r.sendKeyed("a1=k1")
		r.waitFor("a1 to start", time.Minute, func() bool { return len(r.bodies()) == 1 })
		time.Sleep(2 * time.Second) // a1's first renewal went out at 0.5 s; its extension hangs
		r.sendKeyed("b1=k2")
		r.waitFor("b1 to start", time.Minute, func() bool { return len(r.bodies()) == 2 })
		time.Sleep(20 * time.Second)
		if c := r.receiveCounts(); c["a1"] != 1 || c["b1"] != 1 {
			t.Fatalf("receive counts %v: a lease lapsed while a1's extension hung", c)
		}
	})
}

func TestDedupeFailingExtensionsStopTheJob(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		breakIt func(*fakeDedupe)
	}{
		{"the table fails", func(f *fakeDedupe) { f.failExtend = errors.New("ThrottlingException: Rate exceeded") }},
		{"another run took the key", func(f *fakeDedupe) { f.records["k1"].owner = "usurper" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newDedupeRig(t, false, rigOptions{visibility: 30 * time.Second})
				r.behave = func(workerCall) workerAct { return workerAct{Took: time.Hour} }
				r.start()
				r.sendKeyed("a1=k1")
				r.waitFor("a1 to start", time.Minute, func() bool { return len(r.bodies()) == 1 })
				r.db.mu.Lock()
				lease := r.db.records["k1"].lease
				tt.breakIt(r.db)
				r.db.mu.Unlock()
				r.waitFor("the job to be stopped, its run ended", 5*time.Minute, func() bool {
					r.mu.Lock()
					defer r.mu.Unlock()
					return r.busy == 0
				})
				if now := time.Now(); !now.Before(lease) {
					t.Errorf("the job ended at %v, after its claim lapsed at %v", now.Sub(t0Bubble), lease.Sub(t0Bubble))
				}
				if err := r.stop(); err != nil {
					t.Fatalf("Run: %v", err)
				}
			})
		})
	}
}
