package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/dedupe"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// fakeDedupe is an in-memory dedupe table that behaves as dedupe.Store does: records by key,
// claims, extensions, completions and releases with the Store's conditions, judged by
// time.Now (so by the bubble's clock under testing/synctest). down makes every call fail, as
// a table that cannot be reached; failExtend fails extensions only.
type fakeDedupe struct {
	mu         sync.Mutex
	records    map[string]*fakeRecord
	calls      map[string]int
	down       error
	failExtend error
	checkErr   error
	// lostAnswers: the next claims write their record, then fail, as a call whose answer
	// was lost (a timeout); throttled: the next claims fail writing nothing, as a throttled
	// table's.
	lostAnswers, throttled int
	// hang: claims answer only when their context ends; hangExtend: the same for
	// extensions; hangIf, when set, says for each claim, extension, completion or release
	// ("Claim", "Extend", "Complete", "Release") whether it hangs so. hung counts the calls
	// that hung.
	hang, hangExtend bool
	hangIf           func(op string) bool
	hung             int
	// relaySkew is added to each relay's receive time: a relaying host whose clock is ahead.
	relaySkew time.Duration
}

type fakeRecord struct {
	state, owner   string // "in_progress", "released" or "completed"
	lease, expires time.Time
	extends        int
	runs           int
	message        string         // the message its owner runs
	relayed        dedupe.Relayed // its newest relay
}

var _ DedupeAPI = (*fakeDedupe)(nil)

func newFakeDedupe() *fakeDedupe {
	return &fakeDedupe{records: map[string]*fakeRecord{}, calls: map[string]int{}}
}

// hangs makes a call of op that is to hang wait until its context ends, and reports whether
// it did.
func (f *fakeDedupe) hangs(ctx context.Context, op string) bool {
	f.mu.Lock()
	hang := op == "Claim" && f.hang || op == "Extend" && f.hangExtend || f.hangIf != nil && f.hangIf(op)
	if hang {
		f.hung++
		if op != "Claim" {
			f.calls[op]++
		}
	}
	f.mu.Unlock()
	if hang {
		<-ctx.Done()
	}
	return hang
}

// call counts a call and returns the error it fails with.
func (f *fakeDedupe) call(op string) error {
	f.calls[op]++
	if f.down != nil {
		return fmt.Errorf("dedupe %s: %w", op, f.down)
	}
	return nil
}

func (f *fakeDedupe) setDown(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = err
}

