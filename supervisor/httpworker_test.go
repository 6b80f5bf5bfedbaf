package supervisor

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

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
	w := newHTTPWorker(cfg, "http://127.0.0.1:1/000000000000/jobs", 2)
	jobs := []*job{
		{msg: message{ID: "a", Body: "one"}, attempt: 1},
		{msg: message{ID: "b", Body: "two"}, attempt: 2},
		{msg: message{ID: "c", Body: "three"}, attempt: 1},
	}
	run, directives := w.post(t.Context(), jobs, true, 1, nil)
	if run.End != endExited || run.ExitCode != 0 {
		t.Fatalf("run %+v", run)
	}
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
		wantEnd    runEnd
		wantAction string // the directive's, "" for none
		wantPause  time.Duration
	}{
		{name: "200", status: 200, wantEnd: endExited},
		{name: "204", status: 204, wantEnd: endExited},
		{name: "500", status: 500, wantEnd: endHTTPStatus},
		{name: "404", status: 404, wantEnd: endHTTPStatus},
		{name: "302 is not followed", status: 302, header: map[string]string{"Location": "/elsewhere"}, wantEnd: endHTTPStatus},
		{name: "503 without Retry-After", status: 503, wantEnd: endHTTPStatus},
		{name: "429 with Retry-After is a pause", status: 429, header: map[string]string{"Retry-After": "5"}, wantEnd: endExited, wantPause: 5 * time.Second},
		{name: "503 with Retry-After is a pause", status: 503, header: map[string]string{"Retry-After": "120"}, wantEnd: endExited, wantPause: 2 * time.Minute},
		{name: "429 with a directive and Retry-After", status: 429, header: map[string]string{"Retry-After": "3", "X-Watchbot-Result": `{"action":"ack"}`}, wantEnd: endExited, wantAction: "ack", wantPause: 3 * time.Second},
		{name: "JSON body pause", status: 200, header: map[string]string{"Content-Type": "application/json"}, body: `{"pause":"30s"}`, wantEnd: endExited, wantPause: 30 * time.Second},
		{name: "JSON body directive", status: 200, header: map[string]string{"Content-Type": "application/json"}, body: `{"action":"dead-letter","reason":"x"}`, wantEnd: endExited, wantAction: "dead-letter"},
		{name: "JSON body without action", status: 200, header: map[string]string{"Content-Type": "application/json"}, body: `{"ok":true}`, wantEnd: endExited},
		{name: "header directive", status: 500, header: map[string]string{"X-Watchbot-Result": `{"action":"ack"}`}, wantEnd: endHTTPStatus, wantAction: "ack"},
		{name: "malformed header directive", status: 200, header: map[string]string{"X-Watchbot-Result": `{"action":"explode"}`}, wantEnd: endExited},
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
			run, directives := newHTTPWorker(cfg, "http://127.0.0.1:1/000000000000/jobs", 1).post(t.Context(), []*job{{msg: message{ID: "m", Raw: "x"}}}, false, 1, nil)
			if run.End != tc.wantEnd {
				t.Errorf("end %v, want %v (run %+v)", run.End, tc.wantEnd, run)
			}
			got, pause := "", time.Duration(0)
			if d := directives["m"]; d != nil {
				got, pause = d.Action, d.pause
			}
			if got != tc.wantAction || pause != tc.wantPause {
				t.Errorf("directive %q pausing %v, want %q pausing %v", got, pause, tc.wantAction, tc.wantPause)
			}
			// The outcome a failure status gets, when no directive overrides it.
			if tc.wantEnd == endHTTPStatus && tc.wantAction == "" {
				if o := outcomeFor(result{End: run.End, ExitCode: run.ExitCode, Attempt: 1, MaxAttempts: 3}); o.Action != actRetry || !o.WorkerError {
					t.Errorf("outcome %+v, want a retry with backoff counted as a worker error", o)
				}
			}
		})
	}
}

// TestHTTPWorkerPostsWhatSQSDelivered: an SNS notification is POSTed as received, and its
// headers carry the SQS message's attributes, not the unwrapped notification's.
func TestHTTPWorkerPostsWhatSQSDelivered(t *testing.T) {
	var body string
	var header http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		body, header = string(b), r.Header.Clone()
	}))
	defer srv.Close()
	envelope := `{"Type":"Notification","MessageId":"n1","TopicArn":"arn:aws:sns:us-east-1:000000000000:t","Message":"inner","MessageAttributes":{"sns-only":{"Type":"String","Value":"x"}}}`
	msg := parseMessage(types.Message{MessageId: aws.String("m"), Body: aws.String(envelope),
		MessageAttributes: map[string]types.MessageAttributeValue{"tenant": {DataType: aws.String("String"), StringValue: aws.String("acme")}}})
	if msg.Body != "inner" {
		t.Fatalf("the envelope was not unwrapped for command workers: %q", msg.Body)
	}
	cfg := DefaultHTTPWorker()
	cfg.URL = srv.URL
	if run, _ := newHTTPWorker(cfg, "http://127.0.0.1:1/000000000000/jobs", 1).post(t.Context(), []*job{{msg: msg}}, false, 1, nil); run.End != endExited {
		t.Fatalf("run %+v", run)
	}
	if body != envelope {
		t.Errorf("body %q, want the envelope as received", body)
	}
	if header.Get("X-Aws-Sqsd-Attr-Tenant") != "acme" || header.Get("X-Aws-Sqsd-Attr-Sns-Only") != "" {
		t.Errorf("attribute headers %v", header)
	}
	if _, ok := header["X-Aws-Sqsd-Group-Id"]; ok {
		t.Errorf("a message without a group id got X-Aws-Sqsd-Group-Id %q", header.Get("X-Aws-Sqsd-Group-Id"))
	}
}

// TestHTTPWorkerGroupHeader: the MessageGroupId (a fair queue's tenant on a standard queue)
// reaches an HTTP worker as X-Aws-Sqsd-Group-Id, as WATCHBOT_GROUP_ID reaches a command.
func TestHTTPWorkerGroupHeader(t *testing.T) {
	var header http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { header = r.Header.Clone() }))
	defer srv.Close()
	msg := parseMessage(types.Message{MessageId: aws.String("m"), Body: aws.String("b"),
		Attributes: map[string]string{"MessageGroupId": "tenant-a"}})
	cfg := DefaultHTTPWorker()
	cfg.URL = srv.URL
	if run, _ := newHTTPWorker(cfg, "http://127.0.0.1:1/000000000000/jobs", 1).post(t.Context(), []*job{{msg: msg}}, false, 1, nil); run.End != endExited {
		t.Fatalf("run %+v", run)
	}
	if g := header.Get("X-Aws-Sqsd-Group-Id"); g != "tenant-a" {
		t.Errorf("X-Aws-Sqsd-Group-Id = %q, want tenant-a", g)
	}
}
