package progress

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
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

// backend is a DynamoDB to run a test against: the emulator through the real SDK over HTTP,
// or the in-memory fake.
type backend struct {
	name string
	// open returns a fresh table's client and name.
	open func(t *testing.T) (API, string)
}

var (
	emulator = backend{"dynalite", func(t *testing.T) (API, string) {
		d := testenv.DynamoDB(t)
		return d.Client(), d.NewTable(t, TableDefinition)
	}}
	fake = backend{"fake", func(*testing.T) (API, string) { return newFakeDB("progress"), "progress" }}
)

// both runs test against the emulator and the fake, as parallel subtests.
func both(t *testing.T, test func(t *testing.T, client API, table string)) {
	for _, b := range []backend{emulator, fake} {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			client, table := b.open(t)
			test(t, client, table)
		})
	}
}

// quick returns a Store on client whose conflict retries do not wait.
func quick(client API, table string) *Store {
	s := NewStore(client, table, DefaultTTL)
	s.random = func() float64 { return 0 }
	return s
}

// completeAll completes each of parts once, from workers goroutines, each call through a Store
// of its own (as each call of the CLI is a process of its own), and returns how many calls
// answered true.
func completeAll(t *testing.T, store func() *Store, job string, parts []int64, workers int) int {
	t.Helper()
	var trues atomic.Int64
	var wg sync.WaitGroup
	next := make(chan int64)
	for range workers {
		wg.Go(func() {
			for p := range next {
				c, err := store().CompletePart(t.Context(), job, p)
				if err != nil {
					t.Errorf("complete-part %d: %v", p, err)
					continue
				}
				if c.Complete {
					trues.Add(1)
				}
			}
		})
	}
	for _, p := range parts {
		next <- p
	}
	close(next)
	wg.Wait()
	return int(trues.Load())
}

// partsOf returns parts 1..total, each repeated times, interleaved (1, 2, …, total, 1, 2, …).
func partsOf(total int64, times int) []int64 {
	var out []int64
	for range times {
		for p := int64(1); p <= total; p++ {
			out = append(out, p)
		}
	}
	return out
}

func mustSetTotal(t *testing.T, s *Store, job string, total int64) {
	t.Helper()
	if _, err := s.SetTotal(t.Context(), job, total); err != nil {
		t.Fatal(err)
	}
}

