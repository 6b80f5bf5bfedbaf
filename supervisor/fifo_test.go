package supervisor

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/internal/dlqattr"
	"github.com/watchbot/watchbot/internal/testing/fakesqs"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// These tests run the whole supervisor in a testing/synctest bubble against fakesqs, an
// in-memory SQS that delivers FIFO messages as SQS does: several messages of a group per
// receive, in order, and none of a group while any of it is in flight; receive counts raised
// on every receive, redrive at maxReceiveCount, ReceiveRequestAttemptId honoured. fauxqs
// returns at most one message per group per receive, so a supervisor that runs a receive's
// messages side by side passes against it and breaks group order on SQS.
//
// The worker is a stand-in (Deps.spawn) scripted per message body: bodies are "a1", "a2", …,
// the letter the message group and the number its place in the group's send order. Every run
// is recorded; check fails a test when two messages of a group ran at once, when a group's
// messages started out of order (per-message mode), or when they left the queue out of order.

func TestFIFOGroupsInOrderSideBySide(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newFIFORig(t, rigOptions{maxReceiveCount: 5, concurrency: 4})
		r.send("a1", "a2", "a3", "a4", "b1", "b2", "b3", "c1", "c2", "d1")
		r.start()
		r.waitFor("an empty queue", time.Minute, r.empty)
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		r.check()
		if len(r.runs) != 10 {
			t.Errorf("runs %v, want each message once", r.bodies())
		}
		// Four groups, four slots: they ran side by side, one message of each at a time.
		if r.maxBusy != 4 {
			t.Errorf("at most %d runs at once, want 4 (one per group)", r.maxBusy)
		}
		for _, c := range r.runs {
			if c.ReceiveCount != 1 || c.Attempt != 1 {
				t.Errorf("%s ran with receive count %d, attempt %d; want 1 and 1", c.Body, c.ReceiveCount, c.Attempt)
			}
		}
		if got := r.metrics.get(alarms.MessagesProcessed); got != 10 {
			t.Errorf("MessagesProcessed = %v, want 10", got)
		}
	})
}

func TestFIFOFailureRetriesInPlace(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newFIFORig(t, rigOptions{maxReceiveCount: 5, concurrency: 2})
		// a1 fails twice; a worker asks for a2's retry in 5 s once.
		r.behave = func(c workerCall) workerAct {
			switch {
			case c.Body == "a1" && c.Run <= 2:
				return workerAct{Took: 100 * time.Millisecond, Exit: 1}
			case c.Body == "a2" && c.Run == 1:
				return workerAct{Took: 100 * time.Millisecond, Result: `{"action":"retry","delaySeconds":5}`}
			}
			return workerAct{Took: 100 * time.Millisecond}
		}
		r.send("a1", "a2", "a3")
		r.start()
		r.waitFor("an empty queue", time.Minute, r.empty)
		r.check()
		a1 := r.callsOf("a1")
		if len(a1) != 3 {
			t.Fatalf("a1 ran %d times, want 3: %v", len(a1), r.bodies())
		}
		// Backoff base 1 s: the second run 1 s after the first ended, the third 2 s after
		// the second. The receive count stays 1: the retries happened in place.
		for i, c := range a1 {
			if c.Attempt != i+1 || c.ReceiveCount != 1 {
				t.Errorf("a1 run %d: attempt %d, receive count %d; want %d and 1", i+1, c.Attempt, c.ReceiveCount, i+1)
			}
		}
		if gap := a1[1].At.Sub(a1[0].At); gap < 1100*time.Millisecond || gap > 1500*time.Millisecond {
			t.Errorf("a1's second run came %v after its first, want 100 ms of work + 1 s", gap)
		}
		if gap := a1[2].At.Sub(a1[1].At); gap < 2100*time.Millisecond || gap > 2500*time.Millisecond {
			t.Errorf("a1's third run came %v after its second, want 100 ms + 2 s", gap)
		}
		a2 := r.callsOf("a2")
		if len(a2) != 2 || a2[1].At.Sub(a2[0].At) < 5*time.Second || a2[1].ReceiveCount != 1 {
			t.Errorf("a2 runs %+v, want a second run 5 s after the first, in place", a2)
		}
		for _, c := range r.callsOf("a3") {
			if c.ReceiveCount != 1 {
				t.Errorf("a3 ran with receive count %d: a predecessor's retry raised it", c.ReceiveCount)
			}
		}
		if got := r.metrics.get(alarms.WorkerErrors); got != 2 {
			t.Errorf("WorkerErrors = %v, want 2", got)
		}
	})
}

