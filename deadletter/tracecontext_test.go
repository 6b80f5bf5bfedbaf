package deadletter

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/internal/dlqattr"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// TestReplayKeepsTheTraceContext: a replayed message carries the traceparent and tracestate
// it was first sent with, so its next run joins the original trace (docs/tracing.md) —
// whether its cause and lineage fit one attribute each, are packed, or have no room at all.
func TestReplayKeepsTheTraceContext(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	c := emu.Client()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	cases := []struct {
		name  string
		extra int // user attributes beside the two of the context
	}{
		{"cause one by one", 0},
		{"cause packed", 6},
		{"no room for the cause", 8},
	}
	parents := map[string]string{}
	var letters []testenv.Letter
	for i, tc := range cases {
		parent := fmt.Sprintf("00-4bf92f3577b34da6a3ce929d0e0e47%02d-00f067aa0ba902b7-01", i)
		own := map[string]types.MessageAttributeValue{"traceparent": str(parent), "tracestate": str("vendor=" + strconv.Itoa(i))}
		for j := range tc.extra {
			own["a"+strconv.Itoa(j)] = str("x")
		}
		attrs, _ := dlqattr.With(own, dlqattr.Cause{Reason: "exit 3", SourceQueue: q.URL, Attempts: 3})
		letters = append(letters, testenv.Letter{Body: tc.name, Attributes: attrs})
		parents[tc.name] = parent
	}
	testenv.DeadLetter(t, c, q, letters...)
	queues, err := Locate(t.Context(), c, Location{QueueURL: q.URL})
	if err != nil {
		t.Fatal(err)
	}
	if sum, err := Replay(t.Context(), c, queues, testConfig()); err != nil || sum.Replayed != len(cases) {
		t.Fatalf("replay = %+v, %v; want %d replayed", sum, err, len(cases))
	}
	got := drain(t, c, q.URL)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, ok := got[tc.name]
			if !ok {
				t.Fatal("not replayed")
			}
			if v := aws.ToString(m.MessageAttributes["traceparent"].StringValue); v != parents[tc.name] {
				t.Errorf("traceparent %q, want %q", v, parents[tc.name])
			}
			if v := aws.ToString(m.MessageAttributes["tracestate"].StringValue); v != "vendor="+strconv.Itoa(i) {
				t.Errorf("tracestate %q, want vendor=%d", v, i)
			}
		})
	}
}
