package faultproxy

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	smithy "github.com/aws/smithy-go"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// client is a real SQS client sending to endpoint, making at most attempts attempts per
// call with short backoffs.
func client(endpoint string, attempts int) *sqs.Client {
	return testenv.ClientFor(endpoint, func(o *sqs.Options) {
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.MaxAttempts = attempts
			so.MaxBackoff = 20 * time.Millisecond
			so.RateLimiter = ratelimit.None
		})
	})
}

func send(ctx context.Context, c *sqs.Client, q testenv.Queue, body string) error {
	_, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q.URL), MessageBody: aws.String(body)})
	return err
}

// drain empties q and returns the bodies it held.
func drain(t *testing.T, emu *testenv.Emulator, q testenv.Queue) []string {
	t.Helper()
	var bodies []string
	for _, m := range testenv.Drain(t, emu.Client(), q.URL, 10*time.Second) {
		bodies = append(bodies, aws.ToString(m.Body))
	}
	return bodies
}

func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

func TestServerErrorSurfacesAfterRetries(t *testing.T) {
	emu := testenv.SQS(t)
	q := emu.NewQueue(t, testenv.QueueOptions{})
	p, url := Serve(t, emu.Endpoint, Config{Rules: []Rule{{Operations: []string{"SendMessage"}, Fault: ServerError, Rate: 1}}})

	err := send(t.Context(), client(url, 3), q, "doomed")
	if err == nil {
		t.Fatal("SendMessage succeeded through a proxy that fails every SendMessage")
	}
	if code := apiCode(err); code != "InternalFailure" {
		t.Errorf("error code = %q, want InternalFailure (err: %v)", code, err)
	}
	got := p.Stats().Operations["SendMessage"]
	if got.Requests != 3 || got.Faults[ServerError] != 3 || got.Forwarded != 0 {
		t.Errorf("SendMessage stats = %+v, want 3 requests (the SDK's attempts), 3 ServerErrors, 0 forwarded", got)
	}
	if left := drain(t, emu, q); len(left) != 0 {
		t.Errorf("queue holds %q, want nothing: no attempt was forwarded", left)
	}
}

func TestThrottleIsClassifiedByTheSDK(t *testing.T) {
	emu := testenv.SQS(t)
	q := emu.NewQueue(t, testenv.QueueOptions{})
	for _, code := range []string{"", ThrottlingException, RequestThrottled} {
		t.Run("code="+code, func(t *testing.T) {
			p, url := Serve(t, emu.Endpoint, Config{Rules: []Rule{{Operations: []string{"ReceiveMessage"}, Fault: Throttle, Rate: 1, ThrottleCode: code}}})
			_, err := client(url, 2).ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.URL)})
			if err == nil {
				t.Fatal("ReceiveMessage succeeded through a proxy that throttles it")
			}
			if got := retry.IsErrorThrottles(retry.DefaultThrottles).IsErrorThrottle(err); got != aws.TrueTernary {
				t.Errorf("the SDK does not see %v as a throttle (%v)", err, got)
			}
			want := code
			if want == "" {
				want = ThrottlingException
			}
			if got := apiCode(err); got != want {
				t.Errorf("error code = %q, want %q", got, want)
			}
			var modeled *types.RequestThrottled
			if isModeled := errors.As(err, &modeled); isModeled != (want == RequestThrottled) {
				t.Errorf("errors.As(*types.RequestThrottled) = %v for code %s", isModeled, want)
			}
			if s := p.Stats().Operations["ReceiveMessage"]; s.Requests != 2 || s.Faults[Throttle] != 2 {
				t.Errorf("stats = %+v, want 2 requests, both throttled (the SDK retries throttles)", s)
			}
		})
	}
}