func mustStatus(t *testing.T, s *Store, job string, part int64) Status {
	t.Helper()
	st, err := s.Status(t.Context(), job, part)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// 50 parts, every one delivered twice, 100 calls at once: exactly one call answers true.
func TestCompletePartConcurrentDuplicatesTrueOnce(t *testing.T) {
	both(t, func(t *testing.T, client API, table string) {
		s := quick(client, table)
		mustSetTotal(t, s, "job", 50)
		if got := completeAll(t, func() *Store { return quick(client, table) }, "job", partsOf(50, 2), 100); got != 1 {
			t.Fatalf("%d calls answered true, want 1", got)
		}
		if st := mustStatus(t, s, "job", 0); !st.Complete || st.Done != 50 || st.Progress != 1 {
			t.Fatalf("status = %+v, want complete", st)
		}
		// A late duplicate of any part changes nothing.
		if c, err := s.CompletePart(t.Context(), "job", 50); err != nil || c.Complete || !c.Duplicate {
			t.Fatalf("late duplicate = %+v, %v; want not complete, duplicate", c, err)
		}
	})
}

// raceDetector is true in a build with -race (race_test.go).
var raceDetector bool

// A 100,000-part job completes, each part once, with a fifth of them delivered twice (20,000
// parts under the race detector, where the 100,000 take 45 s).
func TestHundredThousandParts(t *testing.T) {
	t.Parallel()
	total := int64(100_000)
	if raceDetector {
		total = 20_000
	}
	db := newFakeDB("progress")
	s := quick(db, "progress")
	mustSetTotal(t, s, "big", total)
	parts := partsOf(total, 1)
	for p := int64(1); p <= total; p += 5 {
		parts = append(parts, p)
	}
	if got := completeAll(t, func() *Store { return s }, "big", parts, 8); got != 1 {
		t.Fatalf("%d calls answered true, want 1", got)
	}
	if st := mustStatus(t, s, "big", total); !st.Complete || st.Done != total || !*st.PartComplete {
		t.Fatalf("status = %+v, want complete", st)
	}
}

// The same on the emulator, with WATCHBOT_PROGRESS_PARTS parts (default 2,000: the emulator
// completes about a thousand parts a second; WATCHBOT_PROGRESS_PARTS=100000 takes two minutes).
func TestLargeJobOnEmulator(t *testing.T) {
	t.Parallel()
	total := int64(2000)
	if v := os.Getenv("WATCHBOT_PROGRESS_PARTS"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ValidateTotal(n) != nil {
			t.Fatalf("WATCHBOT_PROGRESS_PARTS=%q: want a number of parts, 1..%d", v, MaxParts)
		}
		total = n
	}
	client, table := emulator.open(t)
	s := quick(client, table)
	mustSetTotal(t, s, "big", total)
	if got := completeAll(t, func() *Store { return s }, "big", partsOf(total, 1), 16); got != 1 {
		t.Fatalf("%d calls answered true, want 1", got)
	}
	if st := mustStatus(t, s, "big", total); !st.Complete || st.Done != total {
		t.Fatalf("status = %+v, want complete", st)
	}
}

// Jobs of several blocks and of MaxParts parts: their items fit the emulator's limits (400 KB
// an item), the parts land in the right shards, and status counts them.
func TestJobsOfManyBlocks(t *testing.T) {
	client, table := emulator.open(t)
	s := quick(client, table)
	for _, tt := range []struct {
		total int64
		parts []int64
	}{
		{300_000, []int64{1, 2, 32, 33, block, block + 1, 2 * block, 2*block + 1, 300_000}},
		{MaxParts, []int64{1, 33, block + 1, MaxParts - 1, MaxParts}},
	} {
		job := fmt.Sprintf("job-%d", tt.total)
		mustSetTotal(t, s, job, tt.total)
		for _, p := range tt.parts {
			if c, err := s.CompletePart(t.Context(), job, p); err != nil || c.Complete {
				t.Fatalf("%s: complete-part %d = %+v, %v", job, p, c, err)
			}
		}
		done := map[int64]bool{}
		for _, p := range tt.parts {
			done[p] = true
		}
		for _, p := range append(tt.parts, 3, block+2, tt.total-2) {
			want := done[p]
			if st := mustStatus(t, s, job, p); *st.PartComplete != want || st.Done != int64(len(tt.parts)) {
				t.Errorf("%s: status part %d: partComplete %v, done %d; want %v, %d", job, p, *st.PartComplete, st.Done, want, len(tt.parts))
			}
		}
	}
}

// errCrash is what a call whose process died after a write took effect "returns".
var errCrash = errors.New("crashed after the write took effect")

// isShard and isCount tell the writes of CompletePart apart: step 1 sets a shard item, step 2
// updates the job item.
func isShard(in *dynamodb.UpdateItemInput) bool {
	return strings.HasPrefix(ddbattr.String(in.Key, KeyItem), shardPrefix)
}

func isCount(in *dynamodb.UpdateItemInput) bool { return ddbattr.String(in.Key, KeyItem) == jobItem }

// A call that stops after one of its writes (a crash, or an answer that never came) and is
// retried still leads to exactly one true, except in the one documented case: the stop comes
// after the write that completed the job, whose true is then lost (status shows the job
// complete and reduceSent unset).
func TestCompletePartStoppedBetweenWrites(t *testing.T) {
	crashAt := func(which func(*dynamodb.UpdateItemInput) bool) func(API) func(string, *dynamodb.UpdateItemInput) error {
		return func(API) func(string, *dynamodb.UpdateItemInput) error {
			return func(_ string, in *dynamodb.UpdateItemInput) error {
				if which(in) {
					return errCrash
				}
				return nil
			}
		}
	}
	// lostAnswerAt: the write took effect, its answer was lost, and the SDK sent it again, as
	// it does after a broken connection; the caller gets the answer to the second attempt.
	lostAnswerAt := func(which func(*dynamodb.UpdateItemInput) bool) func(API) func(string, *dynamodb.UpdateItemInput) error {
		return func(base API) func(string, *dynamodb.UpdateItemInput) error {
			return func(_ string, in *dynamodb.UpdateItemInput) error {
				if !which(in) {
					return nil
				}
				_, err := base.UpdateItem(context.Background(), in)
				return err
			}
		}
	}
	tests := []struct {
		name string
		// stop is how the first call for each part in faulted ends after its write; it is
		// then called again, unfaulted.
		stop      func(base API) func(string, *dynamodb.UpdateItemInput) error
		faulted   []int64
		wantTrues int
	}{
		{"crash after step 1 of the last part", crashAt(isShard), []int64{5}, 1},
		{"crash after step 1, another part completes before the retry", crashAt(isShard), []int64{4}, 1},
		{"crash after step 1 of every part", crashAt(isShard), partsOf(5, 1), 1},
		{"crash after step 2 of a part that did not complete the job", crashAt(isCount), []int64{2}, 1},
		{"crash after step 2 of the part that completed the job: its true is lost", crashAt(isCount), []int64{5}, 0},
		{"lost answer to step 1", lostAnswerAt(isShard), partsOf(5, 1), 1},
		{"lost answer to step 2 of the part that completed the job", lostAnswerAt(isCount), []int64{5}, 1},
		{"lost answer to step 2 of every part", lostAnswerAt(isCount), partsOf(5, 1), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			both(t, func(t *testing.T, client API, table string) {
				s := quick(client, table)
				mustSetTotal(t, s, "job", 5)
				faulted := map[int64]bool{}
				for _, p := range tt.faulted {
					faulted[p] = true
				}
				trues := 0
				var retries []int64
				for p := int64(1); p <= 5; p++ {
					call := s
					if faulted[p] {
						call = quick(&faulty{API: client, after: tt.stop(client)}, table)
					}
					c, err := call.CompletePart(t.Context(), "job", p)
					switch {
					case errors.Is(err, errCrash):
						retries = append(retries, p)
					case err != nil:
						t.Fatalf("complete-part %d: %v", p, err)
					case c.Complete:
						trues++
					}
				}
				for _, p := range retries {
					c, err := s.CompletePart(t.Context(), "job", p)
					if err != nil {
						t.Fatalf("retry of complete-part %d: %v", p, err)
					}
					if c.Complete {
						trues++
					}
				}
				if trues != tt.wantTrues {
					t.Fatalf("%d calls answered true, want %d", trues, tt.wantTrues)
				}
				if st := mustStatus(t, s, "job", 0); !st.Complete || st.ReduceSent {
					t.Fatalf("status = %+v, want complete, reduce not sent", st)
				}
			})
		})
	}
}

