// Package lambda speaks AWS Lambda's side of its contracts with a function: the Runtime API
// and the Extensions API that a runtime (aws-lambda-go, aws-lambda-ric, a base image's
// bootstrap) calls, the SQS event that Lambda's event source mapping builds, and the partial
// batch response (ReportBatchItemFailures) the function answers with. The worker package's
// Lambda kind runs runtimes against it; this package starts no process.
package lambda

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// The Runtime API, as https://docs.aws.amazon.com/lambda/latest/dg/runtimes-api.html
// documents it (version 2018-06-01).
const (
	runtimePrefix = "/2018-06-01/runtime/"

	// HeaderRequestID, HeaderDeadline, HeaderFunctionARN and HeaderTraceID are the headers
	// of a /next answer: the invocation's id, its deadline in Unix milliseconds, the invoked
	// function's ARN and X-Ray's trace header.
	HeaderRequestID   = "Lambda-Runtime-Aws-Request-Id"
	HeaderDeadline    = "Lambda-Runtime-Deadline-Ms"
	HeaderFunctionARN = "Lambda-Runtime-Invoked-Function-Arn"
	HeaderTraceID     = "Lambda-Runtime-Trace-Id"
	// headerErrorType is the /error and /init/error requests' header naming the error's type.
	headerErrorType = "Lambda-Runtime-Function-Error-Type"
)

// MaxResponse is the largest response a runtime may post: Lambda's 6 MB synchronous
// invocation limit, which the event obeys too.
const MaxResponse = 6 << 20

// Invocation is one invoke given to a runtime.
type Invocation struct {
	// RequestID is unique to the invocation: the runtime answers with it.
	RequestID   string
	Deadline    time.Time
	FunctionARN string
	// TraceID is X-Ray's trace header, "" without one.
	TraceID string
	Payload []byte
}

// Answer is how a runtime answered an invocation: its response, or the error it posted.
type Answer struct {
	Response []byte
	// Error is set when the runtime posted to /error.
	Error *FunctionError
}

// FunctionError is the body of an /error or /init/error post.
type FunctionError struct {
	Type    string   `json:"errorType"`
	Message string   `json:"errorMessage"`
	Trace   []string `json:"stackTrace,omitempty"`
}

// Error is the error's type and message, as a log line shows them.
func (e *FunctionError) Error() string { return e.Type + ": " + e.Message }

// ErrClosed is returned by Invoke when the server closes before the runtime took the
// invocation: another runtime may take it. ErrGone is returned when the runtime went away
// with the invocation: it crashed, or was stopped.
var (
	ErrClosed = errors.New("the runtime API is closed")
	ErrGone   = errors.New("the runtime ended during the invocation")
)

// Server is one execution environment's Runtime and Extensions APIs, for one runtime
// process: it hands out one invocation at a time and takes its answer. Build it with
// NewServer, start it with Serve, and end it with Close.
type Server struct {
	fn   Function
	http *http.Server
	// work passes an invocation to a waiting /next; unbuffered, so Invoke returns only
	// once the runtime has it.
	work   chan *call
	asked  chan struct{} // closed at the first /next: the runtime has initialised
	initEr chan *FunctionError
	closed chan struct{}
	// shutdown is closed when the environment shuts down: SHUTDOWN to the extensions.
	shutdown chan struct{}
	once     struct{ asked, closed, shutdown sync.Once }

	// mu guards the invocation given out and the extensions; it is never held while waiting.
	mu       sync.Mutex
	current  *call
	exts     map[string]extension
	deadline time.Time // the shutdown's deadline, for the SHUTDOWN event
}

// Function names the function for the Extensions API's register answer.
type Function struct {
	Name, Version, Handler string
}

// call is an invocation given out and the place its answer goes.
type call struct {
	inv      Invocation
	answer   chan Answer // buffered: the answer never waits for Invoke
	answered bool        // guarded by Server.mu
}

