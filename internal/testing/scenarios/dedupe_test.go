//go:build linux

package scenarios

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/dedupe"
	"github.com/watchbot/watchbot/internal/dlqattr"
	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// dedupeWorld is a world whose binary has a dedupe table on the DynamoDB emulator.
func dedupeWorld(t *testing.T, qo testenv.QueueOptions) (w *world, dyn *testenv.Dynamo, table string) {
	t.Helper()
	w = newWorld(t, qo, 0, nil)
	dyn = testenv.DynamoDB(t)
	table = dyn.NewTable(t, dedupe.TableDefinition)
	w.env = dyn.Env()
	return w, dyn, table
}

// TestDedupeAttemptsAreRuns: with --dedupe-table an attempt is a run, not a receive. A
// message fails every run while, between its runs, another message of its key (a duplicate
// send) holds the key for a while, so some of its receives run nothing. It runs exactly
// --max-attempts times, as attempts 1, 2 and 3, though it is received more often, and watchbot
// dead-letters it after the third with the reason and its attempts.
func TestDedupeAttemptsAreRuns(t *testing.T) {
	t.Parallel()
	w, dyn, table := dedupeWorld(t, testenv.QueueOptions{MaxReceiveCount: 10})
	const key = "runs-fail"
	_, err := w.direct.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(w.q.URL), MessageBody: aws.String(body(key, "fail")),
		MessageAttributes: map[string]types.MessageAttributeValue{"job": {DataType: aws.String("String"), StringValue: aws.String(key)}}})
	if err != nil {
		t.Fatal(err)
	}
	// After each failed run the duplicate's run takes the key, holds it 2 s and is stopped,
	// giving its run back: the message's retry finds the key held meanwhile.
	ctx, cancel := context.WithCancel(t.Context())
	var holding sync.WaitGroup
	var holds atomic.Int32
	holding.Go(func() { holdAfterEachRun(ctx, t, dyn, table, queueattr.NameFromURL(w.q.URL), key, &holds) })
	p := w.binary("--dedupe-table", table, "--dedupe-key", "attr:job", "--max-attempts", "3", "--retry-delay", "1s",
		"--visibility-timeout", "10s", "--wait-time", "1s", "--kill-grace", "1s")
	w.eventually("the message dead-lettered", 50*time.Second, func() bool { return w.depth(w.q.DLQURL) == 1 })
	cancel()
	holding.Wait()
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	if code := p.Wait(t, 30*time.Second, w.logs.tail); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}

	runs := w.readTrace().runs[key]
	var attempts []int
	for _, r := range runs {
		attempts = append(attempts, r.attempt)
	}
	if fmt.Sprint(attempts) != "[1 2 3]" {
		t.Fatalf("ran as attempts %v, want [1 2 3]: each run one attempt, up to --max-attempts", attempts)
	}
	if last := runs[len(runs)-1]; last.receives <= 3 || holds.Load() < 2 {
		t.Errorf("the last run was receive %d, the duplicate held the key %d times; want more receives than runs, a hold after each failed run",
			last.receives, holds.Load())
	}
	out, err := w.direct.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(w.q.DLQURL), MessageAttributeNames: []string{"All"},
		WaitTimeSeconds: 1})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("receive from the DLQ: %v, %v", out, err)
	}
	attrs := out.Messages[0].MessageAttributes
	reason, n := aws.ToString(attrs[dlqattr.Reason].StringValue), aws.ToString(attrs[dlqattr.Attempts].StringValue)
	if keyOf(aws.ToString(out.Messages[0].Body)) != key || !strings.Contains(reason, "worker exited 1 on the last attempt (3 of 3)") || n != "3" {
		t.Errorf("DLQ holds %s, reason %q, attempts %q; want the message, dead-lettered by watchbot on its last attempt, 3",
			aws.ToString(out.Messages[0].Body), reason, n)
	}
	if d := w.depth(w.q.URL); d != 0 {
		t.Errorf("%d messages left in the queue, want none", d)
	}
}

