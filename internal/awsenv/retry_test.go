package awsenv

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/smithy-go"
)

// The SQS retryer retries five times, quickly after errors and more slowly after throttling,
// and never runs out of retries however many calls failed before (no client-side quota).
func TestSQSRetryer(t *testing.T) {
	r := SQSRetryer()
	if n := r.MaxAttempts(); n != sqsAttempts {
		t.Errorf("MaxAttempts() = %d, want %d", n, sqsAttempts)
	}
	serverErr := &smithy.GenericAPIError{Code: "InternalError"}
	throttled := &smithy.GenericAPIError{Code: "ThrottlingException"}
	for _, tc := range []struct {
		name     string
		err      error
		attempt  int
		min, max time.Duration
	}{
		{"error, first retry", serverErr, 1, 25 * time.Millisecond, 50 * time.Millisecond},
		{"error, fourth retry", serverErr, 4, 200 * time.Millisecond, 400 * time.Millisecond},
		{"throttled, first retry", throttled, 1, 250 * time.Millisecond, 500 * time.Millisecond},
		{"throttled, fourth retry", throttled, 4, 2 * time.Second, 4 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 50 {
				d, err := r.RetryDelay(tc.attempt, tc.err)
				if err != nil || d < tc.min || d > tc.max {
					t.Fatalf("RetryDelay(%d) = %v, %v; want within [%v, %v]", tc.attempt, d, err, tc.min, tc.max)
				}
			}
		})
	}
	// The standard retryer's quota is 500 tokens at 5 a retry: 1,000 retries in a row would
	// exhaust it a few times over.
	for i := range 1000 {
		release, err := r.GetRetryToken(context.Background(), serverErr)
		if err != nil {
			t.Fatalf("retry %d refused: %v", i, err)
		}
		_ = release(errors.New("failed again"))
	}
}
