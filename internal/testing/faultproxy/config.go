package faultproxy

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Fault is a kind of failure the proxy injects.
type Fault string

// The faults a rule can inject.
const (
	// ServerError answers 500 InternalFailure without forwarding. The SDK retries it.
	ServerError Fault = "ServerError"
	// Throttle answers 400 with a throttling error (Rule.ThrottleCode) without forwarding,
	// shaped as SQS's JSON protocol shapes it, so the SDK classifies it as a throttle.
	Throttle Fault = "Throttle"
	// Latency waits Rule.Latency, then forwards. The wait ends early if the client goes away.
	Latency Fault = "Latency"
	// DropBefore reads the request and closes the connection without forwarding or answering:
	// the request never took effect.
	DropBefore Fault = "DropBefore"
	// DropAfter forwards the request, waits for the upstream answer, then closes the
	// connection without answering: the request took effect but its answer was lost.
	DropAfter Fault = "DropAfter"
	// Stall holds a matching request until the rule's time window closes (Rule.Until), then
	// forwards it; answers to matching requests that come back from upstream while the
	// window is open are held until it closes too. It models an endpoint or network that
	// stops responding for a while and then recovers.
	Stall Fault = "Stall"
)

var faults = []Fault{ServerError, Throttle, Latency, DropBefore, DropAfter, Stall}

// Throttling error codes Throttle can answer with. Both are in the SDK's
// retry.DefaultThrottleErrorCodes.
const (
	ThrottlingException = "ThrottlingException"
	RequestThrottled    = "RequestThrottled"
)

// AnyOperation in Rule.Operations matches every request, whatever its operation.
const AnyOperation = "*"

// NoTarget is the operation name under which Stats counts requests that carry no
// X-Amz-Target header (they are not SQS API calls).
const NoTarget = "(none)"

// Operations lists the SQS operations a rule may name.
var Operations = []string{
	"ReceiveMessage",
	"DeleteMessage",
	"DeleteMessageBatch",
	"ChangeMessageVisibility",
	"ChangeMessageVisibilityBatch",
	"SendMessage",
	"SendMessageBatch",
	"GetQueueAttributes",
	"GetQueueUrl",
	S3GetObject,
	S3PutObject,
	S3DeleteObject,
	S3HeadObject,
	S3Other,
}

// MaxLatency bounds Rule.Latency: a longer delay in a test is a mistake, not a scenario.
const MaxLatency = 10 * time.Minute

// Rule injects one kind of fault into matching requests.
//
// A request matches a rule when its operation is in Operations. A matching request is
// eligible when the rule's schedule is open: the time since the rules took effect is in
// [From, Until) and, counting only matching requests inside that time window from 0, its
// index n satisfies After <= n < After+For. An eligible request is faulted with
// probability Rate. Rules are tried in order and the first that faults a request wins;
// every rule whose window is open still counts the request towards its After and For.
type Rule struct {
	// Operations the rule applies to: names from Operations, or AnyOperation.
	Operations []string
	// Fault to inject.
	Fault Fault
	// Rate is the probability, 0..1, that an eligible request is faulted.
	Rate float64
	// Latency is the delay of a Latency fault, (0, MaxLatency]; other faults take none.
	Latency time.Duration
	// ThrottleCode is the error code of a Throttle fault: ThrottlingException (the
	// default when empty) or RequestThrottled. Other faults take none.
	ThrottleCode string
	// From and Until bound the time window, counted from when the rules took effect
	// (Start for Config.Rules, the call for SetRules). Until 0 leaves it open-ended.
	// A Stall rule needs an Until: the stall lasts until then.
	From, Until time.Duration
	// After lets the first After matching requests in the time window through untouched.
	After int
	// For limits the rule to the For matching requests that follow; 0 means no limit.
	For int
}

// Config configures a Proxy.
type Config struct {
	// Rules to apply, in order.
	Rules []Rule
	// Seed of the one random source that decides which eligible requests are faulted: the
	// same seed and the same sequence of requests give the same faults. Concurrent clients
	// make the sequence depend on scheduling (see the package documentation).
	Seed int64
}

// Validate checks every rule and names the first field that is wrong.
func (c Config) Validate() error {
	return validateRules(c.Rules)
}

func validateRules(rules []Rule) error {
	for i, r := range rules {
		if err := r.validate(); err != nil {
			return fmt.Errorf("rules[%d].%w", i, err)
		}
	}
	return nil
}

func (r Rule) validate() error {
	if len(r.Operations) == 0 {
		return fmt.Errorf("Operations is empty: name operations (%s) or %q", strings.Join(Operations, ", "), AnyOperation)
	}
	for _, op := range r.Operations {
		if op != AnyOperation && !slices.Contains(Operations, op) {
			return fmt.Errorf("Operations: unknown operation %q (known: %s, or %q)", op, strings.Join(Operations, ", "), AnyOperation)
		}
	}
	if !slices.Contains(faults, r.Fault) {
		names := make([]string, len(faults))
		for i, f := range faults {
			names[i] = string(f)
		}
		return fmt.Errorf("Fault (%q) must be one of %s", r.Fault, strings.Join(names, ", "))
	}
	if math.IsNaN(r.Rate) || r.Rate < 0 || r.Rate > 1 {
		return fmt.Errorf("Rate (%v) must be between 0 and 1", r.Rate)
	}
	switch {
	case r.Latency < 0:
		return fmt.Errorf("Latency (%v) must not be negative", r.Latency)
	case r.Fault == Latency && r.Latency == 0:
		return fmt.Errorf("Latency must be set for a %s fault", Latency)
	case r.Fault == Latency && r.Latency > MaxLatency:
		return fmt.Errorf("Latency (%v) must be at most %v", r.Latency, MaxLatency)
	case r.Fault != Latency && r.Latency != 0:
		return fmt.Errorf("Latency (%v) applies only to %s faults, not %s", r.Latency, Latency, r.Fault)
	}
	switch {
	case r.Fault == Throttle && r.ThrottleCode != "" && r.ThrottleCode != ThrottlingException && r.ThrottleCode != RequestThrottled:
		return fmt.Errorf("ThrottleCode (%q) must be %s or %s", r.ThrottleCode, ThrottlingException, RequestThrottled)
	case r.Fault != Throttle && r.ThrottleCode != "":
		return fmt.Errorf("ThrottleCode (%q) applies only to %s faults, not %s", r.ThrottleCode, Throttle, r.Fault)
	}
	switch {
	case r.From < 0:
		return fmt.Errorf("From (%v) must not be negative", r.From)
	case r.Until < 0:
		return fmt.Errorf("Until (%v) must not be negative", r.Until)
	case r.Until != 0 && r.Until <= r.From:
		return fmt.Errorf("Until (%v) must be later than From (%v)", r.Until, r.From)
	case r.Fault == Stall && r.Until == 0:
		return fmt.Errorf("Until must be set for a %s fault: the stall lasts until then", Stall)
	case r.After < 0:
		return fmt.Errorf("After (%d) must not be negative", r.After)
	case r.For < 0:
		return fmt.Errorf("For (%d) must not be negative", r.For)
	}
	return nil
}

// matches reports whether the rule names op.
func (r Rule) matches(op string) bool {
	for _, o := range r.Operations {
		if o == AnyOperation || o == op {
			return true
		}
	}
	return false
}

// inWindow reports whether elapsed (time since the rules took effect) is in [From, Until).
func (r Rule) inWindow(elapsed time.Duration) bool {
	return elapsed >= r.From && (r.Until == 0 || elapsed < r.Until)
}
