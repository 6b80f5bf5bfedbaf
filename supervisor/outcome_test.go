package supervisor

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/watchbot/watchbot/worker"
)

// outcomeCase is a row of the outcome table's tests.
type outcomeCase struct {
	name string
	in   result
	want outcome
}

// outcomeFixtures are the results and outcomes the rows start from.
func outcomeFixtures() (mid, last, lastBelowRedrive, fifoMid, fifoLast result) {
	mid = result{Attempt: 2, MaxAttempts: 5, MaxReceiveCount: 5, OnReject: RejectDeadLetter}
	last = result{Attempt: 5, MaxAttempts: 5, MaxReceiveCount: 5, OnReject: RejectDeadLetter}
	lastBelowRedrive = result{Attempt: 3, MaxAttempts: 3, MaxReceiveCount: 5, OnReject: RejectDeadLetter}
	fifoMid = result{Attempt: 2, MaxAttempts: 5, MaxReceiveCount: 5, OnReject: RejectDeadLetter, FIFO: true}
	fifoLast = result{Attempt: 5, MaxAttempts: 5, MaxReceiveCount: 5, OnReject: RejectDeadLetter, FIFO: true}
	return
}

// with returns r edited.
func with(r result, edit func(*result)) result { edit(&r); return r }

// unclaimed: the duplicate check kept the message from running with o (claimDecision); its
// attempts count runs, as they do with a dedupe table.
func unclaimed(r result, o outcome) result {
	r.End, r.Unclaimed, r.CountsRuns = endUnclaimed, o, true
	return r
}

