package alarms

import (
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	"github.com/aws/smithy-go/encoding/cbor"
	"github.com/google/go-cmp/cmp"
)

// received is one datum as the CloudWatch endpoint decoded it.
type received struct {
	Name       string
	Unit       string
	Dimensions []Dimension
	Values     []float64
	Counts     []float64
	Statistic  *stat
	Timestamp  time.Time
}

// putRequest is one PutMetricData request as decoded.
type putRequest struct {
	Namespace string
	Data      []received
	Bytes     int // uncompressed body size
}

// cloudWatchServer is a CloudWatch endpoint on 127.0.0.1 that decodes the Smithy RPC v2 CBOR
// requests the SDK sends. respond decides each answer (attempt counts from 1); nil accepts.
type cloudWatchServer struct {
	t       *testing.T
	mu      sync.Mutex
	attempt int
	puts    []putRequest
	respond func(attempt int, w http.ResponseWriter) bool // true if it answered
}

func newCloudWatchServer(t *testing.T) (*cloudWatchServer, *httptest.Server) {
	s := &cloudWatchServer{t: t}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, srv
}

func (s *cloudWatchServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t := s.t
	if r.Method != http.MethodPost || r.URL.Path != "/service/GraniteServiceVersion20100801/operation/PutMetricData" {
		t.Errorf("request %s %s", r.Method, r.URL.Path)
	}
	if got := r.Header.Get("Smithy-Protocol"); got != "rpc-v2-cbor" {
		t.Errorf("smithy-protocol header %q", got)
	}
	if got := r.Header.Get("Content-Type"); got != "application/cbor" {
		t.Errorf("content-type %q", got)
	}
	if !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 Credential=AKIDTEST/") {
		t.Errorf("request not signed with the static credentials: %q", r.Header.Get("Authorization"))
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			t.Errorf("gzip body: %v", err)
			return
		}
		body = zr
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		t.Errorf("read body: %v", err)
		return
	}

	s.mu.Lock()
	s.attempt++
	attempt, respond := s.attempt, s.respond
	s.mu.Unlock()
	if respond != nil && respond(attempt, w) {
		return
	}
	put, err := decodePut(raw)
	if err != nil {
		t.Errorf("decode PutMetricData: %v", err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.puts = append(s.puts, put)
	s.mu.Unlock()
	w.Header().Set("Smithy-Protocol", "rpc-v2-cbor")
	w.Header().Set("Content-Type", "application/cbor")
	w.Write(cbor.Encode(cbor.Map{}))
}

func (s *cloudWatchServer) requests() []putRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]putRequest(nil), s.puts...)
}

func (s *cloudWatchServer) attempts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attempt
}

// throttle answers as CloudWatch does when a caller exceeds its request rate.
func throttle(w http.ResponseWriter) {
	w.Header().Set("Smithy-Protocol", "rpc-v2-cbor")
	w.Header().Set("Content-Type", "application/cbor")
	w.WriteHeader(http.StatusBadRequest)
	w.Write(cbor.Encode(cbor.Map{
		"__type":  cbor.String("com.amazonaws.cloudwatch#ThrottlingException"),
		"message": cbor.String("Rate exceeded"),
	}))
}

