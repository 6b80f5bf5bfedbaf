// Package faultproxy is a fault-injecting HTTP proxy for tests. It sits on 127.0.0.1
// between a real SQS client (the AWS SDK for Go v2, as watchbot uses it) and the fauxqs
// emulator, and makes chosen SQS calls fail the ways production does: 500s, throttling,
// latency, a connection dropped before the request is forwarded, an answer lost after the
// request took effect, and an endpoint that stalls and then recovers.
//
// Operations are recognised from the SQS JSON protocol's X-Amz-Target header
// ("AmazonSQS.DeleteMessage"). Injected errors are shaped as SQS shapes them (the "__type"
// body field and the x-amzn-query-error header), so the SDK's retryer classifies them as it
// would real ones: InternalFailure as a retryable server error, ThrottlingException and
// RequestThrottled as throttles.
//
// # Use in a scenario
//
// A scenario starts the emulator, puts a proxy in front of it and points watchbot (or any
// SDK client) at the proxy instead:
//
//	emu := testenv.SQS(t)
//	p, err := faultproxy.New(emu.Endpoint, faultproxy.Config{Seed: seed, Rules: []faultproxy.Rule{
//		{Operations: []string{"*"}, Fault: faultproxy.ServerError, Rate: 0.04},
//		{Operations: []string{"*"}, Fault: faultproxy.Throttle, Rate: 0.03},
//		{Operations: []string{"DeleteMessage", "DeleteMessageBatch"}, Fault: faultproxy.DropAfter, Rate: 0.03},
//		// the endpoint stalls for 30 s, 20 s into the run
//		{Operations: []string{"*"}, Fault: faultproxy.Stall, Rate: 1, From: 20 * time.Second, Until: 50 * time.Second},
//	}})
//	url, err := p.Start()
//	defer p.Close()
//	// run watchbot with AWS_ENDPOINT_URL_SQS=url (or --endpoint-url url)
//
// In a Go test, Serve does the same and closes the proxy when the test ends.
//
// The SDK retries 500s, throttles and dropped connections (three attempts by default), so
// a caller sees a fault only when every attempt of a call is faulted; a DropAfter that the
// SDK retries repeats a request that already took effect (a SendMessage sent twice).
//
// At the end the scenario reads Stats (requests, forwarded and faults per operation, for
// its table) and Injections (which requests were faulted, with their bodies: the receipt
// handles of DeleteMessage calls whose answers were lost tell which messages may rightly
// run twice). SetRules switches the rules during a run and Stall(d) stalls the endpoint
// now, for scenarios that react to what they observe rather than to a clock.
//
// # Determinism
//
// One random source, seeded from Config.Seed, decides every fault; decisions are taken one
// request at a time under a mutex, in the order requests arrive. The same seed and the same
// sequence of requests therefore give the same faults at the same request indices
// (Injection.Seq). With concurrent clients the arrival order depends on scheduling, so the
// sequence, and with it which call gets which fault, can differ from run to run; the rates
// hold all the same. Schedules in time (From, Until) depend on the clock; schedules in
// requests (After, For) do not.
//
// The proxy never forwards anywhere but its loopback upstream, and Close waits for every
// goroutine it started.
package faultproxy
