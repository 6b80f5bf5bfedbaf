package dedupe

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/watchbot/watchbot/internal/testing/testenv"

	"github.com/watchbot/watchbot/internal/ddbattr"
)

// clock is a Store's clock that a test moves by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// emulatorStore returns a Store on a fresh table of the emulator, reached through the real
// SDK over HTTP, with a clock the test moves.
func emulatorStore(t *testing.T, scope string) (*Store, *clock) {
	t.Helper()
	d := testenv.DynamoDB(t)
	s := NewStore(d.Client(), d.NewTable(t, TableDefinition), scope)
	c := &clock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	s.now = c.Now
	return s, c
}

func TestClaimLifecycle(t *testing.T) {
	s, c := emulatorStore(t, "jobs")
	ctx := t.Context()
	lease := func() time.Time { return c.Now().Add(time.Minute) }
	kept := func() time.Time { return c.Now().Add(4 * 24 * time.Hour) }
	type step struct {
		name string
		do   func() (Claim, error)
		want Result
		run  int // with Claimed from a claim: the run it starts
		err  error
	}
	claim := func(owner string) func() (Claim, error) {
		return func() (Claim, error) { return s.Claim(ctx, "job-1", owner, "msg-1", lease()) }
	}
	just := func(err error) (Claim, error) { return Claim{}, err }
	just2 := func(_ Relayed, err error) (Claim, error) { return Claim{}, err }
	steps := []step{
		{"a first claim takes the key: run 1", claim("a"), Claimed, 1, nil},
		{"another run finds it held", claim("b"), Held, 0, nil},
		{"the owner's retried claim succeeds, counting no run", claim("a"), Claimed, 1, nil},
		{"the owner extends its lease", func() (Claim, error) { return just2(s.Extend(ctx, "job-1", "a", c.Now().Add(3*time.Minute))) }, Claimed, 0, nil},
		{"two minutes on, the extended lease still holds", func() (Claim, error) { c.advance(2 * time.Minute); return claim("b")() }, Held, 0, nil},
		{"another run cannot extend it", func() (Claim, error) { return just2(s.Extend(ctx, "job-1", "b", lease())) }, Claimed, 0, ErrLost},
		{"nor release it", func() (Claim, error) { return just(s.Release(ctx, "job-1", "b", true, kept())) }, Claimed, 0, ErrLost},
		{"nor forget it", func() (Claim, error) { return just(s.Forget(ctx, "job-1", "b")) }, Claimed, 0, ErrLost},
		{"nor complete it", func() (Claim, error) { return just2(s.Complete(ctx, "job-1", "b", lease())) }, Claimed, 0, ErrLost},
		{"the owner's run fails: released", func() (Claim, error) { return just(s.Release(ctx, "job-1", "a", true, kept())) }, Claimed, 0, nil},
		{"releasing twice takes nothing back", func() (Claim, error) { return just(s.Release(ctx, "job-1", "a", false, kept())) }, Claimed, 0, ErrLost},
		{"a released key is claimed at once: run 2", claim("b"), Claimed, 2, nil},
		{"b is stopped: its run is taken back", func() (Claim, error) { return just(s.Release(ctx, "job-1", "b", false, kept())) }, Claimed, 0, nil},
		{"the next claim is run 2 again", claim("c"), Claimed, 2, nil},
		{"while c's lease holds, d waits", func() (Claim, error) { c.advance(59 * time.Second); return claim("d")() }, Held, 0, nil},
		{"once it lapsed (c crashed), d claims it: c's run counted", func() (Claim, error) { c.advance(2 * time.Second); return claim("d")() }, Claimed, 3, nil},
		{"c, back, cannot complete it", func() (Claim, error) { return just2(s.Complete(ctx, "job-1", "c", lease())) }, Claimed, 0, ErrLost},
		{"d completes it for an hour", func() (Claim, error) { return just2(s.Complete(ctx, "job-1", "d", c.Now().Add(time.Hour))) }, Claimed, 0, nil},
		{"completing twice is completing once", func() (Claim, error) { return just2(s.Complete(ctx, "job-1", "d", c.Now().Add(time.Hour))) }, Claimed, 0, nil},
		{"a duplicate finds it completed", claim("e"), Completed, 0, nil},
		{"the owner cannot extend a completed key", func() (Claim, error) { return just2(s.Extend(ctx, "job-1", "d", lease())) }, Claimed, 0, ErrLost},
		{"nor release it", func() (Claim, error) { return just(s.Release(ctx, "job-1", "d", true, kept())) }, Claimed, 0, ErrLost},
		{"past its expiry, though not deleted, it is claimed again, from run 1", func() (Claim, error) { c.advance(time.Hour + time.Second); return claim("f")() }, Claimed, 1, nil},
		{"f's message is dead-lettered: forgotten", func() (Claim, error) { return just(s.Forget(ctx, "job-1", "f")) }, Claimed, 0, nil},
		{"forgetting twice is forgetting once", func() (Claim, error) { return just(s.Forget(ctx, "job-1", "f")) }, Claimed, 0, nil},
		{"a forgotten key starts again from run 1", claim("g"), Claimed, 1, nil},
	}
	for _, st := range steps {
		got, err := st.do()
		if !errors.Is(err, st.err) || (err == nil && (got.Result != st.want || got.Run != st.run)) {
			t.Fatalf("%s: got %v run %d, %v; want %v run %d, %v", st.name, got.Result, got.Run, err, st.want, st.run, st.err)
		}
	}
}