func checkOutcomes(t *testing.T, tests []outcomeCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := outcomeFor(tt.in); got != tt.want {
				t.Fatalf("outcomeFor(%+v)\n got  %+v\n want %+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestOutcomeFor(t *testing.T) {
	t.Parallel()
	mid, last, lastBelowRedrive, _, _ := outcomeFixtures()
	delay := func(s float64) *float64 { return &s }
	checkOutcomes(t, []outcomeCase{
		{"exit 0 deletes", with(mid, func(r *result) { r.ExitCode = 0 }),
			outcome{Action: actDelete, Success: true}},
		{"exit 0 on the last attempt deletes", with(last, func(r *result) { r.ExitCode = 0 }),
			outcome{Action: actDelete, Success: true}},
		{"exit 1 retries with backoff", with(mid, func(r *result) { r.ExitCode = 1 }),
			outcome{Action: actRetry, DelayFromBackoff: true, Reason: "worker exited 1", WorkerError: true}},
		{"exit 3 dead-letters", with(mid, func(r *result) { r.ExitCode = 3 }),
			outcome{Action: actDeadLetter, Reason: "worker rejected the message (exit 3)", WorkerError: true, DeadLetter: true}},
		{"exit 3 with --on-reject delete", with(mid, func(r *result) { r.ExitCode = 3; r.OnReject = RejectDelete }),
			outcome{Action: actDelete, Reason: "worker rejected the message (exit 3, --on-reject delete)", WorkerError: true}},
		{"exit 4 releases without a worker error", with(mid, func(r *result) { r.ExitCode = 4 }),
			outcome{Action: actRetry, DelayFromBackoff: true, Reason: "worker released the message (exit 4)"}},
		{"a Lambda function's failure retries with backoff, a worker error", with(mid, func(r *result) { r.End = endFunctionFailed }),
			outcome{Action: actRetry, DelayFromBackoff: true, Reason: "the function failed", WorkerError: true}},
		{"an HTTP failure status retries with backoff, a worker error", with(mid, func(r *result) { r.End = endHTTPStatus; r.ExitCode = 500 }),
			outcome{Action: actRetry, DelayFromBackoff: true, Reason: "worker answered HTTP 500", WorkerError: true}},
		{"killed by a signal", with(mid, func(r *result) { r.End = endSignaled; r.ExitCode = 9 }),
			outcome{Action: actRetry, DelayFromBackoff: true, Reason: "worker killed by signal 9", WorkerError: true}},
		{"timed out", with(mid, func(r *result) { r.End = endTimedOut }),
			outcome{Action: actRetry, DelayFromBackoff: true, Reason: "worker exceeded --max-job-duration", WorkerError: true}},
		{"could not start", with(mid, func(r *result) { r.End = endSpawnError }),
			outcome{Action: actRetry, DelayFromBackoff: true, Reason: "worker could not start", SpawnError: true}},
		{"last attempt failure at maxReceiveCount leaves it to the redrive policy", with(last, func(r *result) { r.ExitCode = 1 }),
			outcome{Action: actRedrive, DelayFromBackoff: true, Reason: "worker exited 1 on the last attempt (5 of 5)", WorkerError: true, DeadLetter: true}},
		{"last attempt below maxReceiveCount is dead-lettered by watchbot", with(lastBelowRedrive, func(r *result) { r.ExitCode = 1 }),
			outcome{Action: actDeadLetter, DelayFromBackoff: true, Reason: "worker exited 1 on the last attempt (3 of 3)", WorkerError: true, DeadLetter: true}},
		{"exit 4 on the last attempt is a dead letter", with(last, func(r *result) { r.ExitCode = 4 }),
			outcome{Action: actRedrive, DelayFromBackoff: true, Reason: "worker released the message (exit 4) on the last attempt (5 of 5)", DeadLetter: true}},
		{"spawn failure on the last attempt", with(last, func(r *result) { r.End = endSpawnError }),
			outcome{Action: actRedrive, DelayFromBackoff: true, Reason: "worker could not start on the last attempt (5 of 5)", SpawnError: true, DeadLetter: true}},
		{"no DLQ: last attempt is dead-lettered (logged)", with(last, func(r *result) { r.ExitCode = 1; r.MaxReceiveCount = 0 }),
			outcome{Action: actDeadLetter, DelayFromBackoff: true, Reason: "worker exited 1 on the last attempt (5 of 5)", WorkerError: true, DeadLetter: true}},
		{"stopped at shutdown is released whatever the exit", with(last, func(r *result) { r.End = endShutdown; r.ExitCode = 1 }),
			outcome{Action: actRelease, Reason: "stopped at shutdown; released for another worker"}},
		{"stopped before the 12h limit is released", with(mid, func(r *result) { r.End = endCeiling }),
			outcome{Action: actRelease, Reason: "stopped before SQS's 12h in-flight limit; released"}},
		{"lease lost leaves the message alone", with(mid, func(r *result) { r.End = endLeaseLost }),
			outcome{Action: actAbandon, Reason: "lease lost; the message is no longer ours"}},
		{"too old is dead-lettered without running", with(mid, func(r *result) { r.End = endNotRun }),
			outcome{Action: actDeadLetter, Reason: "older than --max-message-age", DeadLetter: true}},
		{"payload rejected is dead-lettered at once", with(mid, func(r *result) {
			r.End, r.Payload = endPayloadRejected, "payload s3://b/k cannot be fetched: NoSuchKey"
		}),
			outcome{Action: actDeadLetter, Reason: "payload s3://b/k cannot be fetched: NoSuchKey", DeadLetter: true}},
		{"payload fetch failure is retried, not a WorkerError", with(mid, func(r *result) { r.End, r.Payload = endPayloadError, "payload fetch failed: SlowDown" }),
			outcome{Action: actRetry, DelayFromBackoff: true, Reason: "payload fetch failed: SlowDown"}},
		{"payload fetch failure on the last attempt is dead-lettered, not a WorkerError", with(lastBelowRedrive, func(r *result) { r.End, r.Payload = endPayloadError, "payload fetch failed: SlowDown" }),
			outcome{Action: actDeadLetter, DelayFromBackoff: true, Reason: "payload fetch failed: SlowDown on the last attempt (3 of 3)", DeadLetter: true}},
		{"payload fetch failure at the redrive count is left to the redrive policy", with(last, func(r *result) { r.End, r.Payload = endPayloadError, "payload fetch failed: SlowDown" }),
			outcome{Action: actRedrive, DelayFromBackoff: true, Reason: "payload fetch failed: SlowDown on the last attempt (5 of 5)", DeadLetter: true}},
		{"directive ack beats exit 1", with(mid, func(r *result) { r.ExitCode = 1; r.Directive = &worker.Directive{Action: "ack"} }),
			outcome{Action: actDelete, Reason: "worker wrote ack", Success: true}},
		{"directive retry with delay", with(mid, func(r *result) { r.Directive = &worker.Directive{Action: "retry", DelaySeconds: delay(30)} }),
			outcome{Action: actRetry, Delay: 30 * time.Second, Reason: "worker asked for a retry"}},
		{"directive retry without delay uses backoff", with(mid, func(r *result) { r.Directive = &worker.Directive{Action: "retry"} }),
			outcome{Action: actRetry, DelayFromBackoff: true, Reason: "worker asked for a retry"}},
		{"directive retry on the last attempt is a dead letter", with(last, func(r *result) { r.Directive = &worker.Directive{Action: "retry", DelaySeconds: delay(0)} }),
			outcome{Action: actRedrive, Reason: "worker asked for a retry on the last attempt (5 of 5)", WorkerError: true, DeadLetter: true}},
		{"directive dead-letter beats exit 0", with(mid, func(r *result) { r.Directive = &worker.Directive{Action: "dead-letter", Reason: "bad tenant"} }),
			outcome{Action: actDeadLetter, Reason: "bad tenant", WorkerError: true, DeadLetter: true}},
		{"directive ack from a timed-out worker still acks", with(mid, func(r *result) { r.End = endTimedOut; r.Directive = &worker.Directive{Action: "ack"} }),
			outcome{Action: actDelete, Reason: "worker wrote ack", Success: true}},

		// Not run: the duplicate check did not claim the message's key (claimDecision). A
		// retry is a retry, on the last attempt too, without a WorkerError.
	})
}

// A message the duplicate check kept from running.
func TestOutcomeForUnclaimed(t *testing.T) {
	t.Parallel()
	mid, last, lastBelowRedrive, fifoMid, fifoLast := outcomeFixtures()
	delay := func(s float64) *float64 { return &s }
	held := outcome{Action: actRetry, Delay: 3 * time.Second, Reason: "its dedupe key is held by b"}
	checkFailed := outcome{Action: actRetry, DelayFromBackoff: true, Reason: "duplicate check failed: throttled"}
	duplicate := outcome{Action: actDelete, Duplicate: true, Reason: "duplicate: its dedupe key was completed by a"}
	keyless := outcome{Action: actDeadLetter, DeadLetter: true, Reason: "no dedupe key"}
	checkOutcomes(t, []outcomeCase{
		{"unclaimed: a held key is retried after its wait", unclaimed(mid, held), held},
		{"unclaimed: a failed check is retried after the backoff", unclaimed(mid, checkFailed), checkFailed},
		{"unclaimed: a held key at maxReceiveCount is retried: no attempt, the redrive policy is the backstop", unclaimed(last, held), held},
		{"unclaimed: a failed check past --max-attempts is retried: no attempt", unclaimed(with(lastBelowRedrive, func(r *result) { r.Attempt = 4 }), checkFailed), checkFailed},
		{"unclaimed: a duplicate is deleted, whatever the attempt", unclaimed(last, duplicate), duplicate},
		{"unclaimed: a keyless message is dead-lettered", unclaimed(mid, keyless), keyless},

		// FIFO: retries happen in place; exit 4 hands back; the last attempt is dead-lettered
		// by watchbot, whatever the receive count, so the group goes on.
		{"FIFO: exit 1 retries in place", with(fifoMid, func(r *result) { r.ExitCode = 1 }),
			outcome{Action: actRetryInPlace, DelayFromBackoff: true, Reason: "worker exited 1", WorkerError: true}},
		{"FIFO: timed out retries in place", with(fifoMid, func(r *result) { r.End = endTimedOut }),
			outcome{Action: actRetryInPlace, DelayFromBackoff: true, Reason: "worker exceeded --max-job-duration", WorkerError: true}},
		{"FIFO: could not start retries in place", with(fifoMid, func(r *result) { r.End = endSpawnError }),
			outcome{Action: actRetryInPlace, DelayFromBackoff: true, Reason: "worker could not start", SpawnError: true}},
		{"FIFO: directive retry with delay retries in place", with(fifoMid, func(r *result) { r.Directive = &worker.Directive{Action: "retry", DelaySeconds: delay(30)} }),
			outcome{Action: actRetryInPlace, Delay: 30 * time.Second, Reason: "worker asked for a retry"}},
		{"FIFO: exit 4 hands the message back", with(fifoMid, func(r *result) { r.ExitCode = 4 }),
			outcome{Action: actRetry, DelayFromBackoff: true, Reason: "worker released the message (exit 4)"}},
		{"FIFO: exit 0 deletes", with(fifoMid, func(r *result) { r.ExitCode = 0 }),
			outcome{Action: actDelete, Success: true}},
		{"FIFO: exit 3 dead-letters", with(fifoMid, func(r *result) { r.ExitCode = 3 }),
			outcome{Action: actDeadLetter, Reason: "worker rejected the message (exit 3)", WorkerError: true, DeadLetter: true}},
		{"FIFO: last attempt at maxReceiveCount is dead-lettered by watchbot", with(fifoLast, func(r *result) { r.ExitCode = 1 }),
			outcome{Action: actDeadLetter, DelayFromBackoff: true, Reason: "worker exited 1 on the last attempt (5 of 5)", WorkerError: true, DeadLetter: true}},
		{"FIFO: exit 4 on the last attempt is dead-lettered by watchbot", with(fifoLast, func(r *result) { r.ExitCode = 4 }),
			outcome{Action: actDeadLetter, DelayFromBackoff: true, Reason: "worker released the message (exit 4) on the last attempt (5 of 5)", DeadLetter: true}},
		{"FIFO: stopped at shutdown is released", with(fifoMid, func(r *result) { r.End = endShutdown }),
			outcome{Action: actRelease, Reason: "stopped at shutdown; released for another worker"}},
		{"FIFO: lease lost leaves the message alone", with(fifoMid, func(r *result) { r.End = endLeaseLost }),
			outcome{Action: actAbandon, Reason: "lease lost; the message is no longer ours"}},
		{"FIFO: too old is dead-lettered without running", with(fifoMid, func(r *result) { r.End = endNotRun }),
			outcome{Action: actDeadLetter, Reason: "older than --max-message-age", DeadLetter: true}},
		{"FIFO: payload rejected is dead-lettered at once", with(fifoMid, func(r *result) { r.End, r.Payload = endPayloadRejected, "payload bucket \"x\" is not allowed" }),
			outcome{Action: actDeadLetter, Reason: "payload bucket \"x\" is not allowed", DeadLetter: true}},
		{"FIFO: payload fetch failure is retried in place", with(fifoMid, func(r *result) { r.End, r.Payload = endPayloadError, "payload fetch failed: 503" }),
			outcome{Action: actRetryInPlace, DelayFromBackoff: true, Reason: "payload fetch failed: 503"}},
		{"FIFO: unclaimed, a held key waits in place, not an attempt", unclaimed(fifoMid, held),
			outcome{Action: actRetryInPlace, Delay: 3 * time.Second, Reason: "its dedupe key is held by b", Unrun: true}},
		{"FIFO: unclaimed on the last attempt, a failed check waits in place: the wait is not the attempt", unclaimed(fifoLast, checkFailed),
			outcome{Action: actRetryInPlace, DelayFromBackoff: true, Reason: "duplicate check failed: throttled", Unrun: true}},
		{"FIFO: unclaimed while braking still waits in place", unclaimed(with(fifoMid, func(r *result) { r.Braking = true }), held),
			outcome{Action: actRetryInPlace, Delay: 3 * time.Second, Reason: "its dedupe key is held by b", Unrun: true}},
		{"FIFO: unclaimed, a duplicate is deleted; the group goes on", unclaimed(fifoLast, duplicate), duplicate},
		{"FIFO: held behind an unclaimed message of its group", unclaimed(fifoMid, outcome{Action: actHold, Reason: "behind"}),
			outcome{Action: actHold, Reason: "behind"}},
	})
}

// With a dedupe table, attempts count the runs of the message's key (CountsRuns): the last
// run's failure is dead-lettered by watchbot, whatever the receive count; what ran nothing is
// no attempt.
func TestOutcomeForRuns(t *testing.T) {
	t.Parallel()
	mid, last, lastBelowRedrive, fifoMid, fifoLast := outcomeFixtures()
	runs := func(r result, edit func(*result)) result { r.CountsRuns = true; return with(r, edit) }
	checkOutcomes(t, []outcomeCase{
		{"runs: exit 1 mid-way retries", runs(mid, func(r *result) { r.ExitCode = 1 }),
			outcome{Action: actRetry, DelayFromBackoff: true, Reason: "worker exited 1", WorkerError: true}},
		{"runs: exit 1 on the last run at maxReceiveCount is dead-lettered by watchbot, not left to the redrive policy", runs(last, func(r *result) { r.ExitCode = 1 }),
			outcome{Action: actDeadLetter, DelayFromBackoff: true, Reason: "worker exited 1 on the last attempt (5 of 5)", WorkerError: true, DeadLetter: true}},
		{"runs: exit 1 on the last run below maxReceiveCount is dead-lettered", runs(lastBelowRedrive, func(r *result) { r.ExitCode = 1 }),
			outcome{Action: actDeadLetter, DelayFromBackoff: true, Reason: "worker exited 1 on the last attempt (3 of 3)", WorkerError: true, DeadLetter: true}},
		{"runs: exit 4 on the last run is dead-lettered", runs(last, func(r *result) { r.ExitCode = 4 }),
			outcome{Action: actDeadLetter, DelayFromBackoff: true, Reason: "worker released the message (exit 4) on the last attempt (5 of 5)", DeadLetter: true}},
		{"runs: timed out on the last run is dead-lettered", runs(last, func(r *result) { r.End = endTimedOut }),
			outcome{Action: actDeadLetter, DelayFromBackoff: true, Reason: "worker exceeded --max-job-duration on the last attempt (5 of 5)", WorkerError: true, DeadLetter: true}},
		{"runs: a payload that could not be fetched on the last run is retried: nothing ran", runs(last, func(r *result) { r.End, r.Payload = endPayloadError, "payload fetch failed: 503" }),
			outcome{Action: actRetry, DelayFromBackoff: true, Reason: "payload fetch failed: 503"}},
		{"runs: stopped at shutdown on the last run is released", runs(last, func(r *result) { r.End = endShutdown }),
			outcome{Action: actRelease, Reason: "stopped at shutdown; released for another worker"}},
		{"runs: exit 0 on the last run deletes", runs(last, func(r *result) { r.ExitCode = 0 }),
			outcome{Action: actDelete, Success: true}},
		{"runs, FIFO: exit 1 mid-way retries in place", runs(fifoMid, func(r *result) { r.ExitCode = 1 }),
			outcome{Action: actRetryInPlace, DelayFromBackoff: true, Reason: "worker exited 1", WorkerError: true}},
		{"runs, FIFO: exit 1 on the last run is dead-lettered", runs(fifoLast, func(r *result) { r.ExitCode = 1 }),
			outcome{Action: actDeadLetter, DelayFromBackoff: true, Reason: "worker exited 1 on the last attempt (5 of 5)", WorkerError: true, DeadLetter: true}},
	})
}

func TestSettlementFor(t *testing.T) {
	t.Parallel()
	ran := result{End: endExited, ExitCode: 1}
	tests := []struct {
		name string
		res  result
		o    outcome
		want settlement
	}{
		{"success completes", result{End: endExited}, outcome{Action: actDelete, Success: true}, settleComplete},
		{"an ack completes", result{End: endExited, Directive: &worker.Directive{Action: "ack"}}, outcome{Action: actDelete, Success: true}, settleComplete},
		{"exit 3 forgets: the message leaves", result{End: endExited, ExitCode: 3}, outcome{Action: actDeadLetter, DeadLetter: true}, settleForget},
		{"--on-reject delete forgets", result{End: endExited, ExitCode: 3}, outcome{Action: actDelete}, settleForget},
		{"the last run's failure forgets", ran, outcome{Action: actDeadLetter, DeadLetter: true}, settleForget},
		{"a payload rejected forgets", result{End: endPayloadRejected}, outcome{Action: actDeadLetter, DeadLetter: true}, settleForget},
		{"exit 1 releases, counted", ran, outcome{Action: actRetry}, settleRelease},
		{"exit 4 releases, counted", result{End: endExited, ExitCode: 4}, outcome{Action: actRetry}, settleRelease},
		{"killed by a signal releases, counted", result{End: endSignaled}, outcome{Action: actRetry}, settleRelease},
		{"timed out releases, counted", result{End: endTimedOut}, outcome{Action: actRetry}, settleRelease},
		{"a spawn error releases, counted", result{End: endSpawnError}, outcome{Action: actRetry}, settleRelease},
		{"an HTTP failure releases, counted", result{End: endHTTPStatus}, outcome{Action: actRetry}, settleRelease},
		{"a Lambda failure releases, counted", result{End: endFunctionFailed}, outcome{Action: actRetry}, settleRelease},
		{"FIFO: a retry in place releases, counted", ran, outcome{Action: actRetryInPlace}, settleRelease},
		{"FIFO: held behind, counted", ran, outcome{Action: actHold, Attempted: true}, settleRelease},
		{"FIFO: held behind, acked", result{End: endExited}, outcome{Action: actHold}, settleUncount},
		{"a probe takes its run back", ran, outcome{Action: actRetryInPlace, Probe: true}, settleUncount},
		{"a pause takes its run back", result{End: endExited, Directive: &worker.Directive{}}, outcome{Action: actRetryInPlace, Paused: true}, settleUncount},
		{"stopped at shutdown takes its run back", result{End: endShutdown}, outcome{Action: actRelease}, settleUncount},
		{"stopped at the in-flight limit takes its run back", result{End: endCeiling}, outcome{Action: actRelease}, settleUncount},
		{"a lost lease takes its run back", result{End: endLeaseLost}, outcome{Action: actAbandon}, settleUncount},
		{"a payload not fetched takes its run back", result{End: endPayloadError}, outcome{Action: actRetry}, settleUncount},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := settlementFor(tt.res, tt.o); got != tt.want {
				t.Errorf("settlementFor(%+v, %+v) = %v, want %v", tt.res, tt.o, got, tt.want)
			}
		})
	}
}

