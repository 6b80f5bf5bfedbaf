package supervisor

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/smithy-go"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/setting"
	"github.com/watchbot/watchbot/internal/sqsspec"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// relayLimit is the in-flight limit of the relay tests, SQS's 12 h scaled down: the bubble's
// clock is free, but a receive lease (20 s) and a visibility timeout (30 s) must fit in it.
const relayLimit = time.Minute

// startAnother runs a second supervisor of the rig's queue, table and stand-in worker: another
// task of the fleet, with metrics of its own.
func (r *dedupeRig) startAnother(metrics *countingRecorder) {
	r.t.Helper()
	testenv.Run(r.t, "another supervisor", 10*time.Minute, func(ctx context.Context) error {
		return Run(ctx, r.cfg, Deps{SQS: r.sqs, Logger: slog.New(slog.NewJSONHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			Metrics: metrics, spawn: r.spawn, Dedupe: r.db})
	}, r.trail)
}

// TestRelayKeepsALongJob: with a dedupe table, a job five times SQS's in-flight limit runs
// once on a fleet of two; each time its message comes back at the limit, whichever task
// receives it relays it to the owner, which deletes it with the newest receipt at the end.
// Nothing is dead-lettered, and the relays are counted. On a FIFO queue the message behind it
// in its group waits until it is done; in batch mode the batch's worker runs on the same way.
func TestRelayKeepsALongJob(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		fifo      bool
		batchSize int
	}{{"standard", false, 1}, {"FIFO", true, 1}, {"batch", false, 2}} {
		fifo := tt.fifo
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newDedupeRig(t, fifo, rigOptions{concurrency: 1, batchSize: tt.batchSize, maxReceiveCount: 10, inFlight: relayLimit})
				r.behave = func(c workerCall) workerAct {
					if c.Body == "a1" {
						return workerAct{Took: 5 * relayLimit}
					}
					return workerAct{Took: time.Second}
				}
				r.start()
				other := &countingRecorder{}
				r.startAnother(other)
				r.sendKeyed("a1=k1")
				if fifo {
					time.Sleep(time.Second)
					r.sendKeyed("a2=k2")
				}
				r.waitFor("an empty queue", 10*relayLimit, r.empty)
				if calls := r.callsOf("a1"); len(calls) != 1 {
					t.Fatalf("a1 ran %d times, want once%s", len(calls), r.trail())
				}
				if fifo {
					a1, a2 := r.callsOf("a1"), r.callsOf("a2")
					if len(a2) != 1 || a2[0].At.Before(a1[0].At.Add(5*relayLimit)) {
						t.Errorf("a2 ran %v, want once, after a1 ended: its group is held while a1 relays", a2)
					}
				}
				if dlq := r.sqs.Messages(r.dlq); len(dlq) != 0 {
					t.Errorf("dead-letter queue holds %d messages, want none", len(dlq))
				}
				if relays := r.metrics.get(alarms.Relays) + other.get(alarms.Relays); relays < 3 {
					t.Errorf("Relays = %v, want one for each limit the job passed (about 4)%s", relays, r.trail())
				}
				if rec := r.db.record("k1"); rec == nil || rec.state != "completed" {
					t.Errorf("k1's record %+v, want completed", rec)
				}
				wantCounts(t, map[alarms.Metric]float64{alarms.WorkerErrors: 0, alarms.DeadLetter: 0, alarms.MessagesProcessed: float64(len(r.bodies()))}, r.metrics, other)
			})
		})
	}
}

// TestRelayWhenNobodyReceives: one task, its one slot busy with a job that passes the
// in-flight limit. Whether its own loop receives the message again (it relays it to itself)
// or not (the owner completes the key, and a later receive deletes the message unrun), the
// job runs once and the message ends deleted.
func TestRelayWhenNobodyReceives(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newDedupeRig(t, false, rigOptions{concurrency: 1, maxReceiveCount: 10, inFlight: relayLimit})
		r.behave = func(workerCall) workerAct { return workerAct{Took: 3 * relayLimit} }
		r.start()
		r.sendKeyed("a1=k1")
		r.waitFor("an empty queue", 10*relayLimit, r.empty)
		if calls := r.callsOf("a1"); len(calls) != 1 {
			t.Fatalf("a1 ran %d times, want once", len(calls))
		}
		if dlq := r.sqs.Messages(r.dlq); len(dlq) != 0 {
			t.Errorf("dead-letter queue holds %d messages, want none", len(dlq))
		}
	})
}