func decodePut(raw []byte) (putRequest, error) {
	v, err := cbor.Decode(raw)
	if err != nil {
		return putRequest{}, err
	}
	in, ok := v.(cbor.Map)
	if !ok {
		return putRequest{}, fmt.Errorf("body is %T, want a map", v)
	}
	put := putRequest{Bytes: len(raw)}
	put.Namespace, err = asString(in["Namespace"])
	if err != nil {
		return put, fmt.Errorf("Namespace: %w", err)
	}
	data, _ := in["MetricData"].(cbor.List)
	for _, dv := range data {
		dm, _ := dv.(cbor.Map)
		var r received
		if r.Name, err = asString(dm["MetricName"]); err != nil {
			return put, fmt.Errorf("MetricName: %w", err)
		}
		if dm["Unit"] != nil {
			if r.Unit, err = asString(dm["Unit"]); err != nil {
				return put, fmt.Errorf("Unit: %w", err)
			}
		}
		if dm["Timestamp"] != nil {
			if r.Timestamp, err = cbor.AsTime(dm["Timestamp"]); err != nil {
				return put, fmt.Errorf("Timestamp: %w", err)
			}
		}
		dims, _ := dm["Dimensions"].(cbor.List)
		for _, d := range dims {
			dmap, _ := d.(cbor.Map)
			name, err1 := asString(dmap["Name"])
			value, err2 := asString(dmap["Value"])
			if err1 != nil || err2 != nil {
				return put, fmt.Errorf("dimension %v", d)
			}
			r.Dimensions = append(r.Dimensions, Dimension{Name: name, Value: value})
		}
		if r.Values, err = asFloats(dm["Values"]); err != nil {
			return put, fmt.Errorf("Values: %w", err)
		}
		if r.Counts, err = asFloats(dm["Counts"]); err != nil {
			return put, fmt.Errorf("Counts: %w", err)
		}
		if sv, ok := dm["StatisticValues"].(cbor.Map); ok {
			var st stat
			for key, dst := range map[string]*float64{"SampleCount": &st.Samples, "Sum": &st.Sum, "Minimum": &st.Min, "Maximum": &st.Max} {
				if *dst, err = cbor.AsFloat64(sv[key]); err != nil {
					return put, fmt.Errorf("StatisticValues.%s: %w", key, err)
				}
			}
			r.Statistic = &st
		}
		put.Data = append(put.Data, r)
	}
	return put, nil
}

func asString(v cbor.Value) (string, error) {
	s, ok := v.(cbor.String)
	if !ok {
		return "", fmt.Errorf("%T, want a string", v)
	}
	return string(s), nil
}

func asFloats(v cbor.Value) ([]float64, error) {
	if v == nil {
		return nil, nil
	}
	list, ok := v.(cbor.List)
	if !ok {
		return nil, fmt.Errorf("%T, want a list", v)
	}
	out := make([]float64, len(list))
	for i, x := range list {
		f, err := cbor.AsFloat64(x)
		if err != nil {
			return nil, err
		}
		out[i] = f
	}
	return out, nil
}

// newCloudWatchClient is the real SDK client, pointed at url, retrying up to attempts times
// with a 1 ms backoff so tests do not wait for the SDK's jittered delays.
func newCloudWatchClient(url string, attempts int) *cloudwatch.Client {
	cfg := aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("AKIDTEST", "SECRET", ""),
		Retryer: func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = attempts
				o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return time.Millisecond, nil })
			})
		},
	}
	return cloudwatch.NewFromConfig(cfg, func(o *cloudwatch.Options) { o.BaseEndpoint = aws.String(url) })
}

func TestCloudWatchThroughTheSDK(t *testing.T) {
	t.Parallel()
	srv, hs := newCloudWatchServer(t)
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	cfg := testConfig(ModeCloudWatch)
	cfg.Namespace = "Team/Watchbot"
	cfg.Dimensions = []Dimension{{"QueueName", "jobs"}, {"Service", "resize"}}
	cfg.CloudWatch = newCloudWatchClient(hs.URL, 3)
	cfg.Now = func() time.Time { return now }
	p, err := NewPublisher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.Add(WorkerErrors, 1)
	p.Add(WorkerErrors, 1)
	p.Add(WorkerDuration, 1500)
	p.Add(WorkerDuration, 250.5)
	p.Add(WorkerDuration, 1500)
	for i := range 200 { // more distinct values than a datum may carry: a statistic set
		p.Add(MessageAge, float64(i))
	}
	if err := p.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}

	puts := srv.requests()
	if len(puts) != 1 {
		t.Fatalf("%d requests, want 1", len(puts))
	}
	if puts[0].Namespace != "Team/Watchbot" {
		t.Errorf("namespace %q", puts[0].Namespace)
	}
	full, alarmSet := cfg.Dimensions, cfg.Dimensions[:1]
	want := []received{
		{Name: "MessageAge", Unit: "Milliseconds", Dimensions: full, Statistic: &stat{200, 19900, 0, 199}, Timestamp: now},
		{Name: "MessageAge", Unit: "Milliseconds", Dimensions: alarmSet, Statistic: &stat{200, 19900, 0, 199}, Timestamp: now},
		{Name: "WorkerDuration", Unit: "Milliseconds", Dimensions: full, Values: []float64{250.5, 1500}, Counts: []float64{1, 2}, Timestamp: now},
		{Name: "WorkerDuration", Unit: "Milliseconds", Dimensions: alarmSet, Values: []float64{250.5, 1500}, Counts: []float64{1, 2}, Timestamp: now},
		{Name: "WorkerErrors", Unit: "Count", Dimensions: full, Values: []float64{1}, Counts: []float64{2}, Timestamp: now},
		{Name: "WorkerErrors", Unit: "Count", Dimensions: alarmSet, Values: []float64{1}, Counts: []float64{2}, Timestamp: now},
	}
	if diff := cmp.Diff(want, puts[0].Data); diff != "" {
		t.Errorf("datums received (-want +got):\n%s", diff)
	}
	if s := p.Stats(); s.Published != 6 || s.Failures != 0 {
		t.Errorf("stats %+v", s)
	}
}