func TestDrops(t *testing.T) {
	emu := testenv.SQS(t)
	tests := []struct {
		name     string
		rule     Rule
		attempts int
		wantErr  bool
		wantSent int // copies of the message in the queue afterwards
	}{
		{"DropBefore: nothing arrives", Rule{Fault: DropBefore, Rate: 1}, 1, true, 0},
		{"DropAfter: the answer is lost but the message arrived", Rule{Fault: DropAfter, Rate: 1}, 1, true, 1},
		{"DropAfter once, with SDK retries: a duplicate send", Rule{Fault: DropAfter, Rate: 1, For: 1}, 3, false, 2},
		{"DropBefore once, with SDK retries: sent once", Rule{Fault: DropBefore, Rate: 1, For: 1}, 3, false, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := emu.NewQueue(t, testenv.QueueOptions{})
			tt.rule.Operations = []string{"SendMessage"}
			p, url := Serve(t, emu.Endpoint, Config{Rules: []Rule{tt.rule}})
			err := send(t.Context(), client(url, tt.attempts), q, "payload")
			if (err != nil) != tt.wantErr {
				t.Fatalf("SendMessage error = %v, want an error: %v", err, tt.wantErr)
			}
			if got := drain(t, emu, q); len(got) != tt.wantSent {
				t.Errorf("queue holds %d copies (%q), want %d", len(got), got, tt.wantSent)
			}
			inj := p.Injections()
			if len(inj) == 0 || inj[0].Fault != tt.rule.Fault || inj[0].Operation != "SendMessage" || !bytes.Contains(inj[0].Request, []byte("payload")) {
				t.Errorf("injections = %+v, want the first to be a %s of SendMessage carrying the body", inj, tt.rule.Fault)
			}
		})
	}
}

func TestLatency(t *testing.T) {
	emu := testenv.SQS(t)
	q := emu.NewQueue(t, testenv.QueueOptions{})
	attrs := &sqs.GetQueueAttributesInput{QueueUrl: aws.String(q.URL), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}}

	t.Run("delays then forwards", func(t *testing.T) {
		p, url := Serve(t, emu.Endpoint, Config{Rules: []Rule{{Operations: []string{"GetQueueAttributes"}, Fault: Latency, Rate: 1, Latency: 300 * time.Millisecond}}})
		begin := time.Now()
		if _, err := client(url, 1).GetQueueAttributes(t.Context(), attrs); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(begin); took < 300*time.Millisecond {
			t.Errorf("call took %v, want at least the 300ms latency", took)
		}
		if s := p.Stats().Operations["GetQueueAttributes"]; s.Forwarded != 1 || s.Faults[Latency] != 1 {
			t.Errorf("stats = %+v, want 1 forwarded after 1 Latency", s)
		}
	})

	t.Run("honours the client's cancellation", func(t *testing.T) {
		p, url := Serve(t, emu.Endpoint, Config{Rules: []Rule{{Operations: []string{"GetQueueAttributes"}, Fault: Latency, Rate: 1, Latency: time.Minute}}})
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		begin := time.Now()
		_, err := client(url, 1).GetQueueAttributes(ctx, attrs)
		if err == nil {
			t.Fatal("call succeeded despite a minute of latency and a 200ms deadline")
		}
		if took := time.Since(begin); took > 5*time.Second {
			t.Errorf("cancelled call took %v", took)
		}
		waitIdle(t, p, 5*time.Second)
		if s := p.Stats().Operations["GetQueueAttributes"]; s.Forwarded != 0 {
			t.Errorf("stats = %+v: a request whose client gave up was forwarded", s)
		}
	})
}

// waitIdle waits until the proxy handles no request: the handlers noticed the client left.
func waitIdle(t *testing.T, p *Proxy, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for p.Stats().Active != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests still active %v after their clients left", p.Stats().Active, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestLongPollPassesThrough(t *testing.T) {
	emu := testenv.SQS(t)
	q := emu.NewQueue(t, testenv.QueueOptions{})
	p, url := Serve(t, emu.Endpoint, Config{})
	c := client(url, 1)

	go func() {
		time.Sleep(time.Second)
		_ = send(context.Background(), emu.Client(), q, "late")
	}()
	begin := time.Now()
	out, err := c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.URL), WaitTimeSeconds: 5})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) != 1 || aws.ToString(out.Messages[0].Body) != "late" {
		t.Fatalf("long poll returned %+v, want the message sent a second into it", out.Messages)
	}
	if took := time.Since(begin); took < 900*time.Millisecond {
		t.Errorf("long poll returned after %v, before the message was sent", took)
	}

	// A client that gives up on a long poll ends its handler and its upstream request.
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if _, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.URL), WaitTimeSeconds: 20}); err == nil {
		t.Fatal("long poll outlived its 300ms deadline")
	}
	waitIdle(t, p, 5*time.Second)
	if s := p.Stats().Operations["ReceiveMessage"]; s.Requests != 2 || s.Forwarded != 2 || s.Injected() != 0 {
		t.Errorf("stats = %+v, want 2 requests forwarded untouched", s)
	}
}

