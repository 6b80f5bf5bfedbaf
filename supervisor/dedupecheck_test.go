package supervisor

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/watchbot/watchbot/dedupe"
	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/internal/setting"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

func TestCheckDedupe(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  DedupeConfig
		want string
	}{
		{"off", DedupeConfig{}, ""},
		{"off, whatever the key", DedupeConfig{Key: "nonsense"}, ""},
		{"message id", DedupeConfig{Table: "t", Key: "message-id"}, ""},
		{"an attribute", DedupeConfig{Table: "t", Key: "attr:idempotency-key", TTL: 24 * time.Hour}, ""},
		{"a bad key", DedupeConfig{Table: "t", Key: "body"}, `Dedupe.Key: ("body") must be message-id or attr:NAME`},
		{"an attribute without a name", DedupeConfig{Table: "t", Key: "attr:"}, "Dedupe.Key: "},
		{"a TTL too short", DedupeConfig{Table: "t", Key: "message-id", TTL: time.Second}, "Dedupe.TTL (1s) must be at least 1m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckDedupe(tt.cfg)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("CheckDedupe = %v, want nil", err)
				}
				return
			}
			var ce setting.Error
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("CheckDedupe = %v, want a setting.Error containing %q", err, tt.want)
			}
		})
	}
	cfg := DefaultConfig()
	cfg.QueueURL, cfg.Command = "https://sqs.us-east-1.amazonaws.com/1/q", []string{"true"}
	cfg.Dedupe.Table, cfg.Dedupe.Key = "t", "attr:"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "Dedupe.Key") {
		t.Errorf("Validate = %v, want the Dedupe.Key error", err)
	}
}

func TestDedupeStartupChecks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		table     string
		db        func() DedupeAPI
		config    bool // a refusal (exit 2), not a failed call
		want      string
		receiveOK bool
	}{
		{"table and store go together", "", func() DedupeAPI { return newFakeDedupe() }, false, "Config.Dedupe.Table and Deps.Dedupe go together", false},
		{"no table", "t", func() DedupeAPI {
			f := newFakeDedupe()
			f.checkErr = fmt.Errorf("dedupe describe in table t: %w", dedupe.ErrTableNotFound)
			return f
		}, true, "Dedupe.Table: dedupe describe in table t: table not found", false},
		{"wrong key", "t", func() DedupeAPI {
			f := newFakeDedupe()
			f.checkErr = fmt.Errorf("dedupe table t: %w", dedupe.ErrKeySchema)
			return f
		}, true, `Dedupe.Table: dedupe table t: the table's key must be "key" alone`, false},
		{"unreachable", "t", func() DedupeAPI {
			f := newFakeDedupe()
			f.down = errors.New("connection refused")
			return f
		}, false, "Dedupe.Table: table not reachable: dedupe Check: connection refused", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := newFakeQueue()
			q.add("m1", "untouched")
			cfg := DefaultConfig()
			cfg.QueueURL, cfg.Command, cfg.AllowNoDLQ, cfg.TempDir = "https://sqs.us-east-1.amazonaws.com/1/q", []string{"true"}, true, t.TempDir()
			cfg.Dedupe.Table = tt.table
			err := Run(t.Context(), cfg, Deps{SQS: q, Dedupe: tt.db()})
			var ce setting.Error
			refused := errors.As(err, &ce) && ce.Err == nil
			if err == nil || !strings.Contains(err.Error(), tt.want) || refused != tt.config {
				t.Fatalf("Run = %v, want an error containing %q (refused: %v)", err, tt.want, tt.config)
			}
			if n := q.count("ReceiveMessage"); n != 0 {
				t.Errorf("%d receives before the startup checks passed", n)
			}
		})
	}
}

func TestDedupeTTL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		ttl       time.Duration
		retention time.Duration
		want      time.Duration
		warns     bool
	}{
		{"the queue's retention", 0, 14 * 24 * time.Hour, 14 * 24 * time.Hour, false},
		{"SQS's default when the queue does not say", 0, 0, 4 * 24 * time.Hour, false},
		{"--dedupe-ttl", 30 * 24 * time.Hour, 24 * time.Hour, 30 * 24 * time.Hour, false},
		{"shorter than the retention", time.Hour, 24 * time.Hour, time.Hour, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logs := &testenv.Buffer{}
			cfg := DefaultConfig()
			cfg.Dedupe = DedupeConfig{Table: "t", Key: "message-id", TTL: tt.ttl}
			ttl, err := checkDedupe(t.Context(), newFakeDedupe(), cfg.Dedupe, queueattr.Info{RetentionPeriod: tt.retention}, slog.New(slog.NewJSONHandler(logs, nil)))
			if err != nil {
				t.Fatal(err)
			}
			if ttl != tt.want {
				t.Errorf("ttl = %v, want %v", ttl, tt.want)
			}
			if warned := testenv.Logged(logs.String(), "level", "WARN", "dedupe_ttl", "*", "retention", "*"); warned != tt.warns {
				t.Errorf("warned %v, want %v:\n%s", warned, tt.warns, logs)
			}
		})
	}
}