func TestCloudWatchThrottlingIsRetried(t *testing.T) {
	t.Parallel()
	srv, hs := newCloudWatchServer(t)
	srv.respond = func(attempt int, w http.ResponseWriter) bool {
		if attempt <= 2 {
			throttle(w)
			return true
		}
		return false
	}
	cfg := testConfig(ModeCloudWatch)
	cfg.CloudWatch = newCloudWatchClient(hs.URL, 3)
	p, err := NewPublisher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.Add(DeadLetter, 1)
	if err := p.Flush(t.Context()); err != nil {
		t.Fatalf("Flush() = %v, want the third attempt to succeed", err)
	}
	if n := srv.attempts(); n != 3 {
		t.Errorf("%d attempts, want 3", n)
	}
	puts := srv.requests()
	if len(puts) != 1 || len(puts[0].Data) != 1 || puts[0].Data[0].Name != "DeadLetter" {
		t.Errorf("accepted %+v", puts)
	}
}

// TestCloudWatchThrottledTooLongIsKept: once the SDK gives up, the window stays buffered and
// goes out with the next flush.
func TestCloudWatchThrottledTooLongIsKept(t *testing.T) {
	t.Parallel()
	srv, hs := newCloudWatchServer(t)
	srv.respond = func(attempt int, w http.ResponseWriter) bool {
		if attempt <= 3 {
			throttle(w)
			return true
		}
		return false
	}
	var logs logBuffer
	cfg := testConfig(ModeCloudWatch)
	cfg.CloudWatch = newCloudWatchClient(hs.URL, 3)
	cfg.Logger = logs.logger()
	p, err := NewPublisher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.Add(WorkerErrors, 1)
	if err := p.Flush(t.Context()); err == nil || !strings.Contains(err.Error(), "ThrottlingException") {
		t.Fatalf("Flush() = %v, want the throttling error", err)
	}
	p.Add(WorkerErrors, 1)
	if err := p.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, put := range srv.requests() {
		for _, d := range put.Data {
			sum += d.Values[0] * d.Counts[0]
		}
	}
	if sum != 2 {
		t.Errorf("WorkerErrors published %v, want 2", sum)
	}
	if n := len(logs.records(t, flushKept...)); n != 1 {
		t.Errorf("%d warnings, want 1", n)
	}
}