func TestDeterministicFromSeed(t *testing.T) {
	emu := testenv.SQS(t)
	q := emu.NewQueue(t, testenv.QueueOptions{})
	rules := []Rule{
		{Operations: []string{"SendMessage"}, Fault: ServerError, Rate: 0.25},
		{Operations: []string{"SendMessage"}, Fault: Throttle, Rate: 0.15},
	}
	run := func(seed int64) (seqs []int, faults []Fault, failed []int) {
		p, url := Serve(t, emu.Endpoint, Config{Rules: rules, Seed: seed})
		c := client(url, 1)
		for i := range 40 {
			if err := send(t.Context(), c, q, strconv.Itoa(i)); err != nil {
				failed = append(failed, i)
			}
		}
		for _, in := range p.Injections() {
			seqs, faults = append(seqs, in.Seq), append(faults, in.Fault)
		}
		return seqs, faults, failed
	}
	seqsA, faultsA, failedA := run(42)
	seqsB, faultsB, failedB := run(42)
	seqsC, _, _ := run(43)
	drain(t, emu, q)

	if len(seqsA) == 0 || len(seqsA) == 40 {
		t.Fatalf("%d of 40 requests faulted at rates 0.25+0.15: the rules did not apply", len(seqsA))
	}
	if !slices.Equal(seqsA, seqsB) || !slices.Equal(faultsA, faultsB) {
		t.Errorf("same seed, different injections:\n%v %q\n%v %q", seqsA, faultsA, seqsB, faultsB)
	}
	if !slices.Equal(seqsA, failedA) || !slices.Equal(failedA, failedB) {
		t.Errorf("the calls that failed (%v, %v) are not the ones faulted (%v)", failedA, failedB, seqsA)
	}
	if slices.Equal(seqsA, seqsC) {
		t.Errorf("seeds 42 and 43 faulted the same requests %v", seqsA)
	}
}

func TestScheduleTurnsFaultsOnAndOff(t *testing.T) {
	emu := testenv.SQS(t)
	q := emu.NewQueue(t, testenv.QueueOptions{})
	attrs := &sqs.GetQueueAttributesInput{QueueUrl: aws.String(q.URL)}
	outcomes := func(c *sqs.Client, n int) []bool {
		var ok []bool
		for range n {
			_, err := c.GetQueueAttributes(t.Context(), attrs)
			ok = append(ok, err == nil)
		}
		return ok
	}

	t.Run("in requests", func(t *testing.T) {
		_, url := Serve(t, emu.Endpoint, Config{Rules: []Rule{{Operations: []string{"GetQueueAttributes"}, Fault: ServerError, Rate: 1, After: 2, For: 3}}})
		want := []bool{true, true, false, false, false, true, true}
		if got := outcomes(client(url, 1), len(want)); !slices.Equal(got, want) {
			t.Errorf("outcomes = %v, want %v", got, want)
		}
	})

	t.Run("in time", func(t *testing.T) {
		_, url := Serve(t, emu.Endpoint, Config{Rules: []Rule{{Operations: []string{"*"}, Fault: ServerError, Rate: 1, Until: 500 * time.Millisecond}}})
		c := client(url, 1)
		if got := outcomes(c, 1); got[0] {
			t.Error("call inside the window succeeded")
		}
		time.Sleep(600 * time.Millisecond)
		if got := outcomes(c, 1); !got[0] {
			t.Error("call after the window failed")
		}
	})

	t.Run("SetRules at run time", func(t *testing.T) {
		p, url := Serve(t, emu.Endpoint, Config{})
		c := client(url, 1)
		var got []bool
		got = append(got, outcomes(c, 1)...)
		if err := p.SetRules([]Rule{{Operations: []string{"*"}, Fault: Throttle, Rate: 1}}); err != nil {
			t.Fatal(err)
		}
		got = append(got, outcomes(c, 2)...)
		if err := p.SetRules(nil); err != nil {
			t.Fatal(err)
		}
		got = append(got, outcomes(c, 1)...)
		if want := []bool{true, false, false, true}; !slices.Equal(got, want) {
			t.Errorf("outcomes = %v, want %v", got, want)
		}
	})
}

