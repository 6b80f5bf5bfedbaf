package supervisor

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"
)

// A message given up for lost is released only while watchbot knows it holds the lease. Once
// the lease may have ended, its receipt is left alone: the SQS API reference does not say that
// ChangeMessageVisibility refuses a receipt another consumer's receive replaced, so a release
// could make visible a message that consumer runs. The fake accepts the receipt in both cases,
// as SQS may.
func TestAbandonReleasesOnlyALeaseItHolds(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		lease     time.Duration // from now; negative: ended
		wantCalls []int32
	}{
		{"lease held: released", time.Minute, []int32{0}},
		{"lease may have ended: left alone", -time.Second, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			q := newFakeQueue()
			q.add("m1", "body")
			m, ok := q.receive(30 * time.Second)
			if !ok {
				t.Fatal("no message")
			}
			acks := newAcker(q, "url", 0, 5*time.Second, nil, nil)
			go acks.run(context.Background())
			defer acks.close()
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			r := &runner{cfg: Config{BatchSize: 1}, acks: acks, log: log}
			j := &job{log: log}
			dl := delivery{receipt: *m.ReceiptHandle, receivedAt: time.Now(), leaseUntil: time.Now().Add(tt.lease)}
			d := r.act(context.Background(), j, dl, outcome{Action: actAbandon, Reason: "lease lost"}, log)
			if !d.returned {
				t.Errorf("disposition %+v, want the message returned", d)
			}
			q.mu.Lock()
			got := q.msgs["m1"].lastVisCalls
			q.mu.Unlock()
			if !slices.Equal(got, tt.wantCalls) {
				t.Errorf("visibility changes %v, want %v", got, tt.wantCalls)
			}
		})
	}
}