// 50 parts, each delivered twice, 100 calls at once, and every call's first attempt stops
// after step 1 (when it gets there: a duplicate has nothing to set) and is retried: still
// exactly one true.
func TestCompletePartConcurrentCrashesTrueOnce(t *testing.T) {
	both(t, func(t *testing.T, client API, table string) {
		s := quick(client, table)
		mustSetTotal(t, s, "job", 50)
		var trues atomic.Int64
		var wg sync.WaitGroup
		for _, p := range partsOf(50, 2) {
			wg.Go(func() {
				crashing := quick(&faulty{API: client, after: func(_ string, in *dynamodb.UpdateItemInput) error {
					if isShard(in) {
						return errCrash
					}
					return nil
				}}, table)
				c, err := crashing.CompletePart(t.Context(), "job", p)
				if errors.Is(err, errCrash) {
					c, err = quick(client, table).CompletePart(t.Context(), "job", p)
				}
				if err != nil {
					t.Errorf("complete-part %d: %v", p, err)
				}
				if c.Complete {
					trues.Add(1)
				}
			})
		}
		wg.Wait()
		if got := trues.Load(); got != 1 {
			t.Fatalf("%d calls answered true, want 1", got)
		}
	})
}

// DynamoDB's failures reach the caller, named, and change nothing that a retry cannot finish;
// conditional writes that fail for no visible reason are retried, up to a limit.
func TestCompletePartFaults(t *testing.T) {
	throttled := &types.ProvisionedThroughputExceededException{Message: aws.String("The level of configured provisioned throughput for the table was exceeded")}
	serverError := &smithy.OperationError{ServiceID: "DynamoDB", OperationName: "UpdateItem", Err: &smithyhttp.ResponseError{
		Response: &smithyhttp.Response{Response: &http.Response{StatusCode: http.StatusInternalServerError}},
		Err:      errors.New("InternalServerError: internal server error"),
	}}
	conflict := &types.ConditionalCheckFailedException{Message: aws.String("The conditional request failed")}
	// times answers err to the first n calls of op that match, then lets calls through.
	times := func(n int, op string, match func(any) bool, err error) func(string, any) error {
		var mu sync.Mutex
		return func(o string, in any) error {
			mu.Lock()
			defer mu.Unlock()
			if o != op || !match(in) || n == 0 {
				return nil
			}
			n--
			return err
		}
	}
	anyInput := func(any) bool { return true }
	countWrite := func(in any) bool { return ddbattr.String(in.(*dynamodb.UpdateItemInput).Key, KeyItem) == jobItem }
	shardWrite := func(in any) bool { return !countWrite(in) }
	tests := []struct {
		name   string
		before func(string, any) error
		// wantErr is the failure of the first call for the last part, "" when it succeeds.
		wantErr string
		is      error
	}{
		{"throttled read", times(1, "BatchGetItem", anyInput, throttled), "ProvisionedThroughputExceeded", throttled},
		{"server error on step 1", times(1, "UpdateItem", shardWrite, serverError), "StatusCode: 500", serverError},
		{"server error on step 2", times(1, "UpdateItem", countWrite, serverError), "StatusCode: 500", serverError},
		{"a few failed conditions on step 1", times(3, "UpdateItem", shardWrite, conflict), "", nil},
		{"a few failed conditions on step 2", times(3, "UpdateItem", countWrite, conflict), "", nil},
		{"conditions on step 2 that keep failing", times(maxConflicts, "UpdateItem", countWrite, conflict), "lost 100 races to other calls in a row", nil},
		{"a missing table", func(string, any) error {
			return &types.ResourceNotFoundException{Message: aws.String("Requested resource not found")}
		}, "table not found", ErrTableNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := newFakeDB("progress")
			s := quick(client, "progress")
			mustSetTotal(t, s, "job", 3)
			for p := int64(1); p <= 2; p++ {
				if _, err := s.CompletePart(t.Context(), "job", p); err != nil {
					t.Fatal(err)
				}
			}
			c, err := quick(&faulty{API: client, before: tt.before}, "progress").CompletePart(t.Context(), "job", 3)
			if tt.wantErr == "" {
				if err != nil || !c.Complete {
					t.Fatalf("complete-part = %+v, %v; want complete", c, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), `"job" in table progress`) {
				t.Fatalf("complete-part = %v, want an error naming the job and table with %q", err, tt.wantErr)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Fatalf("complete-part = %v, want it to wrap %v", err, tt.is)
			}
			// The worker's message is retried: the retry completes the job.
			if c, err := s.CompletePart(t.Context(), "job", 3); err != nil || !c.Complete {
				t.Fatalf("retry = %+v, %v; want complete", c, err)
			}
		})
	}
}

