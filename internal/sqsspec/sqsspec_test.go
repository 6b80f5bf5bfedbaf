package sqsspec

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
)

func TestSeconds(t *testing.T) {
	tests := []struct {
		in   time.Duration
		want int32
	}{
		{-time.Second, 0},
		{0, 0},
		{time.Nanosecond, 1},
		{time.Millisecond, 1},
		{time.Second, 1},
		{1500 * time.Millisecond, 2},
		{90 * time.Second, 90},
		{15 * time.Minute, 900},
		{MaxInFlight, 43200},
		{100 * time.Hour, 360000},
		{14 * 24 * time.Hour, 1209600},
		{1 << 62, math.MaxInt32},
	}
	for _, tt := range tests {
		if got := Seconds(tt.in); got != tt.want {
			t.Errorf("Seconds(%v) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

func TestEntryIndex(t *testing.T) {
	tests := []struct {
		id   string
		n    int
		want int
		ok   bool
	}{
		{"0", 3, 0, true},
		{"2", 3, 2, true},
		{"3", 3, 0, false},
		{"-1", 3, 0, false},
		{"01", 3, 0, false},
		{"x", 3, 0, false},
		{"", 3, 0, false},
	}
	for _, tt := range tests {
		got, ok := EntryIndex(aws.String(tt.id), tt.n)
		if got != tt.want || ok != tt.ok {
			t.Errorf("EntryIndex(%q, %d) = %d, %v; want %d, %v", tt.id, tt.n, got, ok, tt.want, tt.ok)
		}
	}
	if id := aws.ToString(EntryID(7)); id != "7" {
		t.Errorf("EntryID(7) = %q", id)
	}
}

func TestInBatches(t *testing.T) {
	down := errors.New("connection refused")
	var calls [][2]int
	errs := InBatches(25, func(from, to int) ([]types.BatchResultErrorEntry, error) {
		calls = append(calls, [2]int{from, to})
		switch from {
		case 0: // entries 3 and 9 fail on their own
			return []types.BatchResultErrorEntry{
				{Id: EntryID(3), Code: aws.String("ReceiptHandleIsInvalid"), Message: aws.String("stale"), SenderFault: true},
				{Id: EntryID(9), Code: aws.String("InternalError")},
			}, nil
		case 10: // the whole call fails
			return nil, down
		}
		return nil, nil
	})
	if want := [][2]int{{0, 10}, {10, 20}, {20, 25}}; len(calls) != 3 || calls[0] != want[0] || calls[1] != want[1] || calls[2] != want[2] {
		t.Fatalf("calls %v, want %v", calls, want)
	}
	for i, err := range errs {
		switch {
		case i == 3:
			var api smithy.APIError
			if !errors.As(err, &api) || api.ErrorCode() != "ReceiptHandleIsInvalid" || api.ErrorFault() != smithy.FaultClient {
				t.Errorf("entry 3: %v, want its own sender-fault error", err)
			}
		case i == 9:
			var e *EntryError
			if !errors.As(err, &e) || e.SenderFault || e.Error() != "InternalError" {
				t.Errorf("entry 9: %v, want its own server-fault error", err)
			}
		case i >= 10 && i < 20:
			if !errors.Is(err, down) {
				t.Errorf("entry %d: %v, want the failed call's error", i, err)
			}
		default:
			if err != nil {
				t.Errorf("entry %d: %v, want success", i, err)
			}
		}
	}
	// An answer for an entry that was not sent fails the batch it came with.
	errs = InBatches(2, func(int, int) ([]types.BatchResultErrorEntry, error) {
		return []types.BatchResultErrorEntry{{Id: aws.String("m0")}}, nil
	})
	if errs[0] == nil || errs[1] == nil {
		t.Errorf("an unknown entry id was accepted: %v", errs)
	}
}

// A failed batch entry is the SDK's type of the single call's error, whichever of its two
// names SQS gave it, and keeps the code it came with.
func TestEntryErrorUnwrapsToTheSDKsType(t *testing.T) {
	tests := []struct {
		code string
		is   func(error) bool
	}{
		{"ReceiptHandleIsInvalid", isType[*types.ReceiptHandleIsInvalid]},
		{"MessageNotInflight", isType[*types.MessageNotInflight]},
		{"AWS.SimpleQueueService.MessageNotInflight", isType[*types.MessageNotInflight]},
		{"QueueDoesNotExist", isType[*types.QueueDoesNotExist]},
		{"AWS.SimpleQueueService.NonExistentQueue", isType[*types.QueueDoesNotExist]},
		{"InvalidMessageContents", isType[*types.InvalidMessageContents]},
		{"InvalidParameterValue", func(err error) bool { return errors.Unwrap(err) == nil }},
		{"InternalError", func(err error) bool { return errors.Unwrap(err) == nil }},
	}
	for _, tt := range tests {
		t.Run(tt.code, func(t *testing.T) {
			var err error = &EntryError{Code: tt.code, Message: "m", SenderFault: true}
			if !tt.is(err) {
				t.Errorf("EntryError %s unwraps to %T", tt.code, errors.Unwrap(err))
			}
			var api smithy.APIError
			if errors.As(err, &api) && api.ErrorCode() != tt.code {
				t.Errorf("ErrorCode() = %q, want %q", api.ErrorCode(), tt.code)
			}
		})
	}
}

// isType reports whether err holds a T.
func isType[T error](err error) bool {
	_, ok := errors.AsType[T](err)
	return ok
}
