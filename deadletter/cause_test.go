package deadletter

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
	cause := Cause{Reason: "worker exited 3", SourceQueue: "https://sqs.us-east-1.amazonaws.com/1/q", Attempts: 4}
	tests := []struct {
		name      string
		in        map[string]types.MessageAttributeValue
		wantOK    bool
		wantCount int
		packed    bool
	}{
		{"no attributes: three separate", attrs(0), true, 3, false},
		{"seven: three separate", attrs(7), true, 10, false},
		{"eight: packed into one", attrs(8), true, 9, true},
		{"nine: packed into one", attrs(9), true, 10, true},
		{"ten: no room", attrs(10), false, 10, false},
		{"old watchbot attributes are replaced", func() map[string]types.MessageAttributeValue {
			m := attrs(2)
			m[AttrReason] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String("older reason")}
			m[AttrPacked] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(`{"reason":"older"}`)}
			return m
		}(), true, 5, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, ok := WithCause(tt.in, cause)
			if ok != tt.wantOK || len(out) != tt.wantCount {
				t.Fatalf("ok %v, %d attributes; want %v, %d", ok, len(out), tt.wantOK, tt.wantCount)
			}
			if _, isPacked := out[AttrPacked]; isPacked != tt.packed {
				t.Fatalf("packed = %v, want %v", isPacked, tt.packed)
			}
			got, found := CauseOf(out)
			if found != tt.wantOK || (ok && got != cause) {
				t.Fatalf("CauseOf = %+v, %v; want %+v", got, found, cause)
			}
		})
	}
}