func TestInGroupOrder(t *testing.T) {
	t.Parallel()
	ack := outcome{Action: actDelete, Success: true}
	fail := outcome{Action: actRetryInPlace, DelayFromBackoff: true, Reason: "worker exited 1", WorkerError: true}
	reject := outcome{Action: actDeadLetter, Reason: "worker rejected the message (exit 3)", WorkerError: true, DeadLetter: true}
	release := outcome{Action: actRetry, DelayFromBackoff: true, Reason: "worker released the message (exit 4)"}
	lost := outcome{Action: actAbandon, Reason: "lease lost; the message is no longer ours"}
	heldAcked := outcome{Action: actHold, Reason: "held behind an earlier message of its group, retried in place"}
	heldFailed := outcome{Action: actHold, Reason: "held behind an earlier message of its group, retried in place", WorkerError: true, Attempted: true}
	heldRejected := outcome{Action: actHold, Reason: "held behind an earlier message of its group, retried in place", WorkerError: true, Attempted: true}
	backWith := outcome{Action: actRelease, Reason: "handed back with an earlier message of its group"}
	tests := []struct {
		name   string
		groups []string
		in     []outcome
		want   []outcome
	}{
		{"all acked", []string{"a", "a", "b"}, []outcome{ack, ack, ack}, []outcome{ack, ack, ack}},
		{"a failure holds its group's later messages, even acked ones; other groups go on",
			[]string{"a", "a", "a", "b"}, []outcome{fail, ack, fail, ack}, []outcome{fail, heldAcked, heldFailed, ack}},
		{"a dead-lettered message lets its group go on", []string{"a", "a"}, []outcome{reject, ack}, []outcome{reject, ack}},
		{"behind a failure, a rejection waits its turn", []string{"a", "a"}, []outcome{fail, reject}, []outcome{fail, heldRejected}},
		{"behind a hand-back, the group goes back at once", []string{"a", "a", "a"}, []outcome{ack, release, ack}, []outcome{ack, release, backWith}},
		{"a lost lease stays lost", []string{"a", "a"}, []outcome{fail, lost}, []outcome{fail, lost}},
		{"the first message of a group that stops decides", []string{"a", "b", "a", "b"}, []outcome{ack, fail, fail, ack}, []outcome{ack, fail, fail, heldAcked}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, inGroupOrder(tt.groups, tt.in)); diff != "" {
				t.Fatalf("inGroupOrder (-want +got):\n%s", diff)
			}
		})
	}
}
