package lambda

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// runtime is a test's side of a server: plain HTTP calls, as a runtime client makes them.
type runtime struct {
	t    *testing.T
	base string
}

func serve(t *testing.T) (*Server, runtime) {
	t.Helper()
	s := NewServer(Function{Name: "fn", Version: "$LATEST", Handler: "index.handler"})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s, runtime{t: t, base: "http://" + ln.Addr().String()}
}

func (r runtime) call(method, path, body string, header ...string) (int, http.Header, string) {
	r.t.Helper()
	req, _ := http.NewRequest(method, r.base+path, strings.NewReader(body))
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// invoke runs Invoke in the background and returns where its answer arrives.
func invoke(s *Server, ctx context.Context, inv Invocation) <-chan Answer {
	ch := make(chan Answer, 1)
	go func() {
		a, err := s.Invoke(ctx, inv)
		if err != nil {
			a.Error = &FunctionError{Type: "invoke", Message: err.Error()}
		}
		ch <- a
	}()
	return ch
}

// A runtime gets the invocation with its headers, and its answer comes back; a second answer,
// an answer for an id never given out, and one for an earlier invocation are refused as the
// Runtime API refuses them.
func TestRuntimeAPI(t *testing.T) {
	s, rt := serve(t)
	deadline := time.UnixMilli(1764633600123)
	inv := Invocation{RequestID: "req-1", Deadline: deadline, FunctionARN: "arn:aws:lambda:eu-west-1:1:function:fn", TraceID: "Root=1-a-b", Payload: []byte(`{"Records":[]}`)}
	answer := invoke(s, t.Context(), inv)
	code, h, body := rt.call("GET", "/2018-06-01/runtime/invocation/next", "")
	select {
	case <-s.Asked():
	default:
		t.Error("Asked not closed after a /next")
	}
	if code != 200 || body != string(inv.Payload) || h.Get(HeaderRequestID) != "req-1" || h.Get(HeaderDeadline) != "1764633600123" ||
		h.Get(HeaderFunctionARN) != inv.FunctionARN || h.Get(HeaderTraceID) != "Root=1-a-b" {
		t.Fatalf("/next: %d %q %v", code, body, h)
	}
	for _, c := range []struct {
		name, path string
		want       int
	}{
		{"unknown id", "/2018-06-01/runtime/invocation/nope/response", 400},
		{"the answer", "/2018-06-01/runtime/invocation/req-1/response", 202},
		{"a second answer", "/2018-06-01/runtime/invocation/req-1/response", 403},
		{"a second answer as an error", "/2018-06-01/runtime/invocation/req-1/error", 403},
		{"init error after init", "/2018-06-01/runtime/init/error", 403},
	} {
		if code, _, body := rt.call("POST", c.path, `{"batchItemFailures":[]}`); code != c.want {
			t.Errorf("%s: %d %s, want %d", c.name, code, body, c.want)
		}
	}
	if a := <-answer; string(a.Response) != `{"batchItemFailures":[]}` || a.Error != nil {
		t.Errorf("answer %q %v", a.Response, a.Error)
	}

	// The next invocation: an error, and the previous id is no longer valid.
	answer = invoke(s, t.Context(), Invocation{RequestID: "req-2", Deadline: deadline})
	rt.call("GET", "/2018-06-01/runtime/invocation/next", "")
	if code, _, _ := rt.call("POST", "/2018-06-01/runtime/invocation/req-1/response", "{}"); code != 400 {
		t.Errorf("answer for the previous invocation: %d, want 400", code)
	}
	rt.call("POST", "/2018-06-01/runtime/invocation/req-2/error", `{"errorType":"Boom","errorMessage":"it broke","stackTrace":["a"]}`)
	if a := <-answer; a.Error == nil || a.Error.Type != "Boom" || a.Error.Message != "it broke" {
		t.Errorf("error answer %+v", a.Error)
	}
}

// An /error whose body is not JSON keeps its header's type and its body as the message; a
// response over the limit fails the invocation with 413.
func TestRuntimeAPIErrorsAndLimits(t *testing.T) {
	s, rt := serve(t)
	answer := invoke(s, t.Context(), Invocation{RequestID: "r"})
	rt.call("GET", "/2018-06-01/runtime/invocation/next", "")
	rt.call("POST", "/2018-06-01/runtime/invocation/r/error", "plain text", "Lambda-Runtime-Function-Error-Type", "Runtime.Crash")
	if a := <-answer; a.Error == nil || a.Error.Type != "Runtime.Crash" || a.Error.Message != "plain text" {
		t.Errorf("error answer %+v", a.Error)
	}
	answer = invoke(s, t.Context(), Invocation{RequestID: "big"})
	rt.call("GET", "/2018-06-01/runtime/invocation/next", "")
	if code, _, _ := rt.call("POST", "/2018-06-01/runtime/invocation/big/response", strings.Repeat("x", MaxResponse+1)); code != 413 {
		t.Errorf("an oversized response: %d, want 413", code)
	}
	if a := <-answer; a.Error == nil || a.Error.Type != "Function.ResponseSizeTooLarge" {
		t.Errorf("oversized answer %+v", a.Error)
	}
}

// An init error is delivered before the first /next; a /next while the invocation given out
// has no answer is refused.
func TestRuntimeAPIInit(t *testing.T) {
	s, rt := serve(t)
	if code, _, _ := rt.call("POST", "/2018-06-01/runtime/init/error", `{"errorType":"Runtime.ImportModuleError","errorMessage":"no module"}`); code != 202 {
		t.Fatalf("init error: %d", code)
	}
	if fe := <-s.InitError(); fe.Type != "Runtime.ImportModuleError" {
		t.Errorf("init error %+v", fe)
	}
	answer := invoke(s, t.Context(), Invocation{RequestID: "r"})
	rt.call("GET", "/2018-06-01/runtime/invocation/next", "")
	if code, _, _ := rt.call("GET", "/2018-06-01/runtime/invocation/next", ""); code != 403 {
		t.Errorf("/next before answering: %d, want 403", code)
	}
	rt.call("POST", "/2018-06-01/runtime/invocation/r/response", "")
	<-answer
}

// Invoke ends with its context, and the runtime's late answer is refused; after Close it
// returns ErrClosed.
func TestInvokeEnds(t *testing.T) {
	s, rt := serve(t)
	ctx, cancel := context.WithCancelCause(t.Context())
	answer := invoke(s, ctx, Invocation{RequestID: "slow"})
	rt.call("GET", "/2018-06-01/runtime/invocation/next", "")
	stop := errors.New("deadline")
	cancel(stop)
	if a := <-answer; a.Error == nil || a.Error.Message != stop.Error() {
		t.Errorf("answer after cancel %+v", a.Error)
	}
	if code, _, _ := rt.call("POST", "/2018-06-01/runtime/invocation/slow/response", ""); code != 403 {
		t.Errorf("late answer: %d, want 403", code)
	}
	s.Close()
	if _, err := s.Invoke(t.Context(), Invocation{RequestID: "x"}); !errors.Is(err, ErrClosed) {
		t.Errorf("Invoke after Close: %v", err)
	}
}

// aws-lambda-go's internal extension registers for no event and waits; one registered for
// SHUTDOWN gets it at the drain; INVOKE is refused.
func TestExtensions(t *testing.T) {
	s, rt := serve(t)
	code, h, body := rt.call("POST", "/2020-01-01/extension/register", `{"events":["SHUTDOWN"]}`, "Lambda-Extension-Name", "ext")
	var reg map[string]string
	_ = json.Unmarshal([]byte(body), &reg)
	id := h.Get("Lambda-Extension-Identifier")
	if code != 200 || id == "" || reg["functionName"] != "fn" || reg["handler"] != "index.handler" {
		t.Fatalf("register: %d %v %s", code, h, body)
	}
	if code, _, _ := rt.call("POST", "/2020-01-01/extension/register", `{"events":["INVOKE"]}`, "Lambda-Extension-Name", "x"); code != 400 {
		t.Errorf("INVOKE registered: %d, want 400", code)
	}
	if code, _, _ := rt.call("GET", "/2020-01-01/extension/event/next", "", "Lambda-Extension-Identifier", "unknown"); code != 403 {
		t.Errorf("unknown extension: %d, want 403", code)
	}
	_, h, _ = rt.call("POST", "/2020-01-01/extension/register", `{"events":[]}`, "Lambda-Extension-Name", "GoLangEnableSIGTERM")
	silent := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("GET", rt.base+"/2020-01-01/extension/event/next", nil)
		req.Header.Set("Lambda-Extension-Identifier", h.Get("Lambda-Extension-Identifier"))
		code := -1 // the connection closed by Close, as the runtime sees it
		if resp, err := http.DefaultClient.Do(req); err == nil {
			code = resp.StatusCode
			resp.Body.Close()
		}
		silent <- code
	}()
	deadline := time.UnixMilli(1764633600999)
	s.Shutdown(deadline)
	code, _, body = rt.call("GET", "/2020-01-01/extension/event/next", "", "Lambda-Extension-Identifier", id)
	var ev struct {
		EventType  string
		DeadlineMs int64
	}
	_ = json.Unmarshal([]byte(body), &ev)
	if code != 200 || ev.EventType != "SHUTDOWN" || ev.DeadlineMs != deadline.UnixMilli() {
		t.Errorf("event: %d %s", code, body)
	}
	s.Close()
	if code := <-silent; code != -1 {
		t.Errorf("an extension registered for no event got an answer: %d", code)
	}
}