func TestFIFOPoisonHeadLeavesItsGroupAlone(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newFIFORig(t, rigOptions{maxReceiveCount: 3, concurrency: 2})
		r.behave = func(c workerCall) workerAct {
			if c.Body == "a1" {
				return workerAct{Took: 100 * time.Millisecond, Exit: 1}
			}
			return workerAct{Took: 100 * time.Millisecond}
		}
		r.send("a1", "a2", "a3", "a4", "a5")
		r.start()
		r.waitFor("an empty queue", time.Minute, r.empty)
		r.check()
		if got := len(r.callsOf("a1")); got != 3 {
			t.Errorf("the poison head ran %d times, want exactly 3 (maxReceiveCount)", got)
		}
		want := []string{"a1#1", "a1#2", "a1#3", "a2#1", "a3#1", "a4#1", "a5#1"}
		if got := r.bodies(); !slices.Equal(got, want) {
			t.Errorf("runs %v, want %v", got, want)
		}
		if got := r.dlqBodies(); !slices.Equal(got, []string{"a1@a"}) {
			t.Fatalf("DLQ holds %v, want only a1, with its group id", got)
		}
		dlq := r.sqs.Messages(r.dlq)[0]
		if dlq.DedupID == "" {
			t.Error("the dead-lettered message has no deduplication id")
		}
		for _, b := range []string{"a2", "a3", "a4", "a5"} {
			if c := r.callsOf(b); len(c) != 1 || c[0].ReceiveCount != 1 {
				t.Errorf("%s: runs %+v, want one run at receive count 1", b, c)
			}
		}
		if got := r.sqs.left(); !slices.Equal(got, []string{"a1", "a2", "a3", "a4", "a5"}) {
			t.Errorf("left the queue in order %v", got)
		}
		if r.metrics.get(alarms.DeadLetter) != 1 || r.metrics.get(alarms.WorkerErrors) != 3 {
			t.Errorf("metrics %v, want DeadLetter 1, WorkerErrors 3", r.metrics.snapshot())
		}
	})
}

func TestFIFORejectLetsTheGroupGoOn(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newFIFORig(t, rigOptions{maxReceiveCount: 5, concurrency: 1})
		r.behave = func(c workerCall) workerAct {
			switch c.Body {
			case "a1":
				return workerAct{Exit: 3}
			case "a2":
				return workerAct{Result: `{"action":"dead-letter","reason":"tenant gone"}`}
			}
			return workerAct{}
		}
		r.send("a1", "a2", "a3")
		r.start()
		r.waitFor("an empty queue", time.Minute, r.empty)
		r.check()
		if got := r.bodies(); !slices.Equal(got, []string{"a1#1", "a2#1", "a3#1"}) {
			t.Errorf("runs %v, want each once, in order", got)
		}
		var reasons []string
		out, err := r.sqs.Server.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(r.dlq), MaxNumberOfMessages: 10, MessageAttributeNames: []string{"All"}})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range out.Messages {
			reasons = append(reasons, aws.ToString(m.Body)+": "+aws.ToString(m.MessageAttributes[dlqattr.Reason].StringValue))
		}
		if want := []string{"a1: worker rejected the message (exit 3)", "a2: tenant gone"}; !slices.Equal(reasons, want) {
			t.Errorf("DLQ %v, want %v", reasons, want)
		}
	})
}

func TestFIFOExit4HandsTheGroupBack(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newFIFORig(t, rigOptions{maxReceiveCount: 5, concurrency: 2})
		r.behave = func(c workerCall) workerAct {
			if c.Body == "a1" && c.Run == 1 {
				return workerAct{Took: 100 * time.Millisecond, Exit: 4}
			}
			return workerAct{Took: 100 * time.Millisecond}
		}
		r.send("a1", "a2", "a3")
		r.start()
		r.waitFor("an empty queue", time.Minute, r.empty)
		r.check()
		if got := r.bodies(); !slices.Equal(got, []string{"a1#1", "a1#2", "a2#1", "a3#1"}) {
			t.Fatalf("runs %v", got)
		}
		// Handed back: a1 after its 1 s backoff, a2 and a3 at once (the group stays locked
		// behind a1 in SQS). Each came back through a receive: SQS raised their counts.
		a1 := r.callsOf("a1")
		if gap := a1[1].At.Sub(a1[0].At); gap < 1100*time.Millisecond {
			t.Errorf("a1 came back after %v, want its 1 s backoff", gap)
		}
		// Concurrency 2: the first receive took a1 and a2 (one group, as much as it could);
		// a3 was never held.
		for b, want := range map[string]int{"a1": 2, "a2": 2, "a3": 1} {
			c := r.callsOf(b)
			if last := c[len(c)-1]; last.ReceiveCount != want || last.Attempt != want {
				t.Errorf("%s last ran with receive count %d, attempt %d; want %d", b, last.ReceiveCount, last.Attempt, want)
			}
		}
		if got := r.metrics.get(alarms.WorkerErrors); got != 0 {
			t.Errorf("WorkerErrors = %v after exit 4, want 0", got)
		}
	})
}