func (f *fakeDedupe) count(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

// record returns a copy of key's record, or nil.
func (f *fakeDedupe) record(key string) *fakeRecord {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.records[key]
	if r == nil {
		return nil
	}
	c := *r
	return &c
}

// hold puts a record of another run, holding key until lease; its run is counted.
func (f *fakeDedupe) hold(key, owner string, lease time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	runs := 1
	if r := f.records[key]; r != nil && r.state != "completed" {
		runs = r.runs + 1
	}
	f.records[key] = &fakeRecord{state: "in_progress", owner: owner, lease: lease, expires: lease, runs: runs}
}

// throttle makes the next n claims fail, writing nothing.
func (f *fakeDedupe) throttle(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.throttled = n
}

// complete marks key's record completed by its holder, remembered for a day.
func (f *fakeDedupe) complete(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.records[key].state, f.records[key].expires = "completed", time.Now().Add(24*time.Hour)
}

func (f *fakeDedupe) Check(context.Context) (dedupe.TTLStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("Check"); err != nil {
		return dedupe.TTLUnknown, err
	}
	return dedupe.TTLOn, f.checkErr
}

func (f *fakeDedupe) Claim(ctx context.Context, key, owner, messageID string, leaseUntil time.Time) (dedupe.Claim, error) {
	if f.hangs(ctx, "Claim") {
		return dedupe.Claim{}, fmt.Errorf("dedupe claim: %w", context.Cause(ctx))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("Claim"); err != nil {
		return dedupe.Claim{}, err
	}
	if f.throttled > 0 {
		f.throttled--
		return dedupe.Claim{}, errors.New("dedupe claim: ThrottlingException: Rate exceeded")
	}
	now := time.Now()
	r := f.records[key]
	runs := 0
	switch {
	case r == nil:
	case r.owner == owner && r.state == "in_progress" && !r.expires.Before(now):
		return dedupe.Claim{Result: dedupe.Claimed, Run: r.runs}, nil
	case r.state == "completed" && r.expires.Before(now):
	case r.state == "completed":
		return dedupe.Claim{Result: dedupe.Completed, Owner: r.owner}, nil
	case r.state == "in_progress" && !r.lease.Before(now):
		return dedupe.Claim{Result: dedupe.Held, Owner: r.owner, LeaseUntil: r.lease, MessageID: r.message}, nil
	default:
		runs = r.runs
	}
	f.records[key] = &fakeRecord{state: "in_progress", owner: owner, lease: leaseUntil, expires: leaseUntil, runs: runs + 1, message: messageID}
	if f.lostAnswers > 0 {
		f.lostAnswers--
		return dedupe.Claim{}, errors.New("dedupe claim: context deadline exceeded")
	}
	return dedupe.Claim{Result: dedupe.Claimed, Run: runs + 1}, nil
}

func (f *fakeDedupe) Extend(ctx context.Context, key, owner string, leaseUntil time.Time) (dedupe.Relayed, error) {
	if f.hangs(ctx, "Extend") {
		return dedupe.Relayed{}, ctx.Err()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("Extend"); err != nil {
		return dedupe.Relayed{}, err
	}
	if f.failExtend != nil {
		return dedupe.Relayed{}, f.failExtend
	}
	r := f.records[key]
	if r == nil || r.owner != owner || r.state != "in_progress" {
		return dedupe.Relayed{}, dedupe.ErrLost
	}
	r.lease, r.expires = leaseUntil, leaseUntil
	r.extends++
	return r.relayed, nil
}

func (f *fakeDedupe) Complete(ctx context.Context, key, owner string, expiresAt time.Time) (dedupe.Relayed, error) {
	if f.hangs(ctx, "Complete") {
		return dedupe.Relayed{}, fmt.Errorf("dedupe complete: %w", ctx.Err())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("Complete"); err != nil {
		return dedupe.Relayed{}, err
	}
	r := f.records[key]
	if r == nil || r.owner != owner {
		return dedupe.Relayed{}, dedupe.ErrLost
	}
	r.state, r.expires = "completed", expiresAt
	return r.relayed, nil
}

func (f *fakeDedupe) Relay(ctx context.Context, key, owner, messageID, receipt string, receivedAt time.Time) (int, error) {
	if f.hangs(ctx, "Relay") {
		return 0, fmt.Errorf("dedupe relay: %w", ctx.Err())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("Relay"); err != nil {
		return 0, err
	}
	r := f.records[key]
	if r == nil || r.owner != owner || r.state != "in_progress" || r.lease.Before(time.Now()) || r.message != messageID {
		return 0, dedupe.ErrLost
	}
	r.relayed = dedupe.Relayed{Count: r.relayed.Count + 1, Receipt: receipt, ReceivedAt: receivedAt.Add(f.relaySkew)}
	return r.relayed.Count, nil
}

func (f *fakeDedupe) Release(ctx context.Context, key, owner string, counted bool, expiresAt time.Time) error {
	if f.hangs(ctx, "Release") {
		return fmt.Errorf("dedupe release: %w", ctx.Err())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("Release"); err != nil {
		return err
	}
	r := f.records[key]
	if r == nil || r.owner != owner || r.state != "in_progress" {
		return dedupe.ErrLost
	}
	r.state, r.lease, r.expires = "released", time.Time{}, expiresAt
	if !counted {
		r.runs--
	}
	return nil
}

func (f *fakeDedupe) Forget(ctx context.Context, key, owner string) error {
	if f.hangs(ctx, "Forget") {
		return fmt.Errorf("dedupe forget: %w", ctx.Err())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("Forget"); err != nil {
		return err
	}
	r := f.records[key]
	switch {
	case r == nil:
		return nil
	case r.owner != owner || r.state != "in_progress":
		return dedupe.ErrLost
	}
	delete(f.records, key)
	return nil
}

// dedupeRig is fifoRig (the whole supervisor in a testing/synctest bubble against fakesqs,
// with a stand-in worker) on a standard or a FIFO queue, with a fakeDedupe keyed by the
// message attribute "idem".
type dedupeRig struct {
	*fifoRig
	db *fakeDedupe
}

func newDedupeRig(t *testing.T, fifo bool, o rigOptions) *dedupeRig {
	t.Helper()
	if o.maxReceiveCount == 0 {
		o.maxReceiveCount = 5
	}
	r := &dedupeRig{fifoRig: newFIFORig(t, o), db: newFakeDedupe()}
	if !fifo {
		ctx := context.Background()
		dlq, err := r.sqs.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("jobs-dlq")})
		if err != nil {
			t.Fatal(err)
		}
		q, err := r.sqs.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("jobs"), Attributes: map[string]string{
			"VisibilityTimeout": fmt.Sprint(int(r.cfg.VisibilityTimeout / time.Second)),
			"RedrivePolicy":     fmt.Sprintf(`{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:jobs-dlq","maxReceiveCount":%d}`, o.maxReceiveCount),
		}})
		if err != nil {
			t.Fatal(err)
		}
		r.queue, r.dlq, r.cfg.QueueURL = aws.ToString(q.QueueUrl), aws.ToString(dlq.QueueUrl), aws.ToString(q.QueueUrl)
	}
	r.cfg.Dedupe = DedupeConfig{Table: "fake", Key: "attr:idem"}
	return r
}

// start runs the supervisor with the fake table until stop is called.
func (r *dedupeRig) start() {
	r.t.Helper()
	r.stop = testenv.Run(r.t, "supervisor", 10*time.Minute, func(ctx context.Context) error {
		return Run(ctx, r.cfg, Deps{SQS: r.sqs, Logger: slog.New(slog.NewJSONHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			Metrics: r.metrics, spawn: r.spawn, Dedupe: r.db})
	}, r.trail)
}

// sendKeyed sends each "body=key" in order, the key as the attribute idem ("body=" sends no
// key); on a FIFO queue to the group the body's first letter names, each send a message of
// its own (its deduplication id the send's position).
func (r *dedupeRig) sendKeyed(pairs ...string) {
	r.t.Helper()
	for i, p := range pairs {
		body, key, _ := strings.Cut(p, "=")
		in := &sqs.SendMessageInput{QueueUrl: aws.String(r.queue), MessageBody: aws.String(body)}
		if key != "" {
			in.MessageAttributes = map[string]types.MessageAttributeValue{"idem": {DataType: aws.String("String"), StringValue: aws.String(key)}}
		}
		if strings.HasSuffix(r.queue, ".fifo") {
			in.MessageGroupId, in.MessageDeduplicationId = aws.String(body[:1]), aws.String(fmt.Sprintf("%s-%d-%d", body, i, time.Now().UnixNano()))
		}
		if _, err := r.sqs.SendMessage(context.Background(), in); err != nil {
			r.t.Fatalf("send %s: %v", p, err)
		}
	}
}

// runsOf counts the runs of each body.
func (r *dedupeRig) runsOf() map[string]int {
	out := map[string]int{}
	for _, b := range r.bodies() {
		body, _, _ := strings.Cut(b, "#")
		out[body]++
	}
	return out
}

// receiveCounts returns each message's receive count on the work queue, by body.
func (r *dedupeRig) receiveCounts() map[string]int {
	out := map[string]int{}
	for _, m := range r.sqs.Messages(r.queue) {
		out[m.Body] = m.ReceiveCount
	}
	return out
}

// wantCounts fails t for each metric of want whose total over recs is another.
func wantCounts(t *testing.T, want map[alarms.Metric]float64, recs ...*countingRecorder) {
	t.Helper()
	for m, w := range want {
		var got float64
		for _, r := range recs {
			got += r.get(m)
		}
		if got != w {
			t.Errorf("%s = %v, want %v", m, got, w)
		}
	}
}
