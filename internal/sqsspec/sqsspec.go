// Package sqsspec holds what Amazon SQS allows, in one place: its limits, its unit of time
// (whole seconds), and how a batch call answers for each of its entries. Every package that
// talks to SQS reads them here, so a limit is written once.
//
// The figures are those of the SQS Developer Guide ("Amazon SQS message quotas", "Amazon SQS
// visibility timeout", "Using dead-letter queues") and the SQS API Reference (ReceiveMessage, SendMessageBatch,
// DeleteMessageBatch, ChangeMessageVisibilityBatch, CreateQueue).
package sqsspec

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
)

const (
	// MaxInFlight is the longest a message may stay in flight after a receive, and so the
	// longest visibility timeout: ChangeMessageVisibility past it is refused.
	MaxInFlight = 12 * time.Hour
	// MaxReceive is the most messages one ReceiveMessage returns.
	MaxReceive = 10
	// MaxWait is the longest long poll of a ReceiveMessage.
	MaxWait = 20 * time.Second
	// MaxBatchEntries is the most entries one SendMessageBatch, DeleteMessageBatch or
	// ChangeMessageVisibilityBatch carries.
	MaxBatchEntries = 10
	// MaxBatchBytes is the most a SendMessageBatch carries in all, bodies and attributes.
	MaxBatchBytes = 1 << 20
	// MaxMessageSize is the largest message SQS takes, and a queue's MaximumMessageSize
	// when it names none (the CreateQueue reference's default).
	MaxMessageSize = 1 << 20
	// MaxMessageAttributes is the most message attributes one message carries.
	MaxMessageAttributes = 10
	// MaxDelay is the longest DelaySeconds of a message or a queue.
	MaxDelay = 15 * time.Minute
	// MaxReceiveCount is the largest maxReceiveCount of a redrive policy (1 to 1,000).
	MaxReceiveCount = 1000
)

// Seconds converts d to SQS's whole seconds, rounding up, so a delay, a lease or a retention
// period is never shorter than asked. Negative durations are 0; durations past int32's range,
// which no SQS setting takes, saturate.
func Seconds(d time.Duration) int32 {
	if d <= 0 {
		return 0
	}
	return int32(min((d+time.Second-1)/time.Second, math.MaxInt32))
}

// EntryID is the Id of the i-th entry of a batch call: entries are named by their place, so
// an answer maps back to them.
func EntryID(i int) *string { return aws.String(strconv.Itoa(i)) }

// EntryIndex returns the place of an entry that a batch call of n entries named by EntryID
// answers for, and false for an Id it did not send.
func EntryIndex(id *string, n int) (int, bool) {
	i, err := strconv.Atoi(aws.ToString(id))
	if err != nil || i < 0 || i >= n || strconv.Itoa(i) != aws.ToString(id) {
		return 0, false
	}
	return i, true
}

// EntryError is the failure of one entry of a batch call. It is a smithy.APIError, and it
// unwraps to the SDK's type of the single call's error (types.ReceiptHandleIsInvalid...)
// where the SDK has one, so errors.As finds the same type in either.
type EntryError struct {
	Code, Message string
	SenderFault   bool
}

func (e *EntryError) Error() string {
	if e.Message == "" {
		return e.Code
	}
	return e.Code + ": " + e.Message
}

// Unwrap returns the SDK's error for the entry's Code, or nil when the SDK has no type for it.
func (e *EntryError) Unwrap() error {
	if build, ok := entryErrors[e.Code]; ok {
		return build(aws.String(e.Message), aws.String(e.Code))
	}
	return nil
}

// entryErrors builds the SDK's types of the errors a batch entry can carry, by their codes.
// An entry names its error with a string, which the SDK turns into no type: this is the one
// place that reads those strings. SQS names some errors two ways, the shape's name of its JSON
// protocol and the code of its query protocol, and both are here. InvalidParameterValue, a
// common error of the API, has no type in the SDK; it stays a code.
var entryErrors = map[string]func(msg, code *string) error{
	"ReceiptHandleIsInvalid": func(m, c *string) error { return &types.ReceiptHandleIsInvalid{Message: m, ErrorCodeOverride: c} },
	"MessageNotInflight":     func(m, c *string) error { return &types.MessageNotInflight{Message: m, ErrorCodeOverride: c} },
	"AWS.SimpleQueueService.MessageNotInflight": func(m, c *string) error {
		return &types.MessageNotInflight{Message: m, ErrorCodeOverride: c}
	},
	"InvalidMessageContents": func(m, c *string) error { return &types.InvalidMessageContents{Message: m, ErrorCodeOverride: c} },
	"QueueDoesNotExist":      func(m, c *string) error { return &types.QueueDoesNotExist{Message: m, ErrorCodeOverride: c} },
	"AWS.SimpleQueueService.NonExistentQueue": func(m, c *string) error {
		return &types.QueueDoesNotExist{Message: m, ErrorCodeOverride: c}
	},
}

// ErrorCode returns the entry's error code.
func (e *EntryError) ErrorCode() string { return e.Code }

// ErrorMessage returns the entry's error message.
func (e *EntryError) ErrorMessage() string { return e.Message }

// ErrorFault says whose fault the failure was.
func (e *EntryError) ErrorFault() smithy.ErrorFault {
	if e.SenderFault {
		return smithy.FaultClient
	}
	return smithy.FaultServer
}

var _ smithy.APIError = (*EntryError)(nil)

// InBatches runs a batch call over n entries in batches of at most MaxBatchEntries and
// returns each entry's error, nil for the entries that succeeded. call sends entries
// [from, to), each named EntryID(i-from), and returns the call's Failed entries or its error.
// A failed call fails each of its entries with its error; a Failed entry fails its own with
// an *EntryError; an Id the batch did not send is an error of the answer, reported on every
// entry of that batch that SQS did not answer for.
func InBatches(n int, call func(from, to int) ([]types.BatchResultErrorEntry, error)) []error {
	errs := make([]error, n)
	for from := 0; from < n; from += MaxBatchEntries {
		to := min(from+MaxBatchEntries, n)
		failed, err := call(from, to)
		if err != nil {
			for i := from; i < to; i++ {
				errs[i] = err
			}
			continue
		}
		for _, f := range failed {
			i, ok := EntryIndex(f.Id, to-from)
			if !ok {
				err := fmt.Errorf("batch call: SQS answered for an entry it was not sent (%q)", aws.ToString(f.Id))
				for i := from; i < to; i++ {
					errs[i] = err
				}
				break
			}
			errs[from+i] = &EntryError{Code: aws.ToString(f.Code), Message: aws.ToString(f.Message), SenderFault: f.SenderFault}
		}
	}
	return errs
}
