package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/internal/testing/faultproxy"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// probe GETs http://addr/path and returns the status code and the JSON body's fields (0
// when nothing answered).
func probe(addr, path string) (int, map[string]string) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	body := map[string]string{}
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body
}

// scrape reads /metrics with the Prometheus text parser.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(data)))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, data)
	}
	return families
}

// value returns the value of the single series of family name (a counter, gauge, or a
// histogram's sample count).
func value(t *testing.T, families map[string]*dto.MetricFamily, name string) float64 {
	t.Helper()
	f, ok := families[name]
	if !ok || len(f.Metric) != 1 {
		t.Fatalf("metric %s: %v", name, f)
	}
	m := f.Metric[0]
	if l := m.GetLabel(); len(l) != 1 || l[0].GetName() != "queue" {
		t.Errorf("%s labels %v, want queue", name, l)
	}
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	t.Fatalf("metric %s has no value", name)
	return 0
}

// TestListenServesHealthReadinessAndMetrics: /readyz is 503 during slow startup checks, 200
// while receiving and 503 while draining; /healthz is 200 throughout; /metrics counts what
// the worker did; the server stops only after the drain.
func TestListenServesHealthReadinessAndMetrics(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	c := emu.Client()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 1})
	dir := t.TempDir()
	worker := filepath.Join(dir, "w.sh")
	script := "#!/bin/sh\ncase \"$Message\" in\nok) exit 0 ;;\nbad) exit 1 ;;\nslow) touch " + dir + "/slow; sleep 2 ;;\nesac\n"
	if err := os.WriteFile(worker, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	send(t, c, q.URL, "ok", "ok", "ok", "bad")
	// The startup checks read the queue's attributes: slow them down to see readiness wait.
	_, endpoint := faultproxy.Serve(t, emu.Endpoint, faultproxy.Config{Rules: []faultproxy.Rule{
		{Operations: []string{"GetQueueAttributes"}, Fault: faultproxy.Latency, Latency: 2 * time.Second, Rate: 1, For: 1}}})
	addr := freeAddr(t)
	p, stderr := listenBinary(t, emu, "--queue-url", q.URL, "--endpoint-url", endpoint, "--concurrency", "2", "--http-addr", addr, "--", worker)
	testenv.Eventually(t, "the server to answer", 10*time.Second, func() bool { code, _ := probe(addr, "/readyz"); return code != 0 }, stderr.String)
	if code, body := probe(addr, "/readyz"); code != 503 || body["reason"] != "startup checks under way" {
		t.Errorf("/readyz during the startup checks: %d %v", code, body)
	}
	if code, _ := probe(addr, "/healthz"); code != 200 {
		t.Errorf("/healthz during the startup checks: %d", code)
	}
	testenv.Eventually(t, "readiness", 10*time.Second, func() bool { code, _ := probe(addr, "/readyz"); return code == 200 }, stderr.String)
	testenv.Eventually(t, "the queue to drain", 30*time.Second, func() bool { return testenv.Depth(t, c, q.URL).Total() == 0 }, stderr.String)
	// A message leaves the queue before its delete's answer reaches watchbot, which counts it
	// then: the counters settle a moment after the queue is empty.
	var m map[string]*dto.MetricFamily
	testenv.Eventually(t, "the counters to settle", 10*time.Second, func() bool {
		m = scrape(t, addr)
		return value(t, m, "watchbot_messages_processed_total") == 3 && value(t, m, "watchbot_dead_lettered_total") == 1
	}, stderr.String)
	for name, want := range map[string]float64{
		"watchbot_messages_processed_total": 3,
		"watchbot_worker_errors_total":      1,
		"watchbot_dead_lettered_total":      1,
		"watchbot_messages_received_total":  4,
		"watchbot_worker_duration_seconds":  4,
		"watchbot_message_age_seconds":      4,
		"watchbot_worker_slots":             2,
		"watchbot_concurrency_limit":        2,
		"watchbot_braking":                  0,
	} {
		if got := value(t, m, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if got := value(t, m, "watchbot_last_receive_timestamp_seconds"); got < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Errorf("last receive at %v, want within the last minute", got)
	}
	for _, pm := range alarms.PrometheusMetrics {
		if _, ok := m[pm.Name]; !ok {
			t.Errorf("/metrics lacks %s", pm.Name)
		}
	}

	// Draining: not ready, still healthy, the running job counted, until the drain ends.
	send(t, c, q.URL, "slow")
	waitFile(t, filepath.Join(dir, "slow"))
	if got := value(t, scrape(t, addr), "watchbot_running_jobs"); got != 1 {
		t.Errorf("watchbot_running_jobs = %v during a job, want 1", got)
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	testenv.Eventually(t, "not ready while draining", 5*time.Second, func() bool {
		code, body := probe(addr, "/readyz")
		return code == 503 && body["reason"] == "draining: a stop was requested"
	}, stderr.String)
	if code, _ := probe(addr, "/healthz"); code != 200 {
		t.Errorf("/healthz while draining: %d", code)
	}
	if code := p.Wait(t, 60*time.Second, stderr.String); code != 0 {
		t.Fatalf("exit %d; logs:\n%s", code, stderr.String())
	}
	if got := value(t, m, "watchbot_messages_processed_total"); got != 3 {
		t.Errorf("processed %v", got)
	}
	if code, _ := probe(addr, "/healthz"); code != 0 {
		t.Errorf("the server still answers after exit: %d", code)
	}
}

// TestListenHealthzFollowsSQS: /healthz turns 503 once receives have failed for longer than
// --health-grace, with the reason, and 200 again once SQS answers. A message sent after each
// change of the faults ends the long poll under way, which would otherwise wait out its wait
// before a receive meets the change.
func TestListenHealthzFollowsSQS(t *testing.T) {
	t.Parallel()
	emu := testenv.SQS(t)
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	proxy, endpoint := faultproxy.Serve(t, emu.Endpoint, faultproxy.Config{})
	addr := freeAddr(t)
	p, stderr := listenBinary(t, emu, "--queue-url", q.URL, "--endpoint-url", endpoint, "--http-addr", addr, "--health-grace", "2s", "--", "true")
	testenv.Eventually(t, "readiness", 15*time.Second, func() bool { code, _ := probe(addr, "/readyz"); return code == 200 }, stderr.String)
	if err := proxy.SetRules([]faultproxy.Rule{{Operations: []string{"ReceiveMessage"}, Fault: faultproxy.ServerError, Rate: 1}}); err != nil {
		t.Fatal(err)
	}
	c := emu.Client()
	send(t, c, q.URL, "ends the poll before the outage")
	var reason string
	testenv.Eventually(t, "/healthz to report the failing receives", 60*time.Second, func() bool {
		code, body := probe(addr, "/healthz")
		reason = body["reason"]
		return code == 503
	}, stderr.String)
	if !strings.HasPrefix(reason, "receives have failed for ") {
		t.Errorf("reason %q", reason)
	}
	if err := proxy.SetRules(nil); err != nil {
		t.Fatal(err)
	}
	send(t, c, q.URL, "ends the first poll after it")
	testenv.Eventually(t, "/healthz to recover", 60*time.Second, func() bool { code, _ := probe(addr, "/healthz"); return code == 200 }, stderr.String)
	testenv.Eventually(t, "both messages to be done", 30*time.Second, func() bool { return testenv.Depth(t, c, q.URL).Total() == 0 }, stderr.String)
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	if code := p.Wait(t, 60*time.Second, stderr.String); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

func TestListenRefusesATakenHTTPAddr(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	code, _, errOut := runCLI(t, nil, "listen", "--queue-url", "http://127.0.0.1:1/000000000000/q", "--http-addr", l.Addr().String(), "--", "true")
	if code != 2 || !strings.Contains(errOut, "--http-addr") || !strings.Contains(errOut, "address already in use") {
		t.Errorf("exit %d, stderr %q; want 2 naming --http-addr", code, errOut)
	}
}
