package faultproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// MaxBufferedBody bounds the request body the proxy reads into memory before it forwards or
// faults a request (SQS refuses requests far smaller).
const MaxBufferedBody = 16 << 20

// Proxy is a fault-injecting reverse proxy in front of an SQS endpoint. Its methods are
// safe for concurrent use.
type Proxy struct {
	transport *http.Transport
	reverse   *httputil.ReverseProxy

	// ctx is the base of every request's context; Close cancels it.
	ctx    context.Context
	cancel context.CancelFunc

	mu         sync.Mutex
	state      state
	rand       *rand.Rand
	rules      *ruleSet
	stalls     []stallWindow
	started    time.Time
	seq        int
	active     int
	ops        map[string]*OperationStats
	injections []Injection
	srv        *http.Server
	serveDone  chan struct{}
	handlers   sync.WaitGroup
}

type state int

const (
	created state = iota
	running
	closed
)

// ruleSet is the rules in force and their per-rule counters of matching requests.
type ruleSet struct {
	rules  []Rule
	counts []int
	// since is when the rules took effect; zero until Start.
	since time.Time
	// replaced is closed when SetRules replaces the set, releasing requests it holds.
	replaced chan struct{}
}

func newRuleSet(rules []Rule, since time.Time) *ruleSet {
	return &ruleSet{
		rules:    append([]Rule(nil), rules...),
		counts:   make([]int, len(rules)),
		since:    since,
		replaced: make(chan struct{}),
	}
}

// stallWindow is a stall requested with Proxy.Stall, in wall-clock time.
type stallWindow struct{ from, until time.Time }

// Injection records one injected fault.
type Injection struct {
	// Seq is the request's index among all requests the proxy received, from 0.
	Seq int
	// Operation is the SQS operation, or NoTarget.
	Operation string
	// Fault is what was injected.
	Fault Fault
	// Rule is the index of the rule in the set in force, or -1 for a window of Proxy.Stall.
	Rule int
	// Elapsed is the time since Start.
	Elapsed time.Duration
	// Request is the request body, as far as the client sent it.
	Request []byte
}

// New checks cfg and the upstream URL (an http(s) URL on a loopback address: the proxy is a
// test tool) and returns a proxy that is not listening yet.
func New(upstream string, cfg Config) (*Proxy, error) {
	u, err := parseUpstream(upstream)
	if err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	transport := &http.Transport{
		Proxy:               nil, // never through an HTTP_PROXY from the environment
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        100,
		MaxIdleConnsPerHost: 100,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true, // pass bodies through as they are
	}
	discard := log.New(io.Discard, "", 0)
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		transport: transport,
		ctx:       ctx,
		cancel:    cancel,
		rand:      rand.New(rand.NewPCG(uint64(cfg.Seed), 0)),
		rules:     newRuleSet(cfg.Rules, time.Time{}),
		ops:       map[string]*OperationStats{},
	}
	p.reverse = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			// Keep the client's Host: it is covered by the request's SigV4 signature.
			pr.Out.Host = pr.In.Host
		},
		Transport:      roundTripper{p: p},
		FlushInterval:  -1,
		ErrorLog:       discard,
		ModifyResponse: p.holdAnswer,
		ErrorHandler:   p.proxyError,
	}
	return p, nil
}

func parseUpstream(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("upstream %q: %w", s, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("upstream %q: scheme must be http or https", s)
	}
	host := u.Hostname()
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("upstream %q: host must be a loopback address such as 127.0.0.1", s)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("upstream %q: must be scheme://host:port with no path, query or credentials", s)
	}
	return u, nil
}

// Start listens on a free port of 127.0.0.1 and serves until Close. It returns the proxy's
// base URL, to be used as the SDK's BaseEndpoint. The schedule of Config.Rules starts now.
func (p *Proxy) Start() (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch p.state {
	case running:
		return "", errors.New("faultproxy: already started")
	case closed:
		return "", errors.New("faultproxy: closed")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("faultproxy: listen: %w", err)
	}
	now := time.Now()
	p.started = now
	p.rules.since = now
	p.srv = &http.Server{
		Handler:           http.HandlerFunc(p.serve),
		BaseContext:       func(net.Listener) context.Context { return p.ctx },
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	p.serveDone = make(chan struct{})
	p.state = running
	go func() {
		defer close(p.serveDone)
		_ = p.srv.Serve(ln) // returns http.ErrServerClosed after Close
	}()
	return "http://" + ln.Addr().String(), nil
}

// Close stops listening, cuts every connection (clients see them closed), cancels every
// request in flight upstream, and returns once every goroutine the proxy started has ended.
// It is safe to call more than once.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.state == closed {
		p.mu.Unlock()
		return nil
	}
	wasRunning := p.state == running
	p.state = closed
	p.mu.Unlock()

	p.cancel()
	var err error
	if wasRunning {
		err = p.srv.Close()
		<-p.serveDone
	}
	p.handlers.Wait()
	p.transport.CloseIdleConnections()
	return err
}

