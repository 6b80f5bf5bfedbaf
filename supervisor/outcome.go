package supervisor

import (
	"fmt"
	"time"

	"github.com/watchbot/watchbot/worker"
)

// Exit codes with a meaning of their own (docs/outcomes.md).
const (
	exitReject  = 3
	exitRelease = worker.ExitRelease
)

// runEnd is how a worker run ended.
type runEnd int

const (
	endExited          runEnd = iota // the process exited on its own
	endSignaled                      // killed by a signal it was not sent by watchbot (e.g. OOM)
	endTimedOut                      // stopped by --max-job-duration
	endSpawnError                    // could not be started
	endShutdown                      // stopped by watchbot because the shutdown window closed
	endLeaseLost                     // stopped because the message's lease could not be kept
	endNotRun                        // not started: the message was too old (--max-message-age)
	endCeiling                       // stopped before the 12 h in-flight limit
	endHTTPStatus                    // an HTTP worker answered a failure status (ExitCode holds it)
	endFunctionFailed                // a Lambda function failed the message (an error, or batchItemFailures)
	endUnclaimed                     // not started: the duplicate check did not claim its key (Unclaimed holds its decision)
	endPayloadRejected               // not started: its S3 payload is not allowed, unreadable, missing or denied (Payload says which)
	endPayloadError                  // not started: its S3 payload could not be fetched this time (Payload says why)
)

// result is everything outcomeFor needs to decide.
type result struct {
	End       runEnd
	ExitCode  int
	Directive *worker.Directive // the worker's decision, nil when it made none
	Attempt   int
	// CountsRuns: Attempt counts the runs of the message's dedupe key (--dedupe-table), not
	// its receives. A retry that ran nothing is then no attempt, whatever its receive count,
	// and watchbot dead-letters the last attempt itself.
	CountsRuns bool
	// MaxAttempts is the effective --max-attempts.
	MaxAttempts int
	// MaxReceiveCount is the redrive policy's, 0 when the queue has none.
	MaxReceiveCount int
	OnReject        RejectAction
	// FIFO: the queue is a FIFO queue, where retries happen in place.
	FIFO bool
	// Braking: the brake is on.
	Braking bool
	// Unclaimed, with endUnclaimed, is the duplicate check's decision (claimDecision): a
	// delete or a dead letter stands; a retry is decided as any retry.
	Unclaimed outcome
	// Payload, with endPayloadRejected and endPayloadError, is why the message's S3 payload
	// kept it from running.
	Payload string
}

// action is what happens to the message.
type action int

const (
	actDelete       action = iota // delete: done
	actRetry                      // visibility = Delay (backoff when DelayFromBackoff)
	actRelease                    // visibility 0: visible again at once
	actDeadLetter                 // send to the DLQ (or log, with no DLQ), then delete
	actRedrive                    // visibility 0 on the last receive: the redrive policy moves it
	actAbandon                    // the lease is lost: released if watchbot holds it still, else left alone
	actRetryInPlace               // FIFO: keep it, leased, and run it again after Delay
	actHold                       // FIFO: keep it behind a message of its group retried in place
	actRelay                      // hidden for Delay (until the holder's lease lapses), its receipt handed to the run that holds its job
)

func (a action) String() string {
	return [...]string{"delete", "retry", "release", "dead-letter", "redrive", "abandon", "retry-in-place", "hold", "relay"}[a]
}

// leavesGroup reports whether a message with this outcome leaves its FIFO group for good,
// so the group goes on: deleted, or dead-lettered by watchbot.
func (a action) leavesGroup() bool { return a == actDelete || a == actDeadLetter }

// outcome is the decision for one message.
type outcome struct {
	Action action
	// Delay applies to actRetry, actRetryInPlace and actRelay; DelayFromBackoff says to use the
	// backoff policy instead.
	Delay            time.Duration
	DelayFromBackoff bool
	Reason           string
	// Metric counts.
	Success, WorkerError, SpawnError, DeadLetter bool
	// Attempted, with actHold: the run counts as one of the message's attempts (the worker
	// did not ack it).
	Attempted bool
	// Probe, with actRetryInPlace: the message probes while the brake is on; with actHold, it
	// is held behind a probe. Its runs do not count as attempts.
	Probe bool
	// Unrun, with actRetryInPlace (FIFO): the worker did not run, because the duplicate check
	// could not claim the message's key; it waits in place, and the wait is not an attempt.
	Unrun bool
	// Duplicate, with actDelete: deleted unrun, its dedupe key completed by a run.
	Duplicate bool
	// Paused, with actRetryInPlace: the worker asked for a pause (docs/limits.md); the
	// message waits in place, leased, until the pause ends, and the run is not an attempt.
	Paused bool
}