// TestCeilingWithoutDedupe: without a dedupe table nothing is relayed: the job is stopped
// before the in-flight limit and its message released for a new receive.
func TestCeilingWithoutDedupe(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newDedupeRig(t, false, rigOptions{concurrency: 1, maxReceiveCount: 10, inFlight: 2 * relayLimit})
		r.cfg.Dedupe = DedupeConfig{Key: "message-id"}
		r.cfg.VisibilityTimeout, r.cfg.HeartbeatInterval = 20*time.Second, 5*time.Second
		r.db = nil
		r.behave = func(c workerCall) workerAct {
			if c.Run == 1 {
				return workerAct{Took: 5 * relayLimit}
			}
			return workerAct{Took: time.Second}
		}
		r.fifoRig.start()
		r.sendKeyed("a1=")
		r.waitFor("an empty queue", 10*relayLimit, r.empty)
		calls := r.callsOf("a1")
		if len(calls) != 2 || calls[1].At.Sub(calls[0].At) > 2*relayLimit {
			t.Fatalf("a1 ran %v, want twice: stopped before the limit, then run again", calls)
		}
		if got := r.metrics.get(alarms.Relays); got != 0 {
			t.Errorf("Relays = %v without a dedupe table", got)
		}
	})
}

// TestRelayAfterALostLease: the renewals of a running job's lease fail for twice its
// visibility timeout, well before the in-flight limit: SQS cannot be reached, refuses the
// receipt, or answers a renewal past the job's stop deadline. Its claim of the key holds, so the job goes on rather than being stopped: the
// message comes back when its lease ends, whichever task receives it relays it, and the
// owner deletes it with the newest receipt. The job runs once. When the claim cannot be
// extended either, the job is stopped before its claim lapses, so no second run can overlap
// it.
func TestRelayAfterALostLease(t *testing.T) {
	t.Parallel()
	stale := &smithy.GenericAPIError{Code: "InvalidParameterValue", Message: "Value AQEB for parameter ReceiptHandle is invalid. Reason: Message does not exist or is not available for visibility timeout change."}
	for _, tt := range []struct {
		name      string
		err       error
		late      time.Duration // the next renewal's answer comes that late instead
		tableDown bool
	}{
		{"SQS unreachable", errUnreachable, 0, false},
		{"the receipt refused", stale, 0, false},
		{"a renewal answered late", nil, time.Minute, false},
		{"the claim cannot be extended", errUnreachable, 0, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newDedupeRig(t, false, rigOptions{concurrency: 1, maxReceiveCount: 20})
				r.behave = func(c workerCall) workerAct {
					if c.Run == 1 {
						return workerAct{Took: 3 * time.Minute}
					}
					return workerAct{Took: time.Second}
				}
				r.start()
				other := &countingRecorder{}
				r.startAnother(other)
				r.sendKeyed("a1=k1")
				r.waitFor("a1 to start", time.Minute, func() bool { return len(r.callsOf("a1")) == 1 })
				r.sqs.failVisibility(tt.err)
				r.sqs.mu.Lock()
				r.sqs.slowNext = tt.late
				r.sqs.mu.Unlock()
				if tt.tableDown {
					r.db.mu.Lock()
					r.db.failExtend = errors.New("RequestError: send request failed")
					lease := r.db.records["k1"].lease
					r.db.mu.Unlock()
					r.waitFor("the job to be stopped, its run ended", 5*time.Minute, func() bool {
						r.mu.Lock()
						defer r.mu.Unlock()
						return r.busy == 0
					})
					if now := time.Now(); !now.Before(lease) {
						t.Errorf("the job ended %v after its claim lapsed, want before", now.Sub(lease))
					}
					return
				}
				time.Sleep(2 * r.cfg.VisibilityTimeout)
				r.sqs.failVisibility(nil)
				r.waitFor("an empty queue", 10*time.Minute, r.empty)
				if calls := r.callsOf("a1"); len(calls) != 1 {
					t.Fatalf("a1 ran %d times, want once: its claim holds while its lease is lost%s", len(calls), r.trail())
				}
				if dlq := r.sqs.Messages(r.dlq); len(dlq) != 0 {
					t.Errorf("dead-letter queue holds %d messages, want none", len(dlq))
				}
				if relays := r.metrics.get(alarms.Relays) + other.get(alarms.Relays); relays == 0 {
					t.Errorf("Relays = 0, want the message relayed to the owner once it came back%s", r.trail())
				}
				if rec := r.db.record("k1"); rec == nil || rec.state != "completed" {
					t.Errorf("k1's record %+v, want completed", rec)
				}
			})
		})
	}
}

