package worker

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// post runs job, of a queue named jobs, on an HTTP worker of cfg.
func post(t *testing.T, cfg HTTPWorker, job Job) Result {
	t.Helper()
	job.QueueURL, job.Log = "http://127.0.0.1:1/000000000000/jobs", slog.New(slog.DiscardHandler)
	return NewHTTP(cfg, 2, 0, nil, job.Log).Run(t.Context(), job)
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"120", 2 * time.Minute, true},
		{"0", 0, true},
		{"Mon, 23 Nov 2026 12:00:30 GMT", 30 * time.Second, true},
		{"Mon, 23 Nov 2026 11:00:00 GMT", 0, true}, // in the past: at once
		{"", 0, false},
		{"-1", 0, false},
		{"soon", 0, false},
	} {
		got, ok := retryAfter(tc.in, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("retryAfter(%q) = %v %v, want %v %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// TestHTTPWorkerPostsABatch: a batch goes as a JSON array of the batch contract's objects,
// and its answer's array of results decides each message; one without a result follows the
// status.
func TestHTTPWorkerPostsABatch(t *testing.T) {
	var got []batchLine
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &got); err != nil {
			t.Errorf("batch body is not a JSON array: %v\n%s", err, body)
		}
		if r.Header.Get("X-Watchbot-Batch-Size") != "3" {
			t.Errorf("X-Watchbot-Batch-Size = %q", r.Header.Get("X-Watchbot-Batch-Size"))
		}
		_, _ = w.Write([]byte(`[{"id":"a","action":"ack"},{"id":"b","action":"retry","delaySeconds":7}]`))
	}))
	defer srv.Close()
	cfg := DefaultHTTPWorker()
	cfg.URL = srv.URL
	run := post(t, cfg, Job{Batch: true, Messages: []Message{
		{ID: "a", Body: "one", Attempt: 1},
		{ID: "b", Body: "two", Attempt: 2},
		{ID: "c", Body: "three", Attempt: 1},
	}})
	if run.End != Succeeded || run.Code != 0 {
		t.Fatalf("run %+v", run)
	}
	directives := run.Directives
	if len(got) != 3 || got[1].ID != "b" || got[1].Body != "two" || got[1].Attempt != 2 {
		t.Errorf("posted %+v", got)
	}
	if directives["a"].Action != "ack" || directives["b"].Action != "retry" || *directives["b"].DelaySeconds != 7 || directives["c"] != nil {
		t.Errorf("directives %+v", directives)
	}
}

func TestHTTPWorkerOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name       string
		status     int
		header     map[string]string
		body       string
		wantEnd    End
		wantAction string // the directive's, "" for none
		wantPause  time.Duration
	}{
		{name: "200", status: 200, wantEnd: Succeeded},
		{name: "204", status: 204, wantEnd: Succeeded},
		{name: "500", status: 500, wantEnd: Failed},
		{name: "404", status: 404, wantEnd: Failed},
		{name: "302 is not followed", status: 302, header: map[string]string{"Location": "/elsewhere"}, wantEnd: Failed},
		{name: "503 without Retry-After", status: 503, wantEnd: Failed},
		{name: "429 with Retry-After is a pause", status: 429, header: map[string]string{"Retry-After": "5"}, wantEnd: Succeeded, wantPause: 5 * time.Second},
		{name: "503 with Retry-After is a pause", status: 503, header: map[string]string{"Retry-After": "120"}, wantEnd: Succeeded, wantPause: 2 * time.Minute},
		{name: "429 with a directive and Retry-After", status: 429, header: map[string]string{"Retry-After": "3", "X-Watchbot-Result": `{"action":"ack"}`}, wantEnd: Succeeded, wantAction: "ack", wantPause: 3 * time.Second},
		{name: "JSON body pause", status: 200, header: map[string]string{"Content-Type": "application/json"}, body: `{"pause":"30s"}`, wantEnd: Succeeded, wantPause: 30 * time.Second},
		{name: "JSON body directive", status: 200, header: map[string]string{"Content-Type": "application/json"}, body: `{"action":"dead-letter","reason":"x"}`, wantEnd: Succeeded, wantAction: "dead-letter"},
		{name: "JSON body without action", status: 200, header: map[string]string{"Content-Type": "application/json"}, body: `{"ok":true}`, wantEnd: Succeeded},
		{name: "header directive", status: 500, header: map[string]string{"X-Watchbot-Result": `{"action":"ack"}`}, wantEnd: Failed, wantAction: "ack"},
		{name: "malformed header directive", status: 200, header: map[string]string{"X-Watchbot-Result": `{"action":"explode"}`}, wantEnd: Succeeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k, v := range tc.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			cfg := DefaultHTTPWorker()
			cfg.URL = srv.URL
			run := post(t, cfg, Job{Messages: []Message{{ID: "m", Raw: "x"}}})
			if run.End != tc.wantEnd || run.End == Failed && run.Code != tc.status {
				t.Errorf("end %v, want %v (run %+v)", run.End, tc.wantEnd, run)
			}
			got, pause := "", time.Duration(0)
			if d := run.Directives["m"]; d != nil {
				got, pause = d.Action, d.PauseFor
			}
			if got != tc.wantAction || pause != tc.wantPause {
				t.Errorf("directive %q pausing %v, want %q pausing %v", got, pause, tc.wantAction, tc.wantPause)
			}
		})
	}
}

// TestHTTPWorkerGroupHeader: the MessageGroupId (a fair queue's tenant on a standard queue)
// reaches an HTTP worker as X-Aws-Sqsd-Group-Id, as WATCHBOT_GROUP_ID reaches a command.
func TestHTTPWorkerGroupHeader(t *testing.T) {
	var header http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { header = r.Header.Clone() }))
	defer srv.Close()
	cfg := DefaultHTTPWorker()
	cfg.URL = srv.URL
	if run := post(t, cfg, Job{Messages: []Message{{ID: "m", Raw: "b", Body: "b", GroupID: "tenant-a"}}}); run.End != Succeeded {
		t.Fatalf("run %+v", run)
	}
	if g := header.Get("X-Aws-Sqsd-Group-Id"); g != "tenant-a" {
		t.Errorf("X-Aws-Sqsd-Group-Id = %q, want tenant-a", g)
	}
}

// TestHTTPWorkerFailureLogNamesTheStatus: the line of a failure status carries the status and
// no error attribute, which would have no error to name.
func TestHTTPWorkerFailureLogNamesTheStatus(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(502) }))
	defer srv.Close()
	cfg := DefaultHTTPWorker()
	cfg.URL = srv.URL
	var log bytes.Buffer
	job := Job{QueueURL: "http://127.0.0.1:1/000000000000/jobs", Messages: []Message{{ID: "m", Raw: "x"}},
		Log: slog.New(slog.NewJSONHandler(&log, nil))}
	if run := NewHTTP(cfg, 1, 0, nil, job.Log).Run(t.Context(), job); run.End != Failed || run.Code != 502 {
		t.Fatalf("run %+v, want a failure with status 502", run)
	}
	if !testenv.Logged(log.String(), "level", "WARN", "status", "502") || testenv.Logged(log.String(), "error", "*") {
		t.Errorf("want a warning with status 502 and no error attribute:\n%s", log.String())
	}
}