// outcomeFor is watchbot's outcome table, one decision per message and run. docs/outcomes.md's
// outcome table is this function, row by row. On a FIFO queue a retry happens in place, so
// the message keeps its group's place and its successors' receive counts stay as they are;
// exit 4 hands the message back to SQS instead, and the last attempt is dead-lettered by
// watchbot, never left to the redrive policy, so the group goes on. A message the duplicate
// check kept from running (endUnclaimed) is retried as any other, but counts no WorkerError;
// on a FIFO queue it waits in place without making an attempt, so the last-attempt rule waits
// for the run it makes. With a dedupe table an attempt is a run of the message's key
// (CountsRuns): what ran nothing is no attempt, and the last attempt is dead-lettered by
// watchbot, on any queue.
func outcomeFor(r result) outcome {
	var o outcome
	released := false
	unrun := r.End == endUnclaimed || r.End == endPayloadError
	switch {
	case r.End == endLeaseLost:
		return outcome{Action: actAbandon, Reason: "lease lost; the message is no longer ours"}
	case r.End == endNotRun:
		// Too old: dead-lettered without running, whatever the attempt.
		return outcome{Action: actDeadLetter, Reason: "older than --max-message-age", DeadLetter: true}
	case r.End == endPayloadRejected:
		// No retry can fetch it: dead-lettered at once, its object kept for the replay.
		return outcome{Action: actDeadLetter, Reason: r.Payload, DeadLetter: true}
	case r.End == endPayloadError:
		// S3 throttled, failed or could not be reached: retried as a failed run is, but the
		// worker did not fail.
		o = outcome{Action: actRetry, DelayFromBackoff: true, Reason: r.Payload}
	case unrun:
		// A duplicate deleted, a keyless message dead-lettered, whatever the attempt; a key
		// held by another run, or a check that failed, is a retry.
		o = r.Unclaimed
		if o.Action != actRetry {
			return o
		}
	case r.Directive != nil:
		// What the worker wrote stands, even when it was stopped afterwards.
		o = directiveOutcome(r.Directive)
		if o.Action == actDelete {
			o.Success = true
			return o
		}
		if o.Paused {
			return o // not an attempt: the last-attempt rule waits for a run that counts
		}
	case r.End == endShutdown:
		return outcome{Action: actRelease, Reason: "stopped at shutdown; released for another worker"}
	case r.End == endCeiling:
		return outcome{Action: actRelease, Reason: "stopped before SQS's 12h in-flight limit; released"}
	case r.End == endSpawnError:
		o = outcome{Action: actRetry, DelayFromBackoff: true, Reason: "worker could not start", SpawnError: true}
	case r.End == endTimedOut:
		o = outcome{Action: actRetry, DelayFromBackoff: true, Reason: "worker exceeded --max-job-duration", WorkerError: true}
	case r.End == endFunctionFailed:
		o = outcome{Action: actRetry, DelayFromBackoff: true, Reason: "the function failed", WorkerError: true}
	case r.End == endHTTPStatus:
		o = outcome{Action: actRetry, DelayFromBackoff: true, Reason: fmt.Sprintf("worker answered HTTP %d", r.ExitCode), WorkerError: true}
	case r.End == endSignaled:
		o = outcome{Action: actRetry, DelayFromBackoff: true, Reason: fmt.Sprintf("worker killed by signal %d", r.ExitCode), WorkerError: true}
	case r.ExitCode == 0:
		return outcome{Action: actDelete, Success: true}
	case r.ExitCode == exitReject:
		if r.OnReject == RejectDelete {
			return outcome{Action: actDelete, Reason: "worker rejected the message (exit 3, --on-reject delete)", WorkerError: true}
		}
		return outcome{Action: actDeadLetter, Reason: "worker rejected the message (exit 3)", WorkerError: true, DeadLetter: true}
	case r.ExitCode == exitRelease:
		o = outcome{Action: actRetry, DelayFromBackoff: true, Reason: "worker released the message (exit 4)"}
		released = true
	default:
		o = outcome{Action: actRetry, DelayFromBackoff: true, Reason: fmt.Sprintf("worker exited %d", r.ExitCode), WorkerError: true}
	}
	return retryFor(r, o, unrun, released)
}