// TestRelayLongJobFailsItsLastAttempt: a job three times the in-flight limit fails its last
// attempt while another task relays its message: watchbot dead-letters it with the newest
// receipt, read from its claim as it settles, so the delete deletes it (one with an older
// receipt succeeds without deleting), and the key, forgotten, runs no more. It ends at each
// moment of a relay's cycle, so one ends just after a relay its extensions have not taken.
func TestRelayLongJobFailsItsLastAttempt(t *testing.T) {
	t.Parallel()
	for _, end := range []time.Duration{0, 5 * time.Second, 10 * time.Second, 15 * time.Second} {
		t.Run(end.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newDedupeRig(t, false, rigOptions{concurrency: 1, maxReceiveCount: 20, inFlight: relayLimit})
				r.cfg.MaxAttempts = 1
				r.behave = func(workerCall) workerAct { return workerAct{Took: 3*relayLimit + end, Exit: 1} }
				r.start()
				r.startAnother(&countingRecorder{})
				r.sendKeyed("a1=k1")
				r.waitFor("the message dead-lettered and its key forgotten", 10*relayLimit, func() bool {
					return len(r.sqs.Messages(r.dlq)) == 1 && r.db.record("k1") == nil
				})
				time.Sleep(2 * relayLimit)
				if calls := r.callsOf("a1"); len(calls) != 1 {
					t.Fatalf("a1 ran %d times, want once: dead-lettered on its last attempt%s", len(calls), r.trail())
				}
				if n := len(r.sqs.Messages(r.queue)); n != 0 {
					t.Errorf("the queue holds %d messages after the dead letter, want none%s", n, r.trail())
				}
			})
		})
	}
}

// TestCheckRelays: a --max-job-duration past the in-flight limit is refused at start when the
// queue's maxReceiveCount, less the attempts, leaves too few receives to relay it.
func TestCheckRelays(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                   string
		table                  string
		job                    time.Duration
		maxReceive, maxAttempt int
		refused                bool
	}{
		{"within the limit", "jobs", 12 * time.Hour, 3, 3, false},
		{"no dedupe table: Validate refused it already", "", 48 * time.Hour, 3, 3, false},
		{"the receives it needs", "jobs", 48 * time.Hour, 7, 3, false},
		{"one receive short", "jobs", 48*time.Hour + time.Second, 7, 3, true},
		{"attempts take every receive", "jobs", 13 * time.Hour, 3, 3, true},
		{"no redrive policy", "jobs", 1000 * time.Hour, 0, 10, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Dedupe.Table, cfg.MaxJobDuration = tt.table, tt.job
			err := checkRelays(cfg, queueInfo{maxReceiveCount: tt.maxReceive, maxAttempts: tt.maxAttempt}, slog.New(slog.DiscardHandler))
			var refusal setting.Error
			if got := errors.As(err, &refusal) && refusal.Setting == listenspec.SettingMaxJobDuration; got != tt.refused || !tt.refused && err != nil {
				t.Errorf("checkRelays = %v, want refused %v", err, tt.refused)
			}
		})
	}
}