func TestStall(t *testing.T) {
	emu := testenv.SQS(t)
	q := emu.NewQueue(t, testenv.QueueOptions{})
	attrs := &sqs.GetQueueAttributesInput{QueueUrl: aws.String(q.URL)}

	t.Run("a Stall rule holds requests until its window closes", func(t *testing.T) {
		p, url := Serve(t, emu.Endpoint, Config{Rules: []Rule{{Operations: []string{"GetQueueAttributes"}, Fault: Stall, Rate: 1, Until: time.Second}}})
		begin := time.Now()
		if _, err := client(url, 1).GetQueueAttributes(t.Context(), attrs); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(begin); took < 900*time.Millisecond {
			t.Errorf("stalled call returned after %v, before the 1s window closed", took)
		}
		if s := p.Stats().Operations["GetQueueAttributes"]; s.Faults[Stall] != 1 || s.Forwarded != 1 {
			t.Errorf("stats = %+v, want 1 stalled then forwarded", s)
		}
	})

	t.Run("SetRules releases a stall", func(t *testing.T) {
		p, url := Serve(t, emu.Endpoint, Config{Rules: []Rule{{Operations: []string{"*"}, Fault: Stall, Rate: 1, Until: time.Minute}}})
		done := make(chan error, 1)
		begin := time.Now()
		go func() {
			_, err := client(url, 1).GetQueueAttributes(t.Context(), attrs)
			done <- err
		}()
		for p.Stats().Operations["GetQueueAttributes"].Faults[Stall] == 0 {
			time.Sleep(10 * time.Millisecond)
		}
		if err := p.SetRules(nil); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if took := time.Since(begin); took > 10*time.Second {
			t.Errorf("released call took %v", took)
		}
	})

	t.Run("Stall holds an answer in flight", func(t *testing.T) {
		p, err := New(emu.Endpoint, Config{})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Stall(time.Second); err == nil {
			t.Error("Stall before Start succeeded")
		}
		p.Close()

		p, url := Serve(t, emu.Endpoint, Config{})
		if err := p.Stall(0); err == nil {
			t.Error("Stall(0) succeeded")
		}
		done := make(chan error, 1)
		begin := time.Now()
		go func() {
			_, err := client(url, 1).ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.URL), WaitTimeSeconds: 1})
			done <- err
		}()
		for p.Stats().Operations["ReceiveMessage"].Forwarded == 0 {
			time.Sleep(5 * time.Millisecond)
		}
		if err := p.Stall(2 * time.Second); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if took := time.Since(begin); took < 1900*time.Millisecond {
			t.Errorf("long poll answered after %v, during the 2s stall", took)
		}
		if s := p.Stats().Operations["ReceiveMessage"]; s.HeldAnswers != 1 || s.Injected() != 0 {
			t.Errorf("stats = %+v, want 1 held answer and no fault", s)
		}
	})
}

func TestCloseCutsLongPolls(t *testing.T) {
	emu := testenv.SQS(t)
	q := emu.NewQueue(t, testenv.QueueOptions{})
	p, url := Serve(t, emu.Endpoint, Config{Rules: []Rule{{Operations: []string{"GetQueueAttributes"}, Fault: Latency, Rate: 1, Latency: time.Minute}}})
	c := client(url, 1)

	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Go(func() {
		_, err := c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.URL), WaitTimeSeconds: 20})
		errs <- err
	})
	wg.Go(func() {
		_, err := c.GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(q.URL)})
		errs <- err
	})
	for s := p.Stats(); s.Active < 2; s = p.Stats() {
		time.Sleep(10 * time.Millisecond)
	}
	begin := time.Now()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(begin); took > 5*time.Second {
		t.Errorf("Close took %v with a long poll and a delayed call in flight", took)
	}
	if a := p.Stats().Active; a != 0 {
		t.Errorf("Close returned with %d handlers still active", a)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err == nil {
			t.Error("a call in flight at Close succeeded")
		}
	}
	// A handler's goroutine belongs to net/http and may still be returning from the frame
	// whose deferred bookkeeping let Close return: give it a moment.
	g := proxyGoroutines()
	for deadline := time.Now().Add(2 * time.Second); len(g) != 0 && time.Now().Before(deadline); g = proxyGoroutines() {
		time.Sleep(10 * time.Millisecond)
	}
	if len(g) != 0 {
		t.Errorf("goroutines of the proxy still running after Close:\n%s", strings.Join(g, "\n\n"))
	}
	if _, err := p.Start(); err == nil {
		t.Error("Start after Close succeeded")
	}
	if err := p.Stall(time.Second); err == nil {
		t.Error("Stall after Close succeeded")
	}
}

// proxyGoroutines returns the stacks of running goroutines that are in the proxy's code.
func proxyGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "faultproxy.(*Proxy)") || strings.Contains(g, "faultproxy.roundTripper") || strings.Contains(g, "faultproxy.wait(") {
			out = append(out, g)
		}
	}
	return out
}