func TestSetTotal(t *testing.T) {
	both(t, func(t *testing.T, client API, table string) {
		s := quick(client, table)
		ctx := t.Context()
		if created, err := s.SetTotal(ctx, "job", 4); err != nil || !created {
			t.Fatalf("set-total = %v, %v; want created", created, err)
		}
		if _, err := s.CompletePart(ctx, "job", 1); err != nil {
			t.Fatal(err)
		}
		// The same total again (a retried map step) keeps the parts done.
		if created, err := s.SetTotal(ctx, "job", 4); err != nil || created {
			t.Fatalf("set-total again = %v, %v; want not created, no error", created, err)
		}
		if st := mustStatus(t, s, "job", 1); st.Done != 1 || !*st.PartComplete {
			t.Fatalf("status after a second set-total = %+v, want part 1 still done", st)
		}
		_, err := s.SetTotal(ctx, "job", 5)
		if !errors.Is(err, ErrTotalDiffers) || !strings.Contains(err.Error(), `set-total "job" to 5: the job already has another total (4)`) {
			t.Fatalf("set-total with another total = %v", err)
		}
	})
}

// Bad input is refused, each with an error that says what is wrong, and writes nothing.
func TestBadInput(t *testing.T) {
	both(t, func(t *testing.T, client API, table string) {
		s := quick(client, table)
		ctx := t.Context()
		mustSetTotal(t, s, "job", 10)
		tests := []struct {
			name    string
			call    func() error
			wantErr string
			is      error
		}{
			{"complete-part before set-total", func() error { _, err := s.CompletePart(ctx, "no-total", 1); return err },
				`job "no-total": its total was never set: set-total comes first`, ErrNoTotal},
			{"part 0", func() error { _, err := s.CompletePart(ctx, "job", 0); return err }, "part 0 is outside 1..10000000", nil},
			{"negative part", func() error { _, err := s.CompletePart(ctx, "job", -1); return err }, "part -1 is outside", nil},
			{"part above the total", func() error { _, err := s.CompletePart(ctx, "job", 11); return err },
				`part 11 of job "job" is outside 1..10 (its total)`, nil},
			{"status of a part above the total", func() error { _, err := s.Status(ctx, "job", 11); return err },
				`part 11 of job "job" is outside 1..10 (its total)`, nil},
			{"empty job id", func() error { _, err := s.CompletePart(ctx, "", 1); return err }, "no job id given", nil},
			{"job id not UTF-8", func() error { _, err := s.SetTotal(ctx, "j\xff", 1); return err }, "not valid UTF-8", nil},
			{"job id too long", func() error { return s.ReduceSent(ctx, strings.Repeat("x", 2000)) }, "2000 bytes long; at most 1024", nil},
			{"total 0", func() error { _, err := s.SetTotal(ctx, "zero", 0); return err }, "total 0 is outside 1..10000000", nil},
			{"total above the limit", func() error { _, err := s.SetTotal(ctx, "huge", MaxParts+1); return err }, "outside 1..10000000", nil},
			{"metadata not JSON", func() error { return s.SetMetadata(ctx, "job", []byte("{name: x}")) }, "metadata is not JSON", nil},
			{"metadata of two documents", func() error { return s.SetMetadata(ctx, "job", []byte("{} {}")) }, "metadata is not JSON", nil},
			{"metadata too large", func() error {
				return s.SetMetadata(ctx, "job", []byte(`"`+strings.Repeat("m", MaxMetadataBytes)+`"`))
			}, "at most 262144", nil},
			{"fail-job without a reason", func() error { return s.FailJob(ctx, "job", "") }, "fail-job needs a reason", nil},
		}
		for _, tt := range tests {
			err := tt.call()
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: got %v, want an error with %q", tt.name, err, tt.wantErr)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("%s: %v does not wrap %v", tt.name, err, tt.is)
			}
		}
		if st := mustStatus(t, s, "job", 0); st.Done != 0 || st.Metadata != nil || st.Failed {
			t.Errorf("bad input changed the job: %+v", st)
		}
		if st := mustStatus(t, s, "no-total", 0); st.Total != 0 || st.Progress != 0 {
			t.Errorf("complete-part before set-total made a job: %+v", st)
		}
	})
}