// retryFor is outcomeFor's last rows, for the outcome o its first rows left open: a worker's
// dead-letter directive counts as a dead letter; a retry on the last attempt is a dead
// letter; on a FIFO queue a retry happens in place. unrun: the worker did not run (its key
// unclaimed, its payload not fetched); released: the worker released the message (exit 4).
func retryFor(r result, o outcome, unrun, released bool) outcome {
	if o.Action == actDeadLetter {
		o.DeadLetter = true
		return o
	}
	if r.End == endUnclaimed && r.FIFO {
		o.Action, o.Unrun = actRetryInPlace, true
		return o
	}
	// A retry on the last attempt is a dead letter; with attempts counted in runs, one that
	// ran nothing is not an attempt.
	if r.Attempt >= r.MaxAttempts && !(r.CountsRuns && unrun) {
		o.DeadLetter = true
		o.WorkerError = o.WorkerError || !o.SpawnError && !unrun && !released
		o.Reason = fmt.Sprintf("%s on the last attempt (%d of %d)", o.Reason, r.Attempt, r.MaxAttempts)
		if r.MaxReceiveCount > 0 && r.Attempt >= r.MaxReceiveCount && !r.FIFO && !r.CountsRuns {
			o.Action = actRedrive
		} else {
			o.Action = actDeadLetter
		}
		return o
	}
	// Braking (and not the probe, which the runner keeps), a FIFO message is handed back
	// with its group rather than retried in place, so it makes no more attempts while the
	// dependency is down.
	if r.FIFO && !released && !r.Braking {
		o.Action = actRetryInPlace
	}
	return o
}

// inGroupOrder applies FIFO group order to the outcomes of one run: once a message does not
// leave its group (retried in place, or handed back to SQS), the later messages of that group
// in the run do not leave it either, whatever the worker said of them (see behind). groups[i]
// and outs[i] belong to the run's i-th message, in group order.
func inGroupOrder(groups []string, outs []outcome) []outcome {
	blocked := map[string]outcome{} // group -> the outcome that stopped it
	res := make([]outcome, len(outs))
	for i, o := range outs {
		g := groups[i]
		if head, stopped := blocked[g]; stopped {
			res[i] = behind(head.Action == actRetryInPlace || head.Action == actHold, o)
			if head.Probe && res[i].Action == actHold {
				// Behind a probe, as the probe itself: no attempt counted.
				res[i].Attempted, res[i].Probe = false, true
			}
			continue
		}
		res[i] = o
		if !o.Action.leavesGroup() {
			blocked[g] = o
		}
	}
	return res
}

// behind is the outcome of a FIFO message whose group stopped at an earlier message of the
// same run. Behind a message kept in place (retried, or its delete still pending) it is held,
// to run again after it, counting an attempt unless the worker acked it or never ran it.
// Behind one handed back to SQS it goes back too, visible at once: SQS keeps the group's
// order. A message whose lease is lost stays abandoned. Its worker's failure still counts.
func behind(inPlace bool, o outcome) outcome {
	switch {
	case o.Action == actAbandon, inPlace && o.Action == actHold:
		return o
	case inPlace:
		return outcome{Action: actHold, Reason: "held behind an earlier message of its group, retried in place",
			WorkerError: o.WorkerError, SpawnError: o.SpawnError, Attempted: !o.Success && !o.Unrun}
	}
	return outcome{Action: actRelease, Reason: "handed back with an earlier message of its group",
		WorkerError: o.WorkerError, SpawnError: o.SpawnError}
}

// directiveOutcome is the outcome a worker's directive asks for.
func directiveOutcome(d *worker.Directive) outcome {
	switch d.Action {
	case "":
		// Only a pause: the message runs again when it ends, not counted as an attempt.
		return outcome{Action: actRetryInPlace, Paused: true, Reason: "worker asked for a pause of " + d.PauseFor.String()}
	case "ack":
		return outcome{Action: actDelete, Reason: "worker wrote ack"}
	case "retry":
		if d.DelaySeconds == nil {
			return outcome{Action: actRetry, DelayFromBackoff: true, Reason: "worker asked for a retry"}
		}
		return outcome{Action: actRetry, Delay: time.Duration(*d.DelaySeconds * float64(time.Second)), Reason: "worker asked for a retry"}
	default: // "dead-letter", checked as the directive was read
		reason := d.Reason
		if reason == "" {
			reason = "worker asked to dead-letter the message"
		}
		return outcome{Action: actDeadLetter, Reason: reason, WorkerError: true}
	}
}