// TestDedupeSupervisorKilled40Times: with --dedupe-table, a supervisor SIGKILLed 40 times
// (about every second, its workers killed with it, as a container's stop does) and started
// again while it works through 300 quick messages that never fail dead-letters none of them:
// the receives the kills make (a message in flight comes back, finds its key held by the dead
// run's claim, goes back until that claim lapses) are no attempts. Every message is deleted,
// none ran twice at once, and none ran again after it succeeded unless a kill came then.
func TestDedupeSupervisorKilled40Times(t *testing.T) {
	t.Parallel()
	const messages, kills = 300, 40
	w, _, table := dedupeWorld(t, testenv.QueueOptions{MaxReceiveCount: 20})
	var keys, bodies []string
	for i := range messages {
		k := fmt.Sprintf("kill40-%d", i)
		keys, bodies = append(keys, k), append(bodies, body(k, "sleep:300"))
	}
	w.sendBodies(bodies)
	args := []string{"--dedupe-table", table, "--max-attempts", "3", "--concurrency", "8", "--visibility-timeout", "3s",
		"--kill-grace", "1s", "--wait-time", "1s", "--backoff-base", "1s"}
	r := rand.New(rand.NewPCG(40, 3))
	var killedAt []int64
	for range kills {
		p := w.binary(args...)
		time.Sleep(600*time.Millisecond + time.Duration(r.IntN(600))*time.Millisecond)
		killedAt = append(killedAt, mono())
		if err := p.Cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		<-p.Done()
		for _, pid := range w.unfinished() {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
	w.emptyThenStop(w.binary(args...), 60*time.Second)
	// A run that had not ended a moment before a kill may not have been completed.
	const ackWindow = int64(time.Second)
	got := w.verify(keys, verifyOpts{drainWait: 2 * time.Second, excuse: func(r *run) string {
		for _, k := range killedAt {
			if r.start < k && (r.end == 0 || r.end > k-ackWindow) {
				return "under way when the supervisor was killed"
			}
		}
		return ""
	}})
	t.Log(got)
	if got.DeadLettered != 0 || got.DLQCopies != 0 {
		t.Errorf("%d messages dead-lettered (%d copies in the DLQ), want none: none ever failed", got.DeadLettered, got.DLQCopies)
	}
	if got.Deleted != messages {
		t.Errorf("%d of %d messages deleted, want all", got.Deleted, messages)
	}
	// The kills must have made receives that run nothing: counted as attempts, a message
	// received more than --max-attempts times would have been dead-lettered.
	most := 0
	for _, runs := range w.readTrace().runs {
		for _, r := range runs {
			most = max(most, r.receives)
		}
	}
	if most <= 3 {
		t.Errorf("no run came after more than 3 receives (at most %d): the kills did not test what this is about", most)
	}
}

// holdAfterEachRun watches key's record in table and, each time a run of the key has been
// released, claims the key for another message of the key, holds it 2 s and releases it
// uncounted (a duplicate's run that watchbot stopped), counting its holds, until ctx ends.
func holdAfterEachRun(ctx context.Context, t *testing.T, dyn *testenv.Dynamo, table, scope, key string, holds *atomic.Int32) {
	store := dedupe.NewStore(dyn.Client(), table, scope)
	held := 0 // the runs the record counted when the key was last held
	for n := 0; ctx.Err() == nil; sleep(ctx, 50*time.Millisecond) {
		out, err := dyn.Client().GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true),
			Key: map[string]ddbtypes.AttributeValue{dedupe.KeyAttribute: &ddbtypes.AttributeValueMemberS{Value: scope + "/" + key}}})
		if err != nil || out.Item == nil {
			continue
		}
		state, _ := out.Item["state"].(*ddbtypes.AttributeValueMemberS)
		var runs int
		if n, ok := out.Item["runs"].(*ddbtypes.AttributeValueMemberN); ok {
			runs, _ = strconv.Atoi(n.Value)
		}
		if state == nil || state.Value != "released" || runs <= held {
			continue
		}
		n++
		owner := fmt.Sprint("duplicate/", n)
		c, err := store.Claim(ctx, key, owner, "a-duplicate", time.Now().Add(3*time.Second))
		if err != nil || c.Result != dedupe.Claimed {
			continue
		}
		held = c.Run - 1
		holds.Add(1)
		sleep(ctx, 2*time.Second)
		if err := store.Release(context.WithoutCancel(ctx), key, owner, false, time.Now().Add(time.Hour)); err != nil {
			t.Errorf("release the duplicate's claim: %v", err)
		}
	}
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
