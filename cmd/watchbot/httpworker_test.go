package main

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// posted is one request the test application took.
type posted struct {
	at     time.Time
	path   string
	header http.Header
	body   []byte
}

// application is an HTTP worker for the tests: it records every request and answers by the
// body's first word (see serve).
type application struct {
	mu       sync.Mutex
	requests []posted
	release  chan struct{} // closed to let "hold" requests answer
}

func (a *application) byBody(prefix string) []posted {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []posted
	for _, p := range a.requests {
		if bytes.HasPrefix(p.body, []byte(prefix)) {
			out = append(out, p)
		}
	}
	return out
}

func (a *application) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	a.mu.Lock()
	// First post of this message: a pause reruns a message in place, on the same receive,
	// so the receive count cannot tell.
	first := true
	for _, p := range a.requests {
		if p.header.Get("X-Aws-Sqsd-Msgid") == r.Header.Get("X-Aws-Sqsd-Msgid") {
			first = false
			break
		}
	}
	a.requests = append(a.requests, posted{at: time.Now(), path: r.URL.Path, header: r.Header.Clone(), body: body})
	a.mu.Unlock()
	switch word, _, _ := strings.Cut(string(body), " "); word {
	case "ok", "scheduled", "big":
	case "retry-after": // busy once, asking for a pause of 1 s
		if first {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	case "fail":
		w.WriteHeader(http.StatusInternalServerError)
	case "bad-request":
		w.WriteHeader(http.StatusBadRequest)
	case "dead-letter-body":
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"action":"dead-letter","reason":"unknown customer"}`))
	case "ack-header": // a failure status, overridden by the directive header
		w.Header().Set("X-Watchbot-Result", `{"action":"ack"}`)
		w.WriteHeader(http.StatusInternalServerError)
	case "slow": // past --http-timeout once
		if first {
			time.Sleep(3 * time.Second)
		}
	case "close": // the connection cut once, no answer
		if first {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
	case "hold":
		<-a.release
	}
}

// serveApplication serves a on addr (or a new loopback port) and returns its address.
func serveApplication(t *testing.T, a *application, addr string) string {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: a}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().String()
}

// TestHTTPWorker runs the binary against fauxqs and an application over HTTP: sqsd's
// headers, a scheduled task's path, each status's outcome, Retry-After, a timeout, a cut
// connection, a 1 MiB body, and a drain on SIGTERM while a request is in flight.
func TestHTTPWorker(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	c := emu.Client()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 2})
	app := &application{release: make(chan struct{})}
	addr := serveApplication(t, app, "")
	sendWith := func(body string, attrs map[string]string) {
		t.Helper()
		in := &sqs.SendMessageInput{QueueUrl: aws.String(q.URL), MessageBody: aws.String(body), MessageAttributes: map[string]sqstypes.MessageAttributeValue{}}
		for k, v := range attrs {
			in.MessageAttributes[k] = sqstypes.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
		}
		if _, err := c.SendMessage(t.Context(), in); err != nil {
			t.Fatal(err)
		}
	}
	big := "big " + strings.Repeat("x", 1<<20-1024)
	sendWith("ok 1", map[string]string{"customer": "acme"})
	sendWith("scheduled", map[string]string{"watchbot-task-name": "nightly", "watchbot-scheduled-at": "2026-11-23T02:00:00Z", "watchbot-path": "/tasks/nightly"})
	for _, b := range []string{"retry-after", "fail", "bad-request", "dead-letter-body", "ack-header", "slow", "close", big} {
		sendWith(b, nil)
	}
	p, stderr := listenBinary(t, emu, "--queue-url", q.URL, "--concurrency", "4", "--backoff-base", "1s",
		"--http-worker", "http://"+addr+"/work", "--http-timeout", "1s", "--http-content-type", "text/plain")
	testenv.Eventually(t, "the queue to empty", 60*time.Second, func() bool { return testenv.Depth(t, c, q.URL).Total() == 0 }, stderr.String)

	ok := app.byBody("ok 1")
	if len(ok) != 1 {
		t.Fatalf("ok: %d requests", len(ok))
	}
	h := ok[0].header
	for name, want := range map[string]string{
		"Content-Type": "text/plain", "X-Aws-Sqsd-Receive-Count": "1", "X-Aws-Sqsd-Queue": q.Name,
		"X-Aws-Sqsd-Attr-Customer": "acme", "User-Agent": "watchbot", "X-Watchbot-Attempt": "1",
	} {
		if got := h.Get(name); got != want {
			t.Errorf("header %s = %q, want %q", name, got, want)
		}
	}
	if ok[0].path != "/work" || h.Get("X-Aws-Sqsd-Msgid") == "" {
		t.Errorf("path %q, message id %q", ok[0].path, h.Get("X-Aws-Sqsd-Msgid"))
	}
	for _, name := range []string{"X-Aws-Sqsd-First-Received-At", "X-Aws-Sqsd-Sent-At"} {
		if _, err := time.Parse(time.RFC3339, h.Get(name)); err != nil {
			t.Errorf("header %s = %q: %v", name, h.Get(name), err)
		}
	}
	if s := app.byBody("scheduled"); len(s) != 1 || s[0].path != "/tasks/nightly" || s[0].header.Get("X-Aws-Sqsd-Taskname") != "nightly" ||
		s[0].header.Get("X-Aws-Sqsd-Scheduled-At") != "2026-11-23T02:00:00Z" || s[0].header.Get("X-Aws-Sqsd-Path") != "/tasks/nightly" {
		t.Errorf("scheduled task: %+v", s)
	}
	// A 503 with Retry-After is a pause: the message runs again once it ends, on the same
	// receive, so its receive count does not rise.
	if r := app.byBody("retry-after"); len(r) != 2 || r[1].at.Sub(r[0].at) < time.Second {
		t.Errorf("retry-after: %d requests; want a second one at least 1 s after the first", len(r))
	} else if n := r[1].header.Get("X-Aws-Sqsd-Receive-Count"); n != "1" {
		t.Errorf("retry-after: the rerun after the pause has receive count %s, want 1", n)
	}
	for body, want := range map[string]int{"fail": 2, "bad-request": 2, "dead-letter-body": 1, "ack-header": 1, "slow": 2, "close": 2, "big": 1} {
		if got := len(app.byBody(body)); got != want {
			t.Errorf("%s: %d requests, want %d", body, got, want)
		}
	}
	if b := app.byBody("big"); len(b) == 1 && string(b[0].body) != big {
		t.Errorf("the 1 MiB body arrived as %d bytes", len(b[0].body))
	}
	// Dead-lettered: the two failures that used their attempts, and the one the body asked for.
	if n := testenv.Depth(t, c, q.DLQURL).Total(); n != 3 {
		t.Errorf("%d messages in the DLQ, want 3 (fail, bad-request, dead-letter-body)", n)
	}
	for _, want := range []string{`"status":500`, `"status":400`, "no answer within --http-timeout"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("no %s in the log", want)
		}
	}

	// A stop while a request is in flight: the drain waits for its answer, then deletes it.
	sendWith("hold", nil)
	testenv.Eventually(t, "the held request", 30*time.Second, func() bool { return len(app.byBody("hold")) == 1 }, stderr.String)
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	time.Sleep(500 * time.Millisecond)
	close(app.release)
	if code := p.Wait(t, 60*time.Second, stderr.String); code != 0 {
		t.Fatalf("exit %d; logs:\n%s", code, stderr.String())
	}
	if n := testenv.Depth(t, c, q.URL).Total(); n != 0 {
		t.Errorf("%d messages left after the drain: the held request's message was not deleted", n)
	}
}

// TestHTTPWorkerStartup: receiving waits for an application that comes up late; one that
// never does fails the start, exit 2 naming the flag.
func TestHTTPWorkerStartup(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	c := emu.Client()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 2})
	addr := freeAddr(t)

	code, _, errOut := runCLIEnv(t, emu, "listen", "--queue-url", q.URL, "--http-worker", "http://"+addr+"/", "--http-startup-timeout", "1s")
	if code != 2 || !strings.Contains(errOut, "--http-worker") || !strings.Contains(errOut, "did not accept requests within --http-startup-timeout") {
		t.Fatalf("exit %d, stderr %q; want 2 naming --http-worker", code, errOut)
	}

	send(t, c, q.URL, "ok late")
	app := &application{release: make(chan struct{})}
	p, stderr := listenBinary(t, emu, "--queue-url", q.URL, "--http-worker", "http://"+addr+"/", "--http-health-path", "/healthz")
	testenv.Eventually(t, "the wait to be logged", 30*time.Second, func() bool {
		return testenv.Logged(stderr.String(), "level", "INFO", "health_path", "/healthz", "error", "*")
	}, stderr.String)
	time.Sleep(time.Second)
	if n := len(app.byBody("")); n != 0 {
		t.Fatalf("%d requests before the application was up", n)
	}
	serveApplication(t, app, addr)
	testenv.Eventually(t, "the message to be processed", 30*time.Second, func() bool { return testenv.Depth(t, c, q.URL).Total() == 0 }, stderr.String)
	if got := app.byBody(""); len(got) != 2 || got[0].path != "/healthz" || got[1].path != "/" {
		t.Errorf("requests %v, want the health check, then the message", got)
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	if code := p.Wait(t, 60*time.Second, stderr.String); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// runCLIEnv runs the built binary with args against emu and returns its exit code and output.
func runCLIEnv(t *testing.T, emu *testenv.Emulator, args ...string) (int, string, string) {
	t.Helper()
	cmd := emu.Watchbot(t, args...)
	var stdout, stderr testenv.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	p := testenv.Spawn(t, cmd)
	code := p.Wait(t, 60*time.Second, stderr.String)
	return code, stdout.String(), stderr.String()
}
