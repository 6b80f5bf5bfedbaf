package dlqattr

import (
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

func attrs(n int) map[string]types.MessageAttributeValue {
	m := map[string]types.MessageAttributeValue{}
	for i := range n {
		m["a"+strconv.Itoa(i)] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String("v")}
	}
	return m
}

func TestWithCauseRoundTrip(t *testing.T) {
	cause := Cause{Reason: "worker exited 3", SourceQueue: "https://sqs.us-east-1.amazonaws.com/1/q", Attempts: 4,
		Lineage: Lineage{OriginalMessageID: "orig-1"}}
	replayed := cause
	replayed.ReplayedFrom = "dlq-7"
	tests := []struct {
		name      string
		in        map[string]types.MessageAttributeValue
		cause     *Cause
		wantOK    bool
		wantCount int
		packed    bool
	}{
		{"no attributes: four separate", attrs(0), nil, true, 4, false},
		{"six: four separate", attrs(6), nil, true, 10, false},
		{"seven: packed into one", attrs(7), nil, true, 8, true},
		{"nine: packed into one", attrs(9), nil, true, 10, true},
		{"ten: no room", attrs(10), nil, false, 10, false},
		{"a replayed copy: five separate", attrs(5), &replayed, true, 10, false},
		{"a replayed copy with six: packed", attrs(6), &replayed, true, 7, true},
		{"old watchbot attributes are replaced", func() map[string]types.MessageAttributeValue {
			m := attrs(2)
			m[Reason] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String("older reason")}
			m[Packed] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(`{"reason":"older"}`)}
			return m
		}(), nil, true, 6, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cause := cause
			if tt.cause != nil {
				cause = *tt.cause
			}
			out, ok := With(tt.in, cause)
			if ok != tt.wantOK || len(out) != tt.wantCount {
				t.Fatalf("ok %v, %d attributes; want %v, %d", ok, len(out), tt.wantOK, tt.wantCount)
			}
			if _, isPacked := out[Packed]; isPacked != tt.packed {
				t.Fatalf("packed = %v, want %v", isPacked, tt.packed)
			}
			got, found := Read(out)
			if found != tt.wantOK || (ok && got != cause) {
				t.Fatalf("Read = %+v, %v; want %+v", got, found, cause)
			}
		})
	}
}

func TestLineageOf(t *testing.T) {
	str := func(s string) types.MessageAttributeValue {
		return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(s)}
	}
	tests := []struct {
		name  string
		attrs map[string]types.MessageAttributeValue
		want  Lineage
	}{
		{"none", attrs(2), Lineage{}},
		{"separate", map[string]types.MessageAttributeValue{OriginalMessageID: str("o"), ReplayedFrom: str("d"), ReplayedAt: str("t")}, Lineage{"o", "d", "t"}},
		{"packed by a dead-letter", map[string]types.MessageAttributeValue{Packed: str(`{"reason":"r","originalMessageId":"o","replayedFrom":"d"}`)}, Lineage{OriginalMessageID: "o", ReplayedFrom: "d"}},
		{"packed by a replay", map[string]types.MessageAttributeValue{ReplayPacked: str(`{"originalMessageId":"o","replayedFrom":"d","replayedAt":"t"}`)}, Lineage{"o", "d", "t"}},
		{"packed but not JSON", map[string]types.MessageAttributeValue{ReplayPacked: str(`{`)}, Lineage{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ReadLineage(tt.attrs); got != tt.want {
				t.Errorf("ReadLineage = %+v, want %+v", got, tt.want)
			}
		})
	}
	if got := OriginalID("self", attrs(1)); got != "self" {
		t.Errorf("OriginalID without lineage = %q, want the id itself", got)
	}
}