func TestFIFOMaxJobDurationRetriesInPlace(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newFIFORig(t, rigOptions{maxReceiveCount: 5, concurrency: 2})
		r.cfg.MaxJobDuration = 10 * time.Second
		r.behave = func(c workerCall) workerAct {
			if c.Body == "a1" && c.Run == 1 {
				return workerAct{Took: time.Hour}
			}
			return workerAct{Took: time.Second}
		}
		r.send("a1", "a2")
		r.start()
		r.waitFor("an empty queue", time.Minute, r.empty)
		r.check()
		if got := r.bodies(); !slices.Equal(got, []string{"a1#1", "a1#2", "a2#1"}) {
			t.Fatalf("runs %v, want a1 stopped, retried in place, then a2", got)
		}
		if c := r.callsOf("a1")[1]; c.Attempt != 2 || c.ReceiveCount != 1 {
			t.Errorf("a1's retry: attempt %d, receive count %d; want 2 and 1", c.Attempt, c.ReceiveCount)
		}
		if !testenv.Logged(r.logs.String(), "outcome", "retry-in-place", "attempt", "1") {
			t.Error("the timeout's retry in place was not logged")
		}
	})
}

func TestFIFOShutdownHandsBackHeldMessages(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newFIFORig(t, rigOptions{maxReceiveCount: 5, concurrency: 2})
		r.cfg.WaitTime = time.Second
		r.behave = func(c workerCall) workerAct {
			switch {
			case c.Body == "a1":
				return workerAct{Took: 3 * time.Second}
			case c.Body == "b1" && c.Run == 1:
				return workerAct{Took: 100 * time.Millisecond, Result: `{"action":"retry","delaySeconds":10}`}
			}
			return workerAct{Took: time.Second}
		}
		r.send("a1", "a2", "a3", "b1", "b2")
		r.start()
		r.waitFor("b1's retry", 10*time.Second, func() bool { return len(r.callsOf("b1")) == 1 })
		time.Sleep(500 * time.Millisecond)
		stopAt := time.Now()
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		r.check()
		// a1 finished within the drain and was deleted. The held messages went back: a2 at
		// once, b1 with what was left of its 10 s retry delay.
		if got := r.sqs.left(); !slices.Equal(got, []string{"a1"}) {
			t.Errorf("deleted %v, want a1 only", got)
		}
		vis := r.sqs.visibilityChanges()
		if v, ok := vis["a2"]; !ok || v != 0 {
			t.Errorf("a2's visibility set to %v (%v), want 0", v, ok)
		}
		if v := vis["b1"]; v < 8 || v > 10 {
			t.Errorf("b1's visibility set to %v s, want what was left of its 10 s delay (~9 s)", v)
		}
		// Nothing was taken back by watchbot's own last receive: the next receive sees every
		// group in order, each held message received once more, no more.
		time.Sleep(time.Until(stopAt.Add(15 * time.Second)))
		out, err := r.sqs.Server.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(r.queue),
			MaxNumberOfMessages: 10, MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, m := range out.Messages {
			got = append(got, aws.ToString(m.Body)+":"+m.Attributes["ApproximateReceiveCount"])
		}
		if want := []string{"a2:2", "a3:1", "b1:2", "b2:1"}; !slices.Equal(got, want) {
			t.Errorf("next receive %v, want %v", got, want)
		}
	})
}

func TestFIFOLeaseLostHandsBackTheRest(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newFIFORig(t, rigOptions{maxReceiveCount: 5, concurrency: 1, visibility: 10 * time.Second})
		r.cfg.HeartbeatInterval = 4 * time.Second
		r.behave = func(c workerCall) workerAct {
			if c.Body == "a1" && c.Run == 1 {
				return workerAct{Took: time.Hour}
			}
			return workerAct{Took: 100 * time.Millisecond}
		}
		r.send("a1", "a2", "a3")
		r.start()
		r.waitFor("a1's first run", 10*time.Second, func() bool { return len(r.callsOf("a1")) == 1 })
		// SQS cannot be reached for renewals: a1's lease is about to lapse; watchbot stops it
		// and leaves the group to SQS, which redelivers it, in order, when the leases lapse.
		r.sqs.Fail("ChangeMessageVisibility", 100, fakesqs.Before)
		r.sqs.Fail("ChangeMessageVisibilityBatch", 100, fakesqs.Before)
		r.waitFor("a1 stopped with its lease lost", time.Minute, func() bool { return testenv.Logged(r.logs.String(), "outcome", "abandon") })
		r.sqs.Fail("ChangeMessageVisibility", 0, fakesqs.Before)
		r.sqs.Fail("ChangeMessageVisibilityBatch", 0, fakesqs.Before)
		r.waitFor("an empty queue", time.Minute, r.empty)
		r.check()
		if got := r.bodies(); !slices.Equal(got, []string{"a1#1", "a1#2", "a2#1", "a3#1"}) {
			t.Fatalf("runs %v, want a1 stopped, then the group again in order", got)
		}
	})
}

