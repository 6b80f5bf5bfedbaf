package awsenv

import (
	"math/rand/v2"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"

	"github.com/watchbot/watchbot/backoff"
)

// sqsAttempts is how many times an SQS call is tried before its error reaches watchbot.
const sqsAttempts = 5

// sqsRetryBackoff spaces those tries after an error: 25 to 50 ms, doubling, so the four
// retries of one call wait 375 to 750 ms in all (the base the SDK's 2026 retry behaviour
// uses for errors other than throttling). sqsThrottleBackoff spaces them after throttling:
// 250 to 500 ms, doubling, 3.75 to 7.5 s in all, still inside the acknowledger's 15 s.
var (
	sqsRetryBackoff    = backoff.Exponential{Base: 50 * time.Millisecond, Max: 2 * time.Second, Jitter: backoff.Equal}
	sqsThrottleBackoff = backoff.Exponential{Base: 500 * time.Millisecond, Max: 5 * time.Second, Jitter: backoff.Equal}
	throttles          = retry.IsErrorThrottles(retry.DefaultThrottles)
)

// SQSRetryer is the retryer of every SQS client: the SDK's standard one, with more and quicker
// attempts and without its client-side retry quota.
//
// The quota (500 tokens, 5 per retry, 10 per timeout, one back per call that succeeds at
// once; "Retries and timeouts" in the AWS SDK for Go v2 Developer Guide) is meant to stop a
// fleet of clients from piling retries onto a service in trouble. In a supervisor it turns a
// spell of transient faults into lost work: once a few hundred calls have failed, no call is
// retried at all, so every 500 or dropped connection that follows fails a delete (the message
// runs again), a lease renewal or a receive (its messages stay hidden for their visibility
// timeout). With 30% of calls failing, the default retryer's quota is gone within a few
// hundred calls. watchbot paces itself instead: receives back off on their own (500 ms to
// 30 s), and acknowledgements give up after 15 s.
func SQSRetryer() aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxAttempts = sqsAttempts
		o.RateLimiter = ratelimit.None
		o.Backoff = retry.BackoffDelayerFunc(func(attempt int, err error) (time.Duration, error) {
			if throttles.IsErrorThrottle(err) == aws.TrueTernary {
				return sqsThrottleBackoff.Delay(attempt, rand.Float64), nil
			}
			return sqsRetryBackoff.Delay(attempt, rand.Float64), nil
		})
	})
}