// TestReceiveBackstop: with a dedupe table, listen warns when the queue's maxReceiveCount
// leaves less than --max-attempts of receives that run nothing, and suggests twice it.
func TestReceiveBackstop(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                         string
		maxAttempts, maxReceiveCount int
		suggests                     int // 0: no warning
	}{
		{"twice the attempts", 5, 10, 0},
		{"more", 3, 10, 0},
		{"the attempts alone (listen's default)", 10, 10, 20},
		{"just below twice", 5, 9, 10},
		{"no redrive policy (--allow-no-dlq)", 10, 0, 0},
		{"at most SQS's limit", 600, 1000, 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logs := &testenv.Buffer{}
			warnReceiveBackstop(queueInfo{maxAttempts: tt.maxAttempts, maxReceiveCount: tt.maxReceiveCount}, slog.New(slog.NewJSONHandler(logs, nil)))
			warned := testenv.Logged(logs.String(), "level", "WARN", "suggested_max_receive_count", fmt.Sprint(tt.suggests))
			if warned != (tt.suggests != 0) || tt.suggests == 0 && logs.String() != "" {
				t.Errorf("warned %v, want a suggestion of %d:\n%s", warned, tt.suggests, logs)
			}
		})
	}
}

// TestDedupeWaitDelays is dedupeWait's table, and the bound a holder's lease puts on it.
func TestDedupeWaitDelays(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		waits    int
		low, top time.Duration
	}{
		{0, 500 * time.Millisecond, time.Second},
		{1, 500 * time.Millisecond, time.Second},
		{2, time.Second, 2 * time.Second},
		{5, 8 * time.Second, 16 * time.Second},
		{6, 15 * time.Second, 30 * time.Second},
		{63, 15 * time.Second, 30 * time.Second},
		{128, 15 * time.Second, 30 * time.Second},
	} {
		lo, hi := dedupeWait.Delay(tt.waits, func() float64 { return 0 }), dedupeWait.Delay(tt.waits, func() float64 { return 0.999999 })
		if lo != tt.low || hi < tt.top-time.Millisecond || hi > tt.top {
			t.Errorf("wait %d: %v..%v, want %v..%v", tt.waits, lo, hi, tt.low, tt.top)
		}
	}
}

// TestClaimDecision is claimDecision's table, row by row.
func TestClaimDecision(t *testing.T) {
	t.Parallel()
	now := t0Bubble
	attr := dedupe.KeySource{Attribute: "idem"}
	half := func() float64 { return 0.5 }
	heldFor := func(d time.Duration, tries int) claimFound {
		return claimFound{claim: dedupe.Claim{Result: dedupe.Held, Owner: "b", LeaseUntil: now.Add(d)}, tries: tries, now: now}
	}
	held := func(wait time.Duration) outcome {
		return outcome{Action: actRetry, Delay: wait, Reason: "its dedupe key is held by b"}
	}
	failed := outcome{Action: actRetry, DelayFromBackoff: true, Reason: "duplicate check failed: throttled"}
	relayedFor := func(d time.Duration) claimFound {
		f := heldFor(d, 1)
		f.relayed = true
		return f
	}
	relayed := func(wait time.Duration) outcome {
		return outcome{Action: actRelay, Delay: wait, Reason: "relayed to b, which runs its job"}
	}
	tests := []struct {
		name    string
		found   claimFound
		claimed bool
		want    outcome
	}{
		{"claimed: it runs", claimFound{claim: dedupe.Claim{Result: dedupe.Claimed}, tries: 1}, true, outcome{}},
		{"no key: dead-lettered", claimFound{keyless: true}, false,
			outcome{Action: actDeadLetter, DeadLetter: true, Reason: "no dedupe key: message attribute idem is missing (--dedupe-key attr:idem)"}},
		{"completed: deleted, a duplicate", claimFound{claim: dedupe.Claim{Result: dedupe.Completed, Owner: "a"}, tries: 3}, false,
			outcome{Action: actDelete, Duplicate: true, Reason: "duplicate: its dedupe key was completed by a"}},
		{"the table failed: retried after the backoff", claimFound{err: errors.New("throttled"), tries: 1}, false, failed},
		{"the table failed on attempt 63: the backoff too", claimFound{err: errors.New("throttled"), tries: 63}, false, failed},
		{"held, attempt 0: 1 s", heldFor(time.Minute, 0), false, held(time.Second)},
		{"held, attempt 1: 0.75 s, raised to 1 s", heldFor(time.Minute, 1), false, held(time.Second)},
		{"held, attempt 3: 3 s", heldFor(time.Minute, 3), false, held(3 * time.Second)},
		{"held, attempt 6: 22.5 s", heldFor(time.Minute, 6), false, held(22500 * time.Millisecond)},
		{"held, attempt 63: 22.5 s", heldFor(time.Minute, 63), false, held(22500 * time.Millisecond)},
		{"held, attempt 128: 22.5 s", heldFor(time.Minute, 128), false, held(22500 * time.Millisecond)},
		{"held, the lease lapsing in 2.5 s: 2.5 s", heldFor(2500*time.Millisecond, 6), false, held(2500 * time.Millisecond)},
		{"held, the lease lapsing in 0.3 s: 1 s", heldFor(300*time.Millisecond, 6), false, held(time.Second)},
		{"held, the lease lapsing now: 1 s", heldFor(0, 6), false, held(time.Second)},
		{"relayed: hidden until the holder's lease lapses", relayedFor(90 * time.Second), false, relayed(90 * time.Second)},
		{"relayed, the lease lapsing now: 1 s", relayedFor(0), false, relayed(time.Second)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			claimed, got := claimDecision(tt.found, attr, half)
			if claimed != tt.claimed || got != tt.want {
				t.Errorf("claimDecision = %v, %+v; want %v, %+v", claimed, got, tt.claimed, tt.want)
			}
		})
	}
}
