package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// healthServer serves /healthz with handler on the loopback and returns its address.
func healthServer(t *testing.T, handler http.HandlerFunc) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", handler)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

func answer(code int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	}
}

func TestHealth(t *testing.T) {
	healthy := healthServer(t, answer(http.StatusOK, `{"status":"ok"}`+"\n"))
	_, port, _ := net.SplitHostPort(healthy)
	unhealthy := healthServer(t, answer(http.StatusServiceUnavailable,
		`{"status":"unhealthy","reason":"receives have failed for 1m5s: operation error SQS: ReceiveMessage, dial tcp: i/o timeout"}`+"\n"))
	multiline := healthServer(t, answer(http.StatusServiceUnavailable, `{"status":"unhealthy","reason":"first\nsecond\r\n third"}`))
	notJSON := healthServer(t, answer(http.StatusServiceUnavailable, "<html>busy</html>"))
	notFound := healthServer(t, answer(http.StatusNotFound, "404 page not found\n"))
	hanging := healthServer(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	refused := freeAddr(t)

	for _, c := range []struct {
		name   string
		args   []string
		code   int
		stderr string // the whole of stderr when code is 0, else a part of its one line
	}{
		{"healthy", []string{"--http-addr", healthy}, 0, ""},
		{"every interface, empty host", []string{"--http-addr", ":" + port}, 0, ""},
		{"every interface, 0.0.0.0", []string{"--http-addr", "0.0.0.0:" + port}, 0, ""},
		{"unhealthy, with listen's reason", []string{"--http-addr", unhealthy}, 1,
			"watchbot: unhealthy: receives have failed for 1m5s: operation error SQS: ReceiveMessage, dial tcp: i/o timeout\n"},
		{"a reason on several lines", []string{"--http-addr", multiline}, 1, "watchbot: unhealthy: first second third\n"},
		{"503 without a reason", []string{"--http-addr", notJSON}, 1, "answered 503 Service Unavailable"},
		{"unexpected status", []string{"--http-addr", notFound}, 1, "GET http://" + notFound + "/healthz answered 404 Not Found"},
		{"hanging", []string{"--http-addr", hanging, "--timeout", "200ms"}, 1, "GET http://" + hanging + "/healthz: no answer within 200ms"},
		{"refused", []string{"--http-addr", refused}, 1, "connection refused"},
		{"unknown flag", []string{"--port", "9090"}, 2, "watchbot health has no flag --port"},
		{"address without a port", []string{"--http-addr", "127.0.0.1"}, 2, `--http-addr ("127.0.0.1") must be HOST:PORT`},
		{"port out of range", []string{"--http-addr", ":70000"}, 2, "must have a port from 1 to 65535"},
		{"timeout 0", []string{"--http-addr", healthy, "--timeout", "0"}, 2, "--timeout (0s) must be positive"},
		{"timeout not a duration", []string{"--timeout", "soon"}, 2, "timeout"},
		{"an argument", []string{"--http-addr", healthy, "now"}, 2, `health takes no arguments, but got "now"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			code, stdout, stderr := runCLI(t, nil, append([]string{"health"}, c.args...)...)
			if code != c.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, c.code, stderr)
			}
			if stdout != "" {
				t.Errorf("stdout %q", stdout)
			}
			switch {
			case c.code == 0 && stderr != "":
				t.Errorf("stderr %q, want nothing", stderr)
			case c.code != 0 && (!strings.HasPrefix(stderr, "watchbot: ") || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, c.stderr)):
				t.Errorf("stderr %q, want one line with %q", stderr, c.stderr)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("took %v", d)
			}
		})
	}
}

// TestHealthAddressFromEnvironment checks that health reads listen's WATCHBOT_HTTP_ADDR, and
// that --http-addr wins over it.
func TestHealthAddressFromEnvironment(t *testing.T) {
	healthy := healthServer(t, answer(http.StatusOK, `{"status":"ok"}`))
	t.Setenv("WATCHBOT_HTTP_ADDR", healthy)
	if code, _, stderr := runCLI(t, nil, "health"); code != 0 {
		t.Errorf("WATCHBOT_HTTP_ADDR=%s: exit %d: %s", healthy, code, stderr)
	}
	refused := freeAddr(t)
	if code, _, stderr := runCLI(t, nil, "health", "--http-addr", refused); code != 1 || !strings.Contains(stderr, refused) {
		t.Errorf("--http-addr %s over the environment: exit %d: %s", refused, code, stderr)
	}
}

// TestHealthIPv6Loopback checks that [::]:PORT, listen on every interface, is asked on [::1].
func TestHealthIPv6Loopback(t *testing.T) {
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	srv := httptest.NewUnstartedServer(answer(http.StatusOK, `{"status":"ok"}`))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	defer srv.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	if code, _, stderr := runCLI(t, nil, "health", "--http-addr", "[::]:"+port); code != 0 {
		t.Errorf("[::]:%s: exit %d: %s", port, code, stderr)
	}
}

func TestHealthURL(t *testing.T) {
	for _, c := range []struct{ addr, want string }{
		{"127.0.0.1:9090", "http://127.0.0.1:9090/healthz"},
		{":9090", "http://127.0.0.1:9090/healthz"},
		{"0.0.0.0:9090", "http://127.0.0.1:9090/healthz"},
		{"[::]:9090", "http://[::1]:9090/healthz"},
		{"[::1]:9090", "http://[::1]:9090/healthz"},
		{"localhost:9090", "http://localhost:9090/healthz"},
		{"10.0.0.5:9464", "http://10.0.0.5:9464/healthz"},
	} {
		if got, err := healthURL(c.addr); err != nil || got != c.want {
			t.Errorf("healthURL(%q) = %q, %v; want %q", c.addr, got, err, c.want)
		}
	}
	for _, addr := range []string{"", "9090", "127.0.0.1", "127.0.0.1:0", "127.0.0.1:http", "[::1:9090"} {
		if got, err := healthURL(addr); err == nil {
			t.Errorf("healthURL(%q) = %q, want an error", addr, got)
		}
	}
}
