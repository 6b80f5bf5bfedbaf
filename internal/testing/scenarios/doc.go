// Package scenarios proves watchbot's promise under the faults operators fear: no message
// is lost, none runs twice at the same time, and a message that succeeded runs again only
// when its delete was lost (and the log says so).
//
// It holds only tests (and testworker, the worker they run). Each scenario runs the
// supervisor (in-process through supervisor.Run, or the real binary) against the fauxqs
// emulator, often through internal/testing/faultproxy, with several seeds, and checks the
// invariants at the end from three sources: the queue and its dead-letter queue as they
// are left, the trace every worker run appends to (start and end records with monotonic
// timestamps, and a per-message flock that reveals concurrent runs), and the supervisor's
// log.
//
//  1. 10% of SQS calls fail: 500s, throttles, lost answers.
//  2. The endpoint stalls mid-run, then recovers.
//  3. The supervisor is SIGKILLed mid-run and restarted.
//  4. SIGTERM with 8 jobs running, half finishing inside the shutdown window.
//  5. Workers that hang, kill themselves, fork children that outlive them, close stdout,
//     flood stdout with 100 MiB.
//  6. Bodies of 1 MiB, shell metacharacters and control characters, malformed SNS
//     envelopes, attributes with odd names.
//  7. The soak: a steady rate with a mix of outcomes and 1% faults, RSS, goroutines and
//     file descriptors sampled each minute.
//  8. With --dedupe-table, attempts are runs: the supervisor SIGKILLed 40 times dead-letters
//     no message that never failed, and a message failing every run is dead-lettered after
//     exactly --max-attempts runs though it is received more often.
//
// The fast forms run in `go test`. The long forms (scenario 1 with 1,000 messages, the
// soak) run when WATCHBOT_SOAK is set to the soak's duration, e.g. WATCHBOT_SOAK=20m, as
// scripts/soak does. Under CI=true a scenario whose emulator or proxy cannot start fails
// rather than skips.
package scenarios