// TestRelayDrainHandsBackTheNewestReceipt: the owner stopped after its job's message was
// relayed hands the message back with the newest receipt, so it is visible at once and runs
// again on the other task, rather than staying hidden for what the relay's receive allowed.
func TestRelayDrainHandsBackTheNewestReceipt(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newDedupeRig(t, false, rigOptions{concurrency: 1, maxReceiveCount: 10, inFlight: relayLimit})
		r.cfg.ShutdownTimeout = 5 * time.Second
		r.behave = func(c workerCall) workerAct {
			if c.Run == 1 {
				return workerAct{Took: 10 * relayLimit}
			}
			return workerAct{Took: time.Second}
		}
		r.start()
		r.sendKeyed("a1=k1")
		r.waitFor("a1 to start", time.Minute, func() bool { return len(r.callsOf("a1")) == 1 })
		other := &countingRecorder{}
		r.startAnother(other)
		time.Sleep(2*relayLimit + relayLimit/2)
		if other.get(alarms.Relays) == 0 {
			t.Fatalf("no relay by the other task in %v:\n%s", 2*relayLimit, r.trail())
		}
		stopped := time.Now()
		_ = r.stop()
		r.waitFor("a1 to run again", 2*relayLimit, func() bool { return len(r.callsOf("a1")) == 2 })
		if again := r.callsOf("a1")[1].At.Sub(stopped); again > 10*time.Second {
			t.Errorf("a1 ran again %v after its owner stopped, want within seconds: handed back with a stale receipt, it stayed hidden", again)
		}
		r.waitFor("an empty queue", 2*relayLimit, r.empty)
	})
}

// TestRelayFromASkewedClock: a relay written by a host whose clock runs 10 s ahead makes the
// owner count the message's time in flight short, so a renewal near the limit asks past it;
// SQS refuses that ("beyond the limit"), and the owner waits for the next relay rather than
// taking its lease for lost: the job still runs once.
func TestRelayFromASkewedClock(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newDedupeRig(t, false, rigOptions{concurrency: 1, maxReceiveCount: 20, inFlight: relayLimit})
		r.db.relaySkew = 10 * time.Second
		r.behave = func(workerCall) workerAct { return workerAct{Took: 5 * relayLimit} }
		r.start()
		r.startAnother(&countingRecorder{})
		r.sendKeyed("a1=k1")
		r.waitFor("an empty queue", 10*relayLimit, r.empty)
		if calls := r.callsOf("a1"); len(calls) != 1 {
			t.Fatalf("a1 ran %d times, want once%s", len(calls), r.trail())
		}
		if !testenv.Logged(r.logs.String(), "level", "INFO", "error", "*") {
			t.Errorf("no renewal was refused past the limit: the test did not reach what it is about%s", r.trail())
		}
	})
}

func TestBeyondLimit(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"past the limit", &smithy.GenericAPIError{Code: "InvalidParameterValue", Message: "Value 40 for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout for the message is beyond the limit [43200 seconds]"}, true},
		{"a batch entry past the limit", &sqsspec.EntryError{Code: "InvalidParameterValue", Message: "Total VisibilityTimeout for the message is beyond the limit [43200 seconds]"}, true},
		{"a stale receipt", &smithy.GenericAPIError{Code: "InvalidParameterValue", Message: "Message does not exist or is not available for visibility timeout change."}, false},
		{"another error", errors.New("connection reset"), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := beyondLimit(tt.err); got != tt.want {
				t.Errorf("beyondLimit(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

// TestRelayLastRenewalAnsweredLate: the renewal that takes a relayable job's message to the
// in-flight limit answers late, past the stop deadline any other renewal has; the lease ends
// at the limit whatever happens, so the job is not stopped, and runs once.
func TestRelayLastRenewalAnsweredLate(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newDedupeRig(t, false, rigOptions{concurrency: 1, maxReceiveCount: 20, inFlight: relayLimit})
		r.behave = func(workerCall) workerAct { return workerAct{Took: 3 * relayLimit} }
		r.start()
		r.startAnother(&countingRecorder{})
		r.sendKeyed("a1=k1")
		// Renewals go out about 7 s after the receive and then every 15 s: the one at 37 s is
		// the first capped by the limit.
		time.Sleep(30 * time.Second)
		r.sqs.mu.Lock()
		r.sqs.slowNext = 14 * time.Second
		r.sqs.mu.Unlock()
		r.waitFor("an empty queue", 10*relayLimit, r.empty)
		if calls := r.callsOf("a1"); len(calls) != 1 {
			t.Fatalf("a1 ran %d times, want once%s", len(calls), r.trail())
		}
	})
}