func TestFIFOBatchHoldsAGroupBehindItsFailure(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newFIFORig(t, rigOptions{maxReceiveCount: 5, concurrency: 1, batchSize: 10})
		r.behave = func(c workerCall) workerAct {
			if c.Body == "a2" && c.Run == 1 {
				return workerAct{Result: `{"action":"retry"}`}
			}
			return workerAct{Took: 100 * time.Millisecond, Result: `{"action":"ack"}`}
		}
		r.send("a1", "a2", "a3", "a4", "b1", "b2")
		r.start()
		r.waitFor("an empty queue", time.Minute, r.empty)
		r.check()
		// One batch of all six; a2 fails: a3 and a4, although acked, stay held with it and
		// run again after it, in order; group b goes on.
		want := []string{"a1#1", "a2#1", "a3#1", "a4#1", "b1#1", "b2#1", "a2#2", "a3#2", "a4#2"}
		if got := r.bodies(); !slices.Equal(got, want) {
			t.Errorf("runs %v, want %v", got, want)
		}
		if got := r.sqs.left(); len(got) != 6 {
			t.Errorf("deleted %v, want all six (check holds each group to its order)", got)
		}
		for _, c := range r.callsOf("a3") {
			if c.Attempt != 1 {
				t.Errorf("a3 (acked, held behind a2) ran at attempt %d, want 1 both times", c.Attempt)
			}
		}
		if c := r.callsOf("a2"); c[1].Attempt != 2 {
			t.Errorf("a2's retry at attempt %d, want 2", c[1].Attempt)
		}
		for _, m := range r.sqs.Messages(r.dlq) {
			t.Errorf("%s dead-lettered", m.Body)
		}
	})
}

func TestFIFOLostReceiveAnswerCostsNothing(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newFIFORig(t, rigOptions{maxReceiveCount: 5, concurrency: 2, visibility: 5 * time.Minute})
		r.send("a1", "a2", "b1")
		// The first receive takes the messages, then its answer is lost (a 500). Retried with
		// the same ReceiveRequestAttemptId, it gets them back at once, instead of leaving
		// them, and their groups, locked for the 5-minute visibility timeout.
		r.sqs.Fail("ReceiveMessage", 1, fakesqs.After)
		r.start()
		r.waitFor("an empty queue", 30*time.Second, r.empty)
		r.check()
		for _, b := range []string{"a1", "a2", "b1"} {
			if c := r.callsOf(b); len(c) != 1 || c[0].ReceiveCount != 1 {
				t.Errorf("%s: runs %+v, want one run at receive count 1", b, c)
			}
		}
		if !testenv.Logged(r.logs.String(), "level", "ERROR", "consecutive_failures", "*") {
			t.Error("the failed receive was not logged")
		}
		// Every receive is timed; the failed one also as a receive the loop waited out.
		if n := r.metrics.get(alarms.ReceiveDuration); n < 2 {
			t.Errorf("%v receives timed, want the failed one and those after it", n)
		}
		if n := r.metrics.get(alarms.RetriedReceiveDuration); n != 1 {
			t.Errorf("%v retried or failed receives timed, want 1", n)
		}
	})
}

// TestFIFOStopInReceiveBackoffIsPrompt: a stop during the backoff after a failed receive
// makes one more receive with the failed one's ReceiveRequestAttemptId, to release what a
// lost answer took. That receive does not long-poll: SQS answers a retried attempt id from
// what it kept, so on an empty queue the stop does not wait out a 20 s poll.
func TestFIFOStopInReceiveBackoffIsPrompt(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newFIFORig(t, rigOptions{maxReceiveCount: 5})
		r.cfg.WaitTime = 20 * time.Second
		r.sqs.Fail("ReceiveMessage", 1, fakesqs.Before)
		r.start()
		r.waitFor("a failed receive", time.Minute, func() bool {
			return testenv.Logged(r.logs.String(), "level", "ERROR", "consecutive_failures", "*")
		})
		began := time.Now()
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(began); took >= time.Second {
			t.Errorf("the stop took %v of the bubble's clock: its last receive long-polled", took)
		}
	})
}