// NewServer returns the APIs of one environment of fn.
func NewServer(fn Function) *Server {
	s := &Server{fn: fn, work: make(chan *call), asked: make(chan struct{}), initEr: make(chan *FunctionError, 1),
		closed: make(chan struct{}), shutdown: make(chan struct{}), exts: map[string]extension{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+runtimePrefix+"invocation/next", s.next)
	mux.HandleFunc("POST "+runtimePrefix+"invocation/{id}/response", s.respond)
	mux.HandleFunc("POST "+runtimePrefix+"invocation/{id}/error", s.fail)
	mux.HandleFunc("POST "+runtimePrefix+"init/error", s.initError)
	mux.HandleFunc("POST "+extensionPrefix+"register", s.register)
	mux.HandleFunc("GET "+extensionPrefix+"event/next", s.event)
	// No timeouts: /next and event/next wait for work as long as it takes.
	s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	return s
}

// Serve answers the runtime on ln until Close; it returns nil once closed.
func (s *Server) Serve(ln net.Listener) error {
	if err := s.http.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Close ends the APIs: waiting calls return, and Invoke returns ErrClosed or ErrGone.
func (s *Server) Close() {
	s.once.closed.Do(func() { close(s.closed) })
	_ = s.http.Close()
}

// Asked is closed once the runtime first asks for work: its init is over.
func (s *Server) Asked() <-chan struct{} { return s.asked }

// InitError delivers the error a runtime posted to /init/error.
func (s *Server) InitError() <-chan *FunctionError { return s.initEr }

// Invoke gives inv to the runtime at its next /next and waits for its answer. Ending ctx
// abandons the invocation: a later answer for it is refused.
func (s *Server) Invoke(ctx context.Context, inv Invocation) (Answer, error) {
	c := &call{inv: inv, answer: make(chan Answer, 1)}
	select {
	case s.work <- c:
	case <-ctx.Done():
		return Answer{}, context.Cause(ctx)
	case <-s.closed:
		return Answer{}, ErrClosed
	}
	select {
	case a := <-c.answer:
		return a, nil
	case <-ctx.Done():
		s.abandon(c)
		return Answer{}, context.Cause(ctx)
	case <-s.closed:
		return Answer{}, ErrGone
	}
}

// abandon marks c answered, so that the runtime's late answer is refused as a second one.
func (s *Server) abandon(c *call) {
	s.mu.Lock()
	c.answered = true
	s.mu.Unlock()
}

// next hands the runtime its next invocation, waiting as long as it takes.
func (s *Server) next(w http.ResponseWriter, r *http.Request) {
	s.once.asked.Do(func() { close(s.asked) })
	s.mu.Lock()
	busy := s.current != nil && !s.current.answered
	s.mu.Unlock()
	if busy {
		refuse(w, http.StatusForbidden, "InvalidStateTransition", "the current invocation has no answer yet")
		return
	}
	var c *call
	select {
	case c = <-s.work:
	case <-r.Context().Done():
		return
	case <-s.closed:
		// The environment is gone: the connection drops, as when a sandbox ends.
		panic(http.ErrAbortHandler)
	}
	s.mu.Lock()
	s.current = c
	s.mu.Unlock()
	h := w.Header()
	h.Set(HeaderRequestID, c.inv.RequestID)
	h.Set(HeaderDeadline, strconv.FormatInt(c.inv.Deadline.UnixMilli(), 10))
	h.Set(HeaderFunctionARN, c.inv.FunctionARN)
	if c.inv.TraceID != "" {
		h.Set(HeaderTraceID, c.inv.TraceID)
	}
	h.Set("Content-Type", "application/json")
	_, _ = w.Write(c.inv.Payload)
}

// respond takes an invocation's response.
func (s *Server) respond(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxResponse+1))
	switch {
	case err != nil:
		refuse(w, http.StatusBadRequest, "InvalidRequest", err.Error())
	case len(body) > MaxResponse:
		// Lambda fails the invocation whose response is too large.
		if s.answer(w, r.PathValue("id"), Answer{Error: &FunctionError{Type: "Function.ResponseSizeTooLarge",
			Message: "the response is larger than " + strconv.Itoa(MaxResponse) + " bytes"}}) {
			refuse(w, http.StatusRequestEntityTooLarge, "RequestEntityTooLarge", "the response is larger than "+strconv.Itoa(MaxResponse)+" bytes")
		}
	default:
		if s.answer(w, r.PathValue("id"), Answer{Response: body}) {
			accepted(w)
		}
	}
}

// fail takes an invocation's error.
func (s *Server) fail(w http.ResponseWriter, r *http.Request) {
	fe := readError(r)
	if s.answer(w, r.PathValue("id"), Answer{Error: fe}) {
		accepted(w)
	}
}

// initError takes the error of a runtime that could not initialise; after its first /next
// it is refused, as Lambda does.
func (s *Server) initError(w http.ResponseWriter, r *http.Request) {
	select {
	case <-s.asked:
		refuse(w, http.StatusForbidden, "InvalidStateTransition", "the runtime has already initialised")
		return
	default:
	}
	select {
	case s.initEr <- readError(r):
	default: // one init error is enough to restart the runtime
	}
	accepted(w)
}

// answer delivers a's answer to the invocation id, once. It refuses an id it did not give
// out (400, InvalidRequestID) and a second answer (403, InvalidStateTransition), as the
// Runtime API does, and says whether the answer was taken.
func (s *Server) answer(w http.ResponseWriter, id string, a Answer) bool {
	s.mu.Lock()
	c := s.current
	known := c != nil && c.inv.RequestID == id
	again := known && c.answered
	if known && !again {
		c.answered = true
	}
	s.mu.Unlock()
	switch {
	case !known:
		refuse(w, http.StatusBadRequest, "InvalidRequestID", "invalid request ID")
		return false
	case again:
		refuse(w, http.StatusForbidden, "InvalidStateTransition", "the invocation already has an answer")
		return false
	}
	c.answer <- a
	return true
}

// readError reads an /error body; what is not the documented JSON is kept as the message.
func readError(r *http.Request) *FunctionError {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	fe := new(FunctionError)
	if json.Unmarshal(body, fe) != nil {
		fe = &FunctionError{Message: string(body)}
	}
	if fe.Type == "" {
		fe.Type = r.Header.Get(headerErrorType)
	}
	if fe.Type == "" {
		fe.Type = "Runtime.Unknown"
	}
	return fe
}

func accepted(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_, _ = io.WriteString(w, `{"status":"OK"}`)
}

// refuse answers as the Runtime API's ErrorResponse does.
func refuse(w http.ResponseWriter, status int, errType, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(FunctionError{Type: errType, Message: msg})
}