func TestReleasedRunsOutliveTheLease(t *testing.T) {
	s, c := emulatorStore(t, "jobs")
	ctx := t.Context()
	for run := 1; run <= 3; run++ {
		got, err := s.Claim(ctx, "k", fmt.Sprint("run-", run), "msg-1", c.Now().Add(time.Minute))
		if err != nil || got.Result != Claimed || got.Run != run {
			t.Fatalf("claim %d = %+v, %v; want claimed, run %d", run, got, err, run)
		}
		if err := s.Release(ctx, "k", fmt.Sprint("run-", run), true, c.Now().Add(24*time.Hour)); err != nil {
			t.Fatal(err)
		}
		// The retry comes back long after the claim's lease: the count is kept with the record.
		c.advance(time.Hour)
	}
	item, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.table),
		Key: map[string]types.AttributeValue{KeyAttribute: ddbattr.S(s.key("k"))}, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	runs, _ := ddbattr.Int(item.Item, attrRuns)
	if st := ddbattr.String(item.Item, attrState); st != stateReleased || runs != 3 || item.Item[attrLease] != nil {
		t.Errorf("record = %v, runs %d; want released, 3 runs, no lease", st, runs)
	}
}

func TestClaimTellsWhoHoldsTheKeyAndUntilWhen(t *testing.T) {
	s, c := emulatorStore(t, "jobs")
	until := c.Now().Add(90 * time.Second).Truncate(time.Millisecond)
	if _, err := s.Claim(t.Context(), "k", "task-1/msg-1/1", "msg-1", until); err != nil {
		t.Fatal(err)
	}
	got, err := s.Claim(t.Context(), "k", "task-2/msg-2/1", "msg-1", c.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if got.Result != Held || got.Owner != "task-1/msg-1/1" || !got.LeaseUntil.Equal(until) || got.MessageID != "msg-1" {
		t.Errorf("claim = %+v, want held by task-1/msg-1/1 for msg-1 until %v", got, until)
	}
}

// TestRelay: a new delivery of the message a live owner runs is relayed to it, and the
// owner's extension and completion return the newest receipt; a relay of another message of
// the key, to another owner, or past the owner's lease is refused; the next claim of the key
// starts with no relay.
func TestRelay(t *testing.T) {
	s, c := emulatorStore(t, "jobs")
	ctx := t.Context()
	if _, err := s.Claim(ctx, "k", "a", "msg-1", c.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Extend(ctx, "k", "a", c.Now().Add(time.Minute)); err != nil || r != (Relayed{}) {
		t.Fatalf("extend before any relay = %+v, %v; want no relay", r, err)
	}
	for _, refused := range []struct{ name, owner, msg string }{
		{"another message of the key", "a", "msg-2"},
		{"another owner", "b", "msg-1"},
	} {
		if _, err := s.Relay(ctx, "k", refused.owner, refused.msg, "receipt-x", c.Now()); !errors.Is(err, ErrLost) {
			t.Errorf("relay to %s = %v, want ErrLost", refused.name, err)
		}
	}
	if n, err := s.Relay(ctx, "k", "a", "msg-1", "receipt-2", c.Now()); err != nil || n != 1 {
		t.Fatalf("relay = %d, %v; want the first", n, err)
	}
	c.advance(time.Second)
	second := c.Now().Truncate(time.Millisecond)
	if n, err := s.Relay(ctx, "k", "a", "msg-1", "receipt-3", second); err != nil || n != 2 {
		t.Fatalf("relay = %d, %v; want the second", n, err)
	}
	if r, err := s.Extend(ctx, "k", "a", c.Now().Add(time.Minute)); err != nil || r.Count != 2 || r.Receipt != "receipt-3" || !r.ReceivedAt.Equal(second) {
		t.Errorf("extend = %+v, %v; want the second relay, receipt-3 received at %v", r, err, second)
	}
	c.advance(2 * time.Minute)
	if _, err := s.Relay(ctx, "k", "a", "msg-1", "receipt-4", c.Now()); !errors.Is(err, ErrLost) {
		t.Errorf("relay past the owner's lease = %v, want ErrLost", err)
	}
	if _, err := s.Claim(ctx, "k", "b", "msg-1", c.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Complete(ctx, "k", "b", c.Now().Add(time.Hour)); err != nil || r != (Relayed{}) {
		t.Errorf("complete of the next claim = %+v, %v; want no relay: the last claim's are gone", r, err)
	}
}

func TestScopesKeepQueuesApart(t *testing.T) {
	s, c := emulatorStore(t, "thumbnails")
	other := NewStore(s.client, s.table, "invoices")
	other.now = c.Now
	ctx := t.Context()
	if _, err := s.Claim(ctx, "order-7", "a", "msg-1", c.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Complete(ctx, "order-7", "a", c.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	got, err := other.Claim(ctx, "order-7", "b", "msg-1", c.Now().Add(time.Minute))
	if err != nil || got.Result != Claimed {
		t.Errorf("the same key on another queue: %+v, %v; want claimed", got, err)
	}
}

func TestLongKeysAreHashed(t *testing.T) {
	s, c := emulatorStore(t, "jobs")
	ctx := t.Context()
	long := strings.Repeat("x", 100_000)
	for _, key := range []string{long, long + "y", "\xff not UTF-8"} {
		got, err := s.Claim(ctx, key, "a", "msg-1", c.Now().Add(time.Minute))
		if err != nil || got.Result != Claimed {
			t.Fatalf("claim of a %d-byte key: %+v, %v", len(key), got, err)
		}
	}
	if got, _ := s.Claim(ctx, long, "b", "msg-1", c.Now().Add(time.Minute)); got.Result != Held {
		t.Errorf("the long key claimed again: %v, want held", got.Result)
	}
	if k := recordKey("jobs", long); len(k) > maxPlainKey || !strings.HasPrefix(k, "jobs/sha256:") {
		t.Errorf("record key of a long key = %q", k)
	}
	if k := recordKey("jobs", "order-7"); k != "jobs/order-7" {
		t.Errorf("record key = %q, want jobs/order-7", k)
	}
}

func TestConcurrentClaimsOneWins(t *testing.T) {
	s, c := emulatorStore(t, "jobs")
	var claimed, held atomic.Int32
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			got, err := s.Claim(t.Context(), "hot", fmt.Sprintf("run-%d", i), "msg-1", c.Now().Add(time.Minute))
			switch {
			case err != nil:
				t.Errorf("claim: %v", err)
			case got.Result == Claimed:
				claimed.Add(1)
			case got.Result == Held:
				held.Add(1)
			}
		})
	}
	wg.Wait()
	if claimed.Load() != 1 || held.Load() != 19 {
		t.Errorf("%d claimed, %d held; want 1 and 19", claimed.Load(), held.Load())
	}
}

func TestCheck(t *testing.T) {
	d := testenv.DynamoDB(t)
	good := d.NewTable(t, TableDefinition)
	wrongKey := d.NewTable(t, func(name string) *dynamodb.CreateTableInput {
		def := TableDefinition(name)
		def.AttributeDefinitions[0].AttributeName = aws.String("id")
		def.KeySchema[0].AttributeName = aws.String("id")
		return def
	})
	wrongType := d.NewTable(t, func(name string) *dynamodb.CreateTableInput {
		def := TableDefinition(name)
		def.AttributeDefinitions[0].AttributeType = types.ScalarAttributeTypeN
		return def
	})
	withSortKey := d.NewTable(t, func(name string) *dynamodb.CreateTableInput {
		def := TableDefinition(name)
		def.AttributeDefinitions = append(def.AttributeDefinitions, types.AttributeDefinition{AttributeName: aws.String("sk"), AttributeType: types.ScalarAttributeTypeS})
		def.KeySchema = append(def.KeySchema, types.KeySchemaElement{AttributeName: aws.String("sk"), KeyType: types.KeyTypeRange})
		return def
	})
	tests := []struct {
		table string
		err   error
	}{
		{good, nil},
		{"no-such-table", ErrTableNotFound},
		{wrongKey, ErrKeySchema},
		{wrongType, ErrKeySchema},
		{withSortKey, ErrKeySchema},
	}
	for _, tt := range tests {
		t.Run(tt.table, func(t *testing.T) {
			ttl, err := NewStore(d.Client(), tt.table, "jobs").Check(t.Context())
			if !errors.Is(err, tt.err) {
				t.Fatalf("Check = %v, want %v", err, tt.err)
			}
			// The emulator answers DescribeTimeToLive with DISABLED, and cannot enable it.
			if err == nil && ttl != TTLOff {
				t.Errorf("TTL status %v on the emulator; want off", ttl)
			}
			if err != nil && !strings.Contains(err.Error(), tt.table) {
				t.Errorf("error %q does not name the table", err)
			}
		})
	}
}

// ttlTable answers DescribeTimeToLive as DynamoDB does for a table whose time to live is
// set (or not) on attribute, or with err.
type ttlTable struct {
	API
	attribute string
	status    types.TimeToLiveStatus
	err       error
}

func (t ttlTable) DescribeTimeToLive(context.Context, *dynamodb.DescribeTimeToLiveInput, ...func(*dynamodb.Options)) (*dynamodb.DescribeTimeToLiveOutput, error) {
	if t.err != nil {
		return nil, t.err
	}
	return &dynamodb.DescribeTimeToLiveOutput{TimeToLiveDescription: &types.TimeToLiveDescription{
		AttributeName: aws.String(t.attribute), TimeToLiveStatus: t.status}}, nil
}

func TestCheckReadsTheTimeToLive(t *testing.T) {
	d := testenv.DynamoDB(t)
	table := d.NewTable(t, TableDefinition)
	denied := &smithy.GenericAPIError{Code: "AccessDeniedException", Message: "not authorized to perform: dynamodb:DescribeTimeToLive"}
	tests := []struct {
		name string
		api  ttlTable
		want TTLStatus
	}{
		{"enabled on expires_at", ttlTable{attribute: TTLAttribute, status: types.TimeToLiveStatusEnabled}, TTLOn},
		{"enabled on another attribute", ttlTable{attribute: "ttl", status: types.TimeToLiveStatusEnabled}, TTLOff},
		{"being enabled", ttlTable{attribute: TTLAttribute, status: types.TimeToLiveStatusEnabling}, TTLOff},
		{"disabled", ttlTable{status: types.TimeToLiveStatusDisabled}, TTLOff},
		{"not allowed to read it", ttlTable{err: denied}, TTLUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.api.API = d.Client()
			got, err := NewStore(tt.api, table, "jobs").Check(t.Context())
			if err != nil || got != tt.want {
				t.Errorf("Check = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

// faulty is a DynamoDB client that answers some calls itself, with the errors DynamoDB
// gives, and sends the rest to the emulator.
type faulty struct {
	API
	mu    sync.Mutex
	calls map[string]int
	// fail, when it returns an error for an operation's n-th call (from 1), answers it.
	fail func(op string, n int) error
}

func (f *faulty) call(op string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls == nil {
		f.calls = map[string]int{}
	}
	f.calls[op]++
	return f.fail(op, f.calls[op])
}

func (f *faulty) count(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

func (f *faulty) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if err := f.call("GetItem"); err != nil {
		return nil, err
	}
	return f.API.GetItem(ctx, in, opts...)
}

func (f *faulty) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if err := f.call("UpdateItem"); err != nil {
		return nil, err
	}
	return f.API.UpdateItem(ctx, in, opts...)
}

func (f *faulty) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	if err := f.call("DeleteItem"); err != nil {
		return nil, err
	}
	return f.API.DeleteItem(ctx, in, opts...)
}

// The errors DynamoDB answers with, as the SDK returns them.
var (
	throttled    = &types.ProvisionedThroughputExceededException{Message: aws.String("Rate of requests exceeds the allowed throughput")}
	requestLimit = &smithy.GenericAPIError{Code: "ThrottlingException", Message: "Rate exceeded"}
	serverError  = &smithyhttp.ResponseError{Response: &smithyhttp.Response{}, Err: &types.InternalServerError{Message: aws.String("Internal server error")}}
)

func TestFaults(t *testing.T) {
	completed := map[string]types.AttributeValue{KeyAttribute: ddbattr.S("jobs/k"), attrState: ddbattr.S(stateCompleted), attrOwner: ddbattr.S("x"), TTLAttribute: ddbattr.N(1 << 40)}
	tests := []struct {
		name    string
		fail    func(op string, n int) error
		want    Result
		wantErr bool
		gets    int // GetItem calls
	}{
		{"throttled", func(op string, _ int) error { return throttlingOn(op, "UpdateItem", throttled) }, 0, true, 0},
		{"request limit", func(op string, _ int) error { return throttlingOn(op, "UpdateItem", requestLimit) }, 0, true, 0},
		{"server error", func(op string, _ int) error { return throttlingOn(op, "UpdateItem", serverError) }, 0, true, 0},
		{"the read after a lost race fails", func(op string, _ int) error {
			if op == "UpdateItem" {
				return &types.ConditionalCheckFailedException{Message: aws.String("The conditional request failed")}
			}
			return throttled
		}, 0, true, 1},
		{"DynamoDB returns the record that failed the condition", func(op string, _ int) error {
			if op == "UpdateItem" {
				return &types.ConditionalCheckFailedException{Message: aws.String("The conditional request failed"), Item: completed}
			}
			return nil
		}, Completed, false, 0},
		{"the record was gone when read: the claim is written again", func(op string, n int) error {
			if op == "UpdateItem" && n == 1 {
				return &types.ConditionalCheckFailedException{Message: aws.String("The conditional request failed")}
			}
			return nil
		}, Claimed, false, 1},
		{"it keeps changing", func(op string, _ int) error {
			if op == "UpdateItem" {
				return &types.ConditionalCheckFailedException{Message: aws.String("The conditional request failed")}
			}
			return nil
		}, 0, true, maxClaimTries},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, c := emulatorStore(t, "jobs")
			f := &faulty{API: s.client, fail: tt.fail}
			s.client = f
			got, err := s.Claim(t.Context(), "k", "a", "msg-1", c.Now().Add(time.Minute))
			if (err != nil) != tt.wantErr || (err == nil && got.Result != tt.want) {
				t.Fatalf("Claim = %+v, %v; want %v (error %v)", got, err, tt.want, tt.wantErr)
			}
			if err != nil && errors.Is(err, ErrLost) {
				t.Errorf("a failed call reads as a lost claim: %v", err)
			}
			if n := f.count("GetItem"); n != tt.gets {
				t.Errorf("%d GetItem calls, want %d", n, tt.gets)
			}
		})
	}
}

// throttlingOn returns err for calls of target.
func throttlingOn(op, target string, err error) error {
	if op == target {
		return err
	}
	return nil
}

func TestWritesFailWithTheirErrors(t *testing.T) {
	s, c := emulatorStore(t, "jobs")
	ctx := t.Context()
	if _, err := s.Claim(ctx, "k", "a", "msg-1", c.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	s.client = &faulty{API: s.client, fail: func(string, int) error { return serverError }}
	errOf := func(_ any, err error) error { return err }
	for name, err := range map[string]error{
		"extend":   errOf(s.Extend(ctx, "k", "a", c.Now().Add(time.Minute))),
		"complete": errOf(s.Complete(ctx, "k", "a", c.Now().Add(time.Hour))),
		"relay":    errOf(s.Relay(ctx, "k", "a", "msg-1", "receipt-2", c.Now())),
		"release":  s.Release(ctx, "k", "a", true, c.Now().Add(time.Hour)),
		"forget":   s.Forget(ctx, "k", "a"),
	} {
		if err == nil || errors.Is(err, ErrLost) || !strings.Contains(err.Error(), "dedupe "+name) {
			t.Errorf("%s on a failing DynamoDB = %v, want a wrapped server error", name, err)
		}
	}
}

func TestParseKeySource(t *testing.T) {
	tests := []struct {
		in, attr, err string
	}{
		{"", "", ""},
		{"message-id", "", ""},
		{"attr:idempotency-key", "idempotency-key", ""},
		{"attr:Order.Id_2", "Order.Id_2", ""},
		{"attr:", "", "is not a message attribute name"},
		{"attr:has space", "", "is not a message attribute name"},
		{"attr:" + strings.Repeat("a", 257), "", "is not a message attribute name"},
		{"body", "", `must be message-id or attr:NAME`},
		{"MessageId", "", `must be message-id or attr:NAME`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseKeySource(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("ParseKeySource(%q) = %v, want an error containing %q", tt.in, err, tt.err)
				}
				return
			}
			if err != nil || got.Attribute != tt.attr {
				t.Fatalf("ParseKeySource(%q) = %+v, %v; want attribute %q", tt.in, got, err, tt.attr)
			}
			if back, _ := ParseKeySource(got.String()); back != got {
				t.Errorf("%q does not read back as itself", got.String())
			}
		})
	}
}

// TestLongJobs: the jobs of a queue claimed longer ago than the cut, their lease live, with
// their owner, message and relays; not those of another queue, nor younger ones, nor a
// claim that lapsed or completed.
func TestLongJobs(t *testing.T) {
	s, c := emulatorStore(t, "jobs")
	ctx := t.Context()
	other := NewStore(s.client, s.table, "other")
	other.now = c.Now
	start := c.Now()
	claim := func(st *Store, key, owner, msg string) {
		t.Helper()
		if _, err := st.Claim(ctx, key, owner, msg, c.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	claim(s, "old", "a", "msg-a")
	claim(s, "lapses", "l", "msg-l")
	claim(s, "done", "d", "msg-d")
	claim(other, "old", "o", "msg-o")
	if _, err := s.Relay(ctx, "old", "a", "msg-a", "receipt-2", c.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Complete(ctx, "done", "d", c.Now().Add(24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	c.advance(11 * time.Hour)
	claim(s, "young", "y", "msg-y")
	c.advance(2 * time.Hour)
	for _, st := range []*Store{s, other} {
		for _, key := range []string{"old", "young"} {
			_, _ = st.Extend(ctx, key, map[*Store]string{s: "a", other: "o"}[st], c.Now().Add(time.Hour))
		}
	}
	if _, err := s.Extend(ctx, "young", "y", c.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	jobs, err := LongJobs(ctx, s.client.(ScanAPI), s.table, "jobs", 12*time.Hour, c.Now())
	if err != nil {
		t.Fatal(err)
	}
	want := []LongJob{{Key: "old", Owner: "a", MessageID: "msg-a", Started: start.Truncate(time.Millisecond), LeaseUntil: c.Now().Add(time.Hour), Relays: 1}}
	if len(jobs) != 1 || jobs[0].Key != want[0].Key || jobs[0].Owner != "a" || jobs[0].MessageID != "msg-a" || jobs[0].Relays != 1 ||
		!jobs[0].Started.Equal(want[0].Started) || !jobs[0].LeaseUntil.Equal(want[0].LeaseUntil) {
		t.Errorf("long jobs = %+v, want %+v", jobs, want)
	}
}