// SetRules validates rules and replaces the rules in force. Their schedule (From, Until)
// counts from this call, or from Start when called before it; their request counters start
// at 0. Requests held by a Stall rule of the replaced set are released and forwarded.
// The random source carries on: it is not reseeded.
func (p *Proxy) SetRules(rules []Rule) error {
	if err := validateRules(rules); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var since time.Time
	if p.state != created {
		since = time.Now()
	}
	close(p.rules.replaced)
	p.rules = newRuleSet(rules, since)
	return nil
}

// Stall makes the proxy stop answering for d from now, whatever the rules: every request
// that arrives in that window is held until it ends and then forwarded, and every answer
// that comes back from upstream in that window is held until it ends. Clients that give up
// meanwhile are not forwarded. Stall windows are not rules: SetRules leaves them in place.
func (p *Proxy) Stall(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("faultproxy: stall duration (%v) must be positive", d)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state != running {
		return errors.New("faultproxy: Stall needs a started, open proxy")
	}
	now := time.Now()
	p.stalls = slices.DeleteFunc(p.stalls, func(w stallWindow) bool { return !w.until.After(now) })
	p.stalls = append(p.stalls, stallWindow{from: now, until: now.Add(d)})
	return nil
}

// Injections returns every fault injected so far, in the order decided (by Seq).
func (p *Proxy) Injections() []Injection {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Injection, len(p.injections))
	copy(out, p.injections)
	return out
}

// decision is what the proxy does with one request.
type decision struct {
	seq   int
	fault Fault // "" forwards untouched
	// index is the rule's index in the set, -1 for a Proxy.Stall window; rule is a copy.
	index int
	rule  Rule
	// holdUntil and release bound a Stall's hold.
	holdUntil time.Time
	release   <-chan struct{}
}

// decide counts the request and picks its fault. Decisions are taken one at a time under
// p.mu, in arrival order, each drawing from the one seeded random source: the same seed and
// the same sequence of requests give the same decisions.
func (p *Proxy) decide(op string, now time.Time) decision {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := decision{seq: p.seq, index: -1}
	p.seq++
	p.opStats(op).Requests++

	for _, w := range p.stalls {
		if !now.Before(w.from) && now.Before(w.until) {
			d.fault, d.holdUntil = Stall, w.until
			return d
		}
	}
	rs := p.rules
	elapsed := now.Sub(rs.since)
	for i, r := range rs.rules {
		if !r.matches(op) || !r.inWindow(elapsed) {
			continue
		}
		// Every rule counts the request, even one an earlier rule already faulted.
		n := rs.counts[i]
		rs.counts[i]++
		if d.fault != "" || n < r.After || (r.For > 0 && n >= r.After+r.For) {
			continue
		}
		if p.rand.Float64() >= r.Rate {
			continue
		}
		d.fault, d.index, d.rule = r.Fault, i, r
		if r.Fault == Stall {
			d.holdUntil, d.release = rs.since.Add(r.Until), rs.replaced
		}
	}
	return d
}

// stallEnd returns when the last open stall covering op ends, or the zero time.
func (p *Proxy) stallEnd(op string, now time.Time) (time.Time, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var end time.Time
	for _, w := range p.stalls {
		if !now.Before(w.from) && now.Before(w.until) && w.until.After(end) {
			end = w.until
		}
	}
	rs := p.rules
	elapsed := now.Sub(rs.since)
	for _, r := range rs.rules {
		if r.Fault == Stall && r.matches(op) && r.inWindow(elapsed) {
			if u := rs.since.Add(r.Until); u.After(end) {
				end = u
			}
		}
	}
	return end, rs.replaced
}

func (p *Proxy) opStats(op string) *OperationStats {
	s, ok := p.ops[op]
	if !ok {
		s = &OperationStats{Faults: map[Fault]int{}}
		p.ops[op] = s
	}
	return s
}

func (p *Proxy) count(op string, f func(*OperationStats)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(p.opStats(op))
}

// enter registers a request handler with Close, or refuses it once the proxy is closing.
func (p *Proxy) enter() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == closed {
		return false
	}
	p.handlers.Add(1)
	p.active++
	return true
}

func (p *Proxy) leave() {
	p.mu.Lock()
	p.active--
	p.mu.Unlock()
	p.handlers.Done()
}

// operation names the SQS operation of r from its JSON-protocol X-Amz-Target header
// ("AmazonSQS.ReceiveMessage"), or the S3 operation of an S3 request (s3Operation).
func operation(r *http.Request) string {
	target := r.Header.Get("X-Amz-Target")
	if target == "" {
		if op, ok := s3Operation(r); ok {
			return op
		}
		return NoTarget
	}
	if i := strings.LastIndexByte(target, '.'); i >= 0 {
		return target[i+1:]
	}
	return target
}

type ctxKey struct{}

// forwardState travels with a forwarded request to the round tripper and error handler.
type forwardState struct {
	op        string
	dropAfter bool
}