// A table that does not exist, and Watchbot's own progress table (partition key id only),
// are named as such.
func TestWrongTable(t *testing.T) {
	d := testenv.DynamoDB(t)
	client := d.Client()
	s := quick(client, "no-such-table")
	if _, err := s.SetTotal(t.Context(), "job", 3); !errors.Is(err, ErrTableNotFound) || !strings.Contains(err.Error(), "in table no-such-table") {
		t.Errorf("set-total on a missing table = %v, want ErrTableNotFound naming it", err)
	}
	watchbots := "watchbot-progress-" + strconv.FormatInt(int64(os.Getpid()), 10)
	def := TableDefinition(watchbots)
	def.AttributeDefinitions, def.KeySchema = def.AttributeDefinitions[:1], def.KeySchema[:1]
	if err := testenv.CreateTable(t.Context(), client, def); err != nil {
		t.Fatal(err)
	}
	s = quick(client, watchbots)
	for name, call := range map[string]func() error{
		"set-total":     func() error { _, err := s.SetTotal(t.Context(), "job", 3); return err },
		"complete-part": func() error { _, err := s.CompletePart(t.Context(), "job", 1); return err },
		"status":        func() error { _, err := s.Status(t.Context(), "job", 0); return err },
		"set-metadata":  func() error { return s.SetMetadata(t.Context(), "job", []byte("{}")) },
	} {
		if err := call(); !errors.Is(err, ErrKeySchema) {
			t.Errorf("%s on a table keyed by id alone = %v, want ErrKeySchema", name, err)
		}
	}
}

