package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/internal/sqsspec"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// Receives take the quick lease only on a standard queue, before the quick leases end, and
// when it is shorter than the receive lease.
func TestQuickLease(t *testing.T) {
	t.Parallel()
	now := time.Now()
	tests := []struct {
		name    string
		fifo    bool
		receive time.Duration // --receive-visibility
		until   time.Time
		want    time.Duration
	}{
		{"after a failed receive", false, 0, now.Add(time.Second), quickLease},
		{"no failed receive lately", false, 0, now, 0},
		{"never a failed receive", false, 0, time.Time{}, 0},
		{"FIFO: attempt ids bring lost answers back", true, 0, now.Add(time.Second), 0},
		{"a receive lease no longer than the quick one", false, quickLease, now.Add(time.Second), 0},
		{"an extension past SQS's longest visibility timeout", false, sqsspec.MaxInFlight, now.Add(time.Second), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.VisibilityTimeout = max(time.Minute, tt.receive)
			cfg.ReceiveVisibility = tt.receive
			s := &Supervisor{cfg: cfg, fifo: tt.fifo}
			if got := s.quickLease(tt.until, now); got != tt.want {
				t.Errorf("quickLease = %v, want %v", got, tt.want)
			}
		})
	}
}

// refusingBatches is a queue whose ChangeMessageVisibilityBatch call itself fails.
type refusingBatches struct{ *fakeQueue }

func (refusingBatches) ChangeMessageVisibilityBatch(context.Context, *sqs.ChangeMessageVisibilityBatchInput, ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	return nil, errors.New("connection reset")
}

// extendQuick hands on only the messages whose quick lease it extended, to the receive lease
// plus the time the extension may take; the rest keep their quick lease, untouched, and are
// logged.
func TestExtendQuick(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		api  func(q *fakeQueue) sqsAPI
		kept int
	}{
		{"every entry extended", func(q *fakeQueue) sqsAPI { return q }, 3},
		{"the first entry refused", func(q *fakeQueue) sqsAPI {
			q.failNext["ChangeMessageVisibility"] = errors.New("throttled")
			return q
		}, 2},
		{"the call fails", func(q *fakeQueue) sqsAPI { return refusingBatches{q} }, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := newFakeQueue()
			for _, id := range []string{"m1", "m2", "m3"} {
				q.add(id, "body")
			}
			out, err := q.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{MaxNumberOfMessages: 10, VisibilityTimeout: sqsspec.Seconds(quickLease)})
			if err != nil {
				t.Fatal(err)
			}
			logs := &testenv.Buffer{}
			cfg := DefaultConfig()
			cfg.VisibilityTimeout = time.Minute
			debug := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			metrics := &countingRecorder{}
			s := &Supervisor{cfg: cfg, api: tt.api(q), log: debug, metrics: metrics}
			kept := map[string]bool{}
			for _, m := range s.extendQuick(t.Context(), out.Messages) {
				kept[aws.ToString(m.MessageId)] = true
			}
			if len(kept) != tt.kept {
				t.Fatalf("kept %v, want %d of 3", kept, tt.kept)
			}
			if tt.kept == 2 && kept[aws.ToString(out.Messages[0].MessageId)] {
				t.Errorf("kept the message whose extension was refused")
			}
			want := sqsspec.Seconds(cfg.receiveVisibility() + quickExtendTimeout)
			for _, m := range out.Messages {
				id := aws.ToString(m.MessageId)
				calls := q.msgs[id].lastVisCalls
				if extended := len(calls) == 1 && calls[0] == want; extended != kept[id] {
					t.Errorf("%s: visibility changes %v (want [%d] exactly when kept), kept %v", id, calls, want, kept[id])
				}
			}
			if tt.kept < 3 && !testenv.Logged(logs.String(), "level", "WARN", "lease", "*") {
				t.Errorf("messages not extended and nothing logged: %s", logs.String())
			}
			// Timed, and logged at debug level, whatever became of the call.
			if n := metrics.get(alarms.LeaseExtensionDuration); n != 1 {
				t.Errorf("%v extensions timed, want 1", n)
			}
			if !testenv.Logged(logs.String(), "level", "DEBUG", "messages", "3", "extended", fmt.Sprint(tt.kept), "took_ms", "*") {
				t.Errorf("no debug record of the extension of 3 messages, %d extended, in: %s", tt.kept, logs.String())
			}
		})
	}
}