func (p *Proxy) serve(w http.ResponseWriter, r *http.Request) {
	if !p.enter() {
		drop(w)
		return
	}
	defer p.leave()

	op := operation(r)
	d := p.decide(op, time.Now())

	// Read the whole body first, for every request. The injection records it, nothing is
	// ever half-forwarded, and once it is read the server notices a client that hangs up
	// during a delay. Above all, a forwarded request must not be read from the client's
	// connection once its answer has begun: after the Transport has sent a body's
	// Content-Length bytes, its writing goroutine reads the body once more, to check that
	// nothing is left over; when that goroutine runs late, the upstream has answered, the
	// answer's headers have gone to the client, and net/http's server has closed the
	// request body under it (it does so when a handler's response starts). The read fails,
	// the Transport takes it for a failed write and closes the upstream connection, and the
	// client gets a 200 whose body stops short. The SDK does not retry that, so a
	// ReceiveMessage lost its messages for their visibility timeout, a few times in every
	// bench run, with no fault injected. A body in memory reads to its end whenever it is
	// read.
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBufferedBody+1))
	if d.fault != "" {
		p.mu.Lock()
		p.opStats(op).Faults[d.fault]++
		p.injections = append(p.injections, Injection{
			Seq: d.seq, Operation: op, Fault: d.fault, Rule: d.index,
			Elapsed: time.Since(p.started), Request: body,
		})
		p.mu.Unlock()
	}
	if err != nil {
		drop(w) // the client went away
		return
	}
	if len(body) > MaxBufferedBody {
		writeAPIError(w, d.seq, apiError{status: http.StatusRequestEntityTooLarge,
			typ: "faultproxy#RequestTooLarge", query: "RequestTooLarge;Sender",
			message: fmt.Sprintf("faultproxy: request body over %d bytes", MaxBufferedBody)})
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))

	switch d.fault {
	case "":
		p.forward(w, r, forwardState{op: op})
	case ServerError:
		if isS3(op) {
			writeS3Error(w, d.seq, s3InternalError)
			break
		}
		writeAPIError(w, d.seq, internalFailure)
	case Throttle:
		if isS3(op) {
			writeS3Error(w, d.seq, s3SlowDown)
			break
		}
		if d.rule.ThrottleCode == RequestThrottled {
			writeAPIError(w, d.seq, requestThrottled)
		} else {
			writeAPIError(w, d.seq, throttlingException)
		}
	case DropBefore:
		drop(w)
	case DropAfter:
		p.forward(w, r, forwardState{op: op, dropAfter: true})
	case Latency:
		p.forwardAfter(w, r, op, wait(r.Context(), d.rule.Latency, nil))
	case Stall:
		p.forwardAfter(w, r, op, wait(r.Context(), time.Until(d.holdUntil), d.release))
	}
}

// forwardAfter forwards r after a wait, or, when the wait was cut short because the client
// left or the proxy is closing, drops the connection: a handler that returns without
// answering would send an empty 200, which the SDK takes for a success.
func (p *Proxy) forwardAfter(w http.ResponseWriter, r *http.Request, op string, waited bool) {
	if !waited {
		drop(w)
		return
	}
	p.forward(w, r, forwardState{op: op})
}

func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, st forwardState) {
	p.reverse.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, &st)))
}

// wait sleeps for d; it returns false if ctx ends first and true otherwise (also when
// release is closed).
func wait(ctx context.Context, d time.Duration, release <-chan struct{}) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-release:
		return true
	case <-ctx.Done():
		return false
	}
}

// errLostAnswer tells the error handler to drop the connection of a DropAfter request.
var errLostAnswer = errors.New("faultproxy: answer dropped")

type roundTripper struct{ p *Proxy }

// RoundTrip forwards one request upstream. For DropAfter it reads the whole answer, so the
// request has fully taken effect, then discards it.
func (rt roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	st := req.Context().Value(ctxKey{}).(*forwardState)
	rt.p.count(st.op, func(s *OperationStats) { s.Forwarded++ })
	resp, err := rt.p.transport.RoundTrip(req)
	if err != nil || !st.dropAfter {
		return resp, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	return nil, errLostAnswer
}

// holdAnswer holds an answer that comes back while a stall covers its operation.
func (p *Proxy) holdAnswer(resp *http.Response) error {
	ctx := resp.Request.Context()
	st := ctx.Value(ctxKey{}).(*forwardState)
	end, release := p.stallEnd(st.op, time.Now())
	if end.IsZero() {
		return nil
	}
	p.count(st.op, func(s *OperationStats) { s.HeldAnswers++ })
	if !wait(ctx, time.Until(end), release) {
		return ctx.Err()
	}
	return nil
}

// proxyError handles a forwarded request that got no answer to pass on.
func (p *Proxy) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	st := r.Context().Value(ctxKey{}).(*forwardState)
	switch {
	case errors.Is(err, errLostAnswer):
		drop(w)
	case r.Context().Err() != nil:
		// The client went away, or Close is cutting every connection.
		drop(w)
	default:
		p.count(st.op, func(s *OperationStats) { s.UpstreamErrors++ })
		writeAPIError(w, -1, apiError{status: http.StatusBadGateway,
			typ: "faultproxy#UpstreamError", query: "UpstreamError;Receiver",
			message: "faultproxy: upstream: " + err.Error()})
	}
}

// drop closes the client's connection without an answer.
func drop(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler) // net/http closes the connection without logging
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}