// TestItemsExpire: with a ttl, every write sets the item's expiry, TTLAttribute, to the ttl
// from the write, in epoch seconds, which the table's time to live deletes by; without, none.
func TestItemsExpire(t *testing.T) {
	both(t, func(t *testing.T, client API, table string) {
		ctx := t.Context()
		for _, ttl := range []time.Duration{DefaultTTL, 0} {
			s := NewStore(client, table, ttl)
			job := "expiring-" + ttl.String()
			before := time.Now()
			if _, err := s.SetTotal(ctx, job, 2); err != nil {
				t.Fatal(err)
			}
			if _, err := s.CompletePart(ctx, job, 1); err != nil {
				t.Fatal(err)
			}
			if err := s.SetMetadata(ctx, job, []byte(`{"a":1}`)); err != nil {
				t.Fatal(err)
			}
			after := time.Now()
			for _, item := range []string{jobItem, infoItem, shardKey(0)} {
				out, err := client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: key(job, item), ConsistentRead: aws.Bool(true)})
				if err != nil {
					t.Fatal(err)
				}
				exp, err := ddbattr.Int(out.Item, TTLAttribute)
				switch {
				case ttl == 0 && out.Item[TTLAttribute] != nil:
					t.Errorf("%s: %s set with no ttl", item, TTLAttribute)
				case ttl == 0:
				case err != nil:
					t.Errorf("%s: %s: %v", item, TTLAttribute, err)
				case exp < before.Add(ttl).Unix() || exp > after.Add(ttl).Unix():
					t.Errorf("%s expires at %d, want %v after its write (%d–%d)", item, exp, ttl, before.Add(ttl).Unix(), after.Add(ttl).Unix())
				}
			}
		}
	})
}