// TestCloudWatchDeadEndpoint: nothing listens; Add goes on, flushes return, and at shutdown
// the lost counts are reported.
func TestCloudWatchDeadEndpoint(t *testing.T) {
	t.Parallel()
	hs := httptest.NewServer(http.NotFoundHandler())
	url := hs.URL
	hs.Close() // connections to url are now refused

	var logs logBuffer
	cfg := testConfig(ModeCloudWatch)
	cfg.CloudWatch = newCloudWatchClient(url, 3)
	cfg.Logger = logs.logger()
	cfg.Interval = time.Second
	cfg.FlushTimeout = 5 * time.Second
	p, err := NewPublisher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.Add(WorkerErrors, 3)
	if err := p.Flush(t.Context()); err == nil {
		t.Fatal("Flush() to a dead endpoint = nil")
	}
	for range 10000 {
		p.Add(WorkerErrors, 1)
	}
	p.Add(DeadLetter, 1)

	ctx, cancel := context.WithCancel(t.Context())
	cancel() // Run flushes once more and returns
	if err := p.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if got := logs.lostSum(t, WorkerErrors); got != 10003 {
		t.Errorf("logs report %v WorkerErrors lost, want 10003", got)
	}
	if got := logs.lostSum(t, DeadLetter); got != 1 {
		t.Errorf("logs report %v DeadLetter lost, want 1", got)
	}
	if s := p.Stats(); s.Dropped != 3 || s.Failures != 2 || s.Published != 0 {
		t.Errorf("stats %+v, want 3 datums dropped after 2 failed flushes", s)
	}
	for _, r := range logs.records(t, flushKept...) {
		if !strings.Contains(r["error"].(string), "connection refused") {
			t.Errorf("warning without the cause: %v", r)
		}
	}
}

// TestCloudWatchHangingEndpoint: an endpoint that never answers holds the final flush for
// FlushTimeout at most, then Run returns and reports what was lost.
func TestCloudWatchHangingEndpoint(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // so that the server notices when the client hangs up
		select {
		case <-r.Context().Done(): // the client gave up
		case <-release:
		}
	}))
	t.Cleanup(hs.Close)
	t.Cleanup(func() { close(release) }) // runs first: no handler outlives the test
	var logs logBuffer
	cfg := testConfig(ModeCloudWatch)
	cfg.CloudWatch = newCloudWatchClient(hs.URL, 3)
	cfg.Logger = logs.logger()
	cfg.FlushTimeout = 100 * time.Millisecond
	p, err := NewPublisher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.Add(DeadLetter, 2)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := p.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if got := logs.lostSum(t, DeadLetter); got != 2 {
		t.Errorf("logs report %v DeadLetter lost, want 2", got)
	}
	if s := p.Stats(); s.Dropped != 1 || s.Failures != 1 {
		t.Errorf("stats %+v", s)
	}
}

// TestCloudWatchRequestLimits: many large datums are split so that no request holds more than
// 1,000 datums or 1 MB, as measured on what the SDK really sends.
func TestCloudWatchRequestLimits(t *testing.T) {
	t.Parallel()
	srv, hs := newCloudWatchServer(t)
	srv.respond = func(attempt int, w http.ResponseWriter) bool {
		if attempt <= 12 { // the first 12 flushes fail, so windows pile up
			throttle(w)
			return true
		}
		return false
	}
	cfg := testConfig(ModeCloudWatch)
	cfg.CloudWatch = newCloudWatchClient(hs.URL, 1)
	cfg.MaxBufferedWindows = 50
	cfg.Dimensions = []Dimension{{"QueueName", "jobs"}}
	for i := range 29 {
		cfg.Dimensions = append(cfg.Dimensions, Dimension{Name: fmt.Sprintf("Tag%02d", i), Value: strings.Repeat(string(rune('a'+i%26)), 1000)})
	}
	p, err := NewPublisher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const windows = 13
	for range windows {
		for _, m := range Metrics {
			p.Add(m.Name, 1)
		}
		p.Flush(t.Context())
	}
	puts := srv.requests()
	total := 0
	for _, put := range puts {
		if len(put.Data) > 1000 || put.Bytes > 1_000_000 {
			t.Errorf("request of %d datums and %d bytes", len(put.Data), put.Bytes)
		}
		total += len(put.Data)
	}
	if want := windows * len(Metrics) * 2; total != want {
		t.Errorf("%d datums received, want %d", total, want)
	}
	var biggest, sent int
	for _, put := range puts {
		biggest = max(biggest, put.Bytes)
		sent += put.Bytes
	}
	t.Logf("%d datums, %d bytes in %d requests, the largest %d bytes", total, sent, len(puts), biggest)
	if min := (sent + 999_999) / 1_000_000; len(puts) < min || sent < 3_000_000 {
		t.Errorf("%d bytes in %d requests: the byte limit did not split them", sent, len(puts))
	}
	if got := len(puts[0].Data[0].Dimensions); got != 30 {
		t.Errorf("first datum has %d dimensions, want 30", got)
	}
}
