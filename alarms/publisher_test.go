package alarms

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
	"github.com/google/go-cmp/cmp"

	"github.com/watchbot/watchbot/internal/testing/testenv"
)

var queueDims = []Dimension{{Name: "QueueName", Value: "jobs"}}

func testConfig(mode string) PublisherConfig {
	c := DefaultPublisherConfig()
	c.Mode = mode
	c.Dimensions = queueDims
	return c
}

func TestValidate(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 256)
	tests := []struct {
		name    string
		change  func(*PublisherConfig)
		wantErr string // "" = valid
	}{
		{"emf", func(c *PublisherConfig) {}, ""},
		{"cloudwatch", func(c *PublisherConfig) { c.Mode = ModeCloudWatch; c.Stdout = nil; c.CloudWatch = &memCloudWatch{} }, ""},
		{"none needs no output", func(c *PublisherConfig) { c.Mode = ModeNone; c.Stdout = nil }, ""},
		{"two dimensions", func(c *PublisherConfig) { c.Dimensions = append(c.Dimensions, Dimension{"Service", "resize"}) }, ""},
		{"namespace with allowed punctuation", func(c *PublisherConfig) { c.Namespace = "Team/Watchbot #1 v.2_a-b:c" }, ""},
		{"unknown mode", func(c *PublisherConfig) { c.Mode = "statsd" }, `Metrics ("statsd") must be cloudwatch, emf or none`},
		{"empty mode", func(c *PublisherConfig) { c.Mode = "" }, `Metrics ("") must be`},
		{"empty namespace", func(c *PublisherConfig) { c.Namespace = " " }, "MetricsNamespace: must not be empty"},
		{"AWS namespace", func(c *PublisherConfig) { c.Namespace = "AWS/SQS" }, "MetricsNamespace (\"AWS/SQS\") must not start with AWS/"},
		{"long namespace", func(c *PublisherConfig) { c.Namespace = long }, "MetricsNamespace (256 characters) must be at most 255"},
		{"namespace with a control character", func(c *PublisherConfig) { c.Namespace = "Watch\nbot" }, "MetricsNamespace (\"Watch\\nbot\") may hold only"},
		{"namespace with a colon first", func(c *PublisherConfig) { c.Namespace = ":Watchbot" }, "must not start with a colon"},
		{"no dimension", func(c *PublisherConfig) { c.Dimensions = nil }, "at least one dimension"},
		{"empty service", func(c *PublisherConfig) { c.Dimensions = append(c.Dimensions, Dimension{"Service", ""}) },
			`metrics dimension "Service" (--metrics-service): value ("") must have 1 to 1024 characters`},
		{"service too long", func(c *PublisherConfig) {
			c.Dimensions = append(c.Dimensions, Dimension{"Service", strings.Repeat("s", 1025)})
		}, `(--metrics-service): value`},
		{"service with a newline", func(c *PublisherConfig) { c.Dimensions = append(c.Dimensions, Dimension{"Service", "a\nb"}) },
			"must be printable UTF-8"},
		{"duplicate dimension", func(c *PublisherConfig) { c.Dimensions = append(c.Dimensions, c.Dimensions[0]) }, "given twice"},
		{"dimension named like a metric", func(c *PublisherConfig) { c.Dimensions = append(c.Dimensions, Dimension{"DeadLetter", "x"}) },
			"name is a metric's name"},
		{"dimension named _aws", func(c *PublisherConfig) { c.Dimensions = append(c.Dimensions, Dimension{"_aws", "x"}) }, "reserved"},
		{"31 dimensions", func(c *PublisherConfig) {
			for i := range 30 {
				c.Dimensions = append(c.Dimensions, Dimension{Name: "D" + string(rune('a'+i)), Value: "v"})
			}
		}, "CloudWatch allows 30"},
		{"interval too short", func(c *PublisherConfig) { c.Interval = time.Millisecond }, "metrics interval (1ms) must be between 1s and 1h"},
		{"no flush timeout", func(c *PublisherConfig) { c.FlushTimeout = 0 }, "flush timeout"},
		{"no buffered window", func(c *PublisherConfig) { c.MaxBufferedWindows = 0 }, "buffered windows (0) must be at least 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := testConfig(ModeEMF)
			c.Stdout = &bytes.Buffer{}
			tt.change(&c)
			err := c.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				if _, err := NewPublisher(c); err != nil {
					t.Fatalf("NewPublisher() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestNewPublisherNeedsItsOutput: the wiring is NewPublisher's to check, not Validate's, so
// listen can validate --metrics cloudwatch before it builds the CloudWatch client.
func TestNewPublisherNeedsItsOutput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		change  func(*PublisherConfig)
		wantErr string
	}{
		{"emf without output", func(c *PublisherConfig) { c.Stdout = nil }, "emf metrics need an output"},
		{"cloudwatch without client", func(c *PublisherConfig) { c.Mode = ModeCloudWatch }, "cloudwatch metrics need a CloudWatch client"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := testConfig(ModeEMF)
			c.Stdout = &bytes.Buffer{}
			tt.change(&c)
			if err := c.Validate(); err != nil {
				t.Fatalf("Validate() = %v, want nil: the settings are valid", err)
			}
			if _, err := NewPublisher(c); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("NewPublisher() = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

// memCloudWatch is an in-memory CloudWatch that keeps what it accepts and fails on demand.
type memCloudWatch struct {
	mu    sync.Mutex
	calls []*cloudwatch.PutMetricDataInput
	fail  error
	// entered and release, when set, hold each call until release is closed.
	entered chan struct{}
	release chan struct{}
}

func (m *memCloudWatch) PutMetricData(ctx context.Context, in *cloudwatch.PutMetricDataInput, _ ...func(*cloudwatch.Options)) (*cloudwatch.PutMetricDataOutput, error) {
	if m.entered != nil {
		m.entered <- struct{}{}
		select {
		case <-m.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return nil, m.fail
	}
	m.calls = append(m.calls, in)
	return &cloudwatch.PutMetricDataOutput{}, nil
}

func (m *memCloudWatch) setFail(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fail = err
}

func (m *memCloudWatch) inputs() []*cloudwatch.PutMetricDataInput {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]*cloudwatch.PutMetricDataInput(nil), m.calls...)
}

// stat is what CloudWatch holds for a metric over the datums given.
type stat struct {
	Samples, Sum, Min, Max float64
}

// totals combines the datums carrying exactly dims into one statistic per metric.
func totals(t *testing.T, ins []*cloudwatch.PutMetricDataInput, dims []Dimension) map[Metric]stat {
	t.Helper()
	out := make(map[Metric]stat)
	for _, in := range ins {
		for _, d := range in.MetricData {
			if !sameDims(d.Dimensions, dims) {
				continue
			}
			n, sum := datumTotals(d)
			lo, hi := 0.0, 0.0
			if s := d.StatisticValues; s != nil {
				lo, hi = *s.Minimum, *s.Maximum
			} else {
				lo, hi = d.Values[0], d.Values[len(d.Values)-1]
			}
			m := Metric(aws.ToString(d.MetricName))
			s, seen := out[m]
			if !seen {
				s.Min, s.Max = lo, hi
			}
			s.Samples += n
			s.Sum += sum
			s.Min, s.Max = min(s.Min, lo), max(s.Max, hi)
			out[m] = s
		}
	}
	return out
}

func sameDims(got []types.Dimension, want []Dimension) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if aws.ToString(got[i].Name) != want[i].Name || aws.ToString(got[i].Value) != want[i].Value {
			return false
		}
	}
	return true
}

// logBuffer collects JSON log records.
type logBuffer struct{ testenv.Buffer }

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewJSONHandler(l, nil)) }

// records returns the records that have every one of attrs: key, value pairs, each value
// compared as text, "*" taking any value of its key. Records are found by their level and
// attributes, never their message, which may be reworded freely.
func (l *logBuffer) records(t *testing.T, attrs ...string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(l.String()))
	for sc.Scan() {
		var r map[string]any
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		if testenv.Logged(sc.Text(), attrs...) {
			out = append(out, r)
		}
	}
	return out
}

// The publisher's log records, by level and attributes.
var (
	flushKept     = []string{"level", "WARN", "buffered_windows", "*"} // a failed flush keeps the windows
	metricsLost   = []string{"level", "ERROR", "reason", "*"}          // metrics dropped
	valuesRefused = []string{"level", "WARN", "refused", "*"}
	dlqUnsampled  = []string{"level", "WARN", "metric", string(DeadLetterQueueDepth), "error", "*"}
)

// lostSum adds up, over the records of metrics dropped, the sum lost for m.
func (l *logBuffer) lostSum(t *testing.T, m Metric) float64 {
	t.Helper()
	var total float64
	for _, r := range l.records(t, metricsLost...) {
		lost, _ := r["lost"].(map[string]any)
		if g, ok := lost[string(m)].(map[string]any); ok {
			total += g["sum"].(float64)
		}
	}
	return total
}

// start runs p until the returned stop is called; stop waits for Run to return.
func start(t *testing.T, p *Publisher) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v", err)
		}
	}
}

func TestCloudWatchAggregatesEachWindow(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cw := &memCloudWatch{}
		cfg := testConfig(ModeCloudWatch)
		cfg.CloudWatch = cw
		cfg.Dimensions = []Dimension{{"QueueName", "jobs"}, {"Service", "resize"}}
		p, err := NewPublisher(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		stop := start(t, p)

		// Window 1: [0s, 60s).
		for range 3 {
			p.Add(WorkerErrors, 1)
		}
		time.Sleep(30 * time.Second)
		p.Add(WorkerDuration, 100)
		p.Add(WorkerDuration, 300)
		p.Add(WorkerDuration, 100)
		time.Sleep(29 * time.Second)
		p.Add(MessagesProcessed, 1)
		synctest.Wait()
		if n := len(cw.inputs()); n != 0 {
			t.Fatalf("%d PutMetricData calls before the window ended", n)
		}
		time.Sleep(time.Second)
		synctest.Wait()

		ins := cw.inputs()
		if len(ins) != 1 {
			t.Fatalf("%d PutMetricData calls after one window, want 1", len(ins))
		}
		if got := aws.ToString(ins[0].Namespace); got != "Watchbot" {
			t.Errorf("namespace %q", got)
		}
		want := map[Metric]stat{
			WorkerErrors:      {Samples: 3, Sum: 3, Min: 1, Max: 1},
			WorkerDuration:    {Samples: 3, Sum: 500, Min: 100, Max: 300},
			MessagesProcessed: {Samples: 1, Sum: 1, Min: 1, Max: 1},
		}
		for _, dims := range [][]Dimension{cfg.Dimensions, cfg.Dimensions[:1]} {
			if diff := cmp.Diff(want, totals(t, ins, dims)); diff != "" {
				t.Errorf("window 1 with dimensions %v (-want +got):\n%s", dims, diff)
			}
		}
		for _, d := range ins[0].MetricData {
			if !d.Timestamp.Equal(t0.Add(time.Minute)) {
				t.Errorf("%s stamped %v, want the flush time %v", *d.MetricName, d.Timestamp, t0.Add(time.Minute))
			}
			if def, _ := Lookup(Metric(*d.MetricName)); string(d.Unit) != string(def.Unit) {
				t.Errorf("%s has unit %q, want %q", *d.MetricName, d.Unit, def.Unit)
			}
		}

		// Window 2 is flushed at shutdown, before its minute is over.
		time.Sleep(10 * time.Second)
		p.Add(WorkerErrors, 1)
		p.Add(DeadLetter, 1)
		stop()
		ins = cw.inputs()
		if len(ins) != 2 {
			t.Fatalf("%d PutMetricData calls after shutdown, want 2", len(ins))
		}
		want = map[Metric]stat{
			WorkerErrors: {Samples: 1, Sum: 1, Min: 1, Max: 1},
			DeadLetter:   {Samples: 1, Sum: 1, Min: 1, Max: 1},
		}
		if diff := cmp.Diff(want, totals(t, ins[1:], queueDims)); diff != "" {
			t.Errorf("shutdown flush (-want +got):\n%s", diff)
		}
		if s := p.Stats(); s.Dropped != 0 || s.Failures != 0 || s.Published != int64(len(ins[0].MetricData)+len(ins[1].MetricData)) {
			t.Errorf("stats %+v", s)
		}
	})
}

func TestCloudWatchQuietWindowSendsNothing(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cw := &memCloudWatch{}
		cfg := testConfig(ModeCloudWatch)
		cfg.CloudWatch = cw
		p, err := NewPublisher(cfg)
		if err != nil {
			t.Fatal(err)
		}
		stop := start(t, p)
		time.Sleep(5 * time.Minute)
		stop()
		if n := len(cw.inputs()); n != 0 {
			t.Errorf("%d PutMetricData calls with nothing recorded", n)
		}
	})
}

// TestCloudWatchBuffersFailedWindows: while CloudWatch fails, windows are kept; when it is
// back, they go out oldest first, more than 1,000 datums split over several requests, and no
// count is lost.
func TestCloudWatchBuffersFailedWindows(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cw := &memCloudWatch{fail: errors.New("connection refused")}
		var logs logBuffer
		cfg := testConfig(ModeCloudWatch)
		cfg.CloudWatch = cw
		cfg.Logger = logs.logger()
		cfg.MaxBufferedWindows = 100
		cfg.Dimensions = []Dimension{{"QueueName", "jobs"}, {"Service", "resize"}}
		p, err := NewPublisher(cfg)
		if err != nil {
			t.Fatal(err)
		}
		stop := start(t, p)
		const failing = 70
		for i := range failing + 1 {
			for _, m := range Metrics {
				p.Add(m.Name, float64(i))
			}
			if i == failing {
				cw.setFail(nil)
			}
			time.Sleep(time.Minute)
			synctest.Wait()
		}
		stop()

		ins := cw.inputs()
		var sizes []int
		for _, in := range ins {
			sizes = append(sizes, len(in.MetricData))
		}
		// 71 windows × len(Metrics) metrics × 2 dimension sets, at most 1000 per request.
		datums := (failing + 1) * len(Metrics) * 2
		var want []int
		for left := datums; left > 0; left -= 1000 {
			want = append(want, min(left, 1000))
		}
		if diff := cmp.Diff(want, sizes); diff != "" {
			t.Errorf("datums per request (-want +got):\n%s", diff)
		}
		got := totals(t, ins, cfg.Dimensions)
		for _, m := range Metrics {
			want := stat{Samples: failing + 1, Sum: failing * (failing + 1) / 2, Min: 0, Max: failing}
			if got[m.Name] != want {
				t.Errorf("%s: got %+v, want %+v", m.Name, got[m.Name], want)
			}
		}
		if first := ins[0].MetricData[0].Timestamp; !first.Equal(synctestEpoch.Add(time.Minute)) {
			t.Errorf("oldest datum stamped %v, want its own window's end %v", first, synctestEpoch.Add(time.Minute))
		}
		s := p.Stats()
		if s.Failures != failing || s.Dropped != 0 || s.Published != int64(datums) {
			t.Errorf("stats %+v, want %d failures, 0 dropped, %d published", s, failing, datums)
		}
		if n := len(logs.records(t, flushKept...)); n != failing {
			t.Errorf("%d warnings logged, want one per failed flush (%d)", n, failing)
		}
	})
}

// synctestEpoch is where time starts in a synctest bubble.
var synctestEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// TestCloudWatchDropsBeyondTheBuffer: a dead CloudWatch costs the oldest windows once the
// buffer is full, and at shutdown the rest; every lost count is in Stats and in the log.
func TestCloudWatchDropsBeyondTheBuffer(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cw := &memCloudWatch{fail: errors.New("dial tcp 127.0.0.1:9: connection refused")}
		var logs logBuffer
		cfg := testConfig(ModeCloudWatch)
		cfg.CloudWatch = cw
		cfg.Logger = logs.logger()
		cfg.MaxBufferedWindows = 2
		p, err := NewPublisher(cfg)
		if err != nil {
			t.Fatal(err)
		}
		stop := start(t, p)
		for range 5 {
			p.Add(WorkerErrors, 2)
			p.Add(DeadLetter, 1)
			time.Sleep(time.Minute)
			synctest.Wait()
		}
		if got := logs.lostSum(t, WorkerErrors); got != 6 {
			t.Errorf("before shutdown, logs report %v WorkerErrors lost, want 6 (3 windows beyond the buffer of 2)", got)
		}
		p.Add(WorkerErrors, 2)
		stop()
		if got := logs.lostSum(t, WorkerErrors); got != 12 {
			t.Errorf("logs report %v WorkerErrors lost, want all 12", got)
		}
		if got := logs.lostSum(t, DeadLetter); got != 5 {
			t.Errorf("logs report %v DeadLetter lost, want all 5", got)
		}
		if s := p.Stats(); s.Dropped != 11 || s.Published != 0 {
			t.Errorf("stats %+v, want 11 datums dropped (5 windows of 2 and the last of 1)", s)
		}
	})
}

func TestCloudWatchRejectedDataIsDroppedNotRetried(t *testing.T) {
	t.Parallel()
	cw := &memCloudWatch{fail: &types.InvalidParameterValueException{Message: aws.String("The value NaN is invalid")}}
	var logs logBuffer
	cfg := testConfig(ModeCloudWatch)
	cfg.CloudWatch = cw
	cfg.Logger = logs.logger()
	p, err := NewPublisher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.Add(WorkerErrors, 1)
	if err := p.Flush(t.Context()); err != nil {
		t.Fatalf("Flush() = %v; a rejected request is dropped, not an error", err)
	}
	cw.setFail(nil)
	if err := p.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := len(cw.inputs()); n != 0 {
		t.Errorf("rejected datums were sent again (%d calls)", n)
	}
	if s := p.Stats(); s.Dropped != 1 || s.Failures != 1 {
		t.Errorf("stats %+v, want 1 dropped, 1 failure", s)
	}
	recs := logs.records(t, metricsLost...)
	if len(recs) != 1 || recs[0]["reason"] != "CloudWatch rejected them" || !strings.Contains(recs[0]["error"].(string), "InvalidParameterValue") {
		t.Errorf("drop log %v", recs)
	}
}

func TestRefusedValues(t *testing.T) {
	t.Parallel()
	cw := &memCloudWatch{}
	var logs logBuffer
	cfg := testConfig(ModeCloudWatch)
	cfg.CloudWatch = cw
	cfg.Logger = logs.logger()
	p, err := NewPublisher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.Add(WorkerDuration, math.NaN())
	p.Add(WorkerDuration, math.Inf(1))
	p.Add(MessageAge, math.Inf(-1))
	p.Add(MessageAge, 1e200)
	p.Add(Metric("NoSuchMetric"), 1)
	p.Add(ReceiveDuration, 0.5) // Prometheus's alone: neither published nor refused
	p.Add(WorkerDuration, 250)
	if err := p.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	want := map[Metric]stat{WorkerDuration: {Samples: 1, Sum: 250, Min: 250, Max: 250}}
	if diff := cmp.Diff(want, totals(t, cw.inputs(), queueDims)); diff != "" {
		t.Errorf("published (-want +got):\n%s", diff)
	}
	if s := p.Stats(); s.Refused != 5 {
		t.Errorf("Refused = %d, want 5", s.Refused)
	}
	got := make(map[string]float64)
	for _, r := range logs.records(t, valuesRefused...) {
		got[r["metric"].(string)] = r["refused"].(float64)
	}
	if diff := cmp.Diff(map[string]float64{"WorkerDuration": 2, "MessageAge": 2, "NoSuchMetric": 1}, got); diff != "" {
		t.Errorf("refusals logged (-want +got):\n%s", diff)
	}
}

func TestDLQDepthIsSampledEachInterval(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cw := &memCloudWatch{}
		var logs logBuffer
		depths := []int64{0, 4}
		calls := 0
		cfg := testConfig(ModeCloudWatch)
		cfg.CloudWatch = cw
		cfg.Logger = logs.logger()
		cfg.DLQDepth = func(ctx context.Context) (int64, error) {
			calls++
			if calls > len(depths) {
				return 0, errors.New("AWS.SimpleQueueService.NonExistentQueue")
			}
			return depths[calls-1], nil
		}
		p, err := NewPublisher(cfg)
		if err != nil {
			t.Fatal(err)
		}
		stop := start(t, p)
		time.Sleep(3*time.Minute + time.Second)
		stop()
		ins := cw.inputs()
		if len(ins) != 2 {
			t.Fatalf("%d calls, want 2 (the third sample failed)", len(ins))
		}
		for i, in := range ins {
			want := map[Metric]stat{DeadLetterQueueDepth: {Samples: 1, Sum: float64(depths[i]), Min: float64(depths[i]), Max: float64(depths[i])}}
			if diff := cmp.Diff(want, totals(t, []*cloudwatch.PutMetricDataInput{in}, queueDims)); diff != "" {
				t.Errorf("sample %d (-want +got):\n%s", i, diff)
			}
		}
		if calls != 3 {
			t.Errorf("DLQDepth called %d times in 3 minutes, want 3 (not at shutdown)", calls)
		}
		if n := len(logs.records(t, dlqUnsampled...)); n != 1 {
			t.Errorf("%d sampling failures logged, want 1", n)
		}
	})
}

// TestSamplersAreSampledEachInterval: one value of each sampler per periodic flush, none at
// the final flush, so a stopping task adds no partial window of its slots.
func TestSamplersAreSampledEachInterval(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cw := &memCloudWatch{}
		busy := []float64{0.5, 3}
		samples := 0
		cfg := testConfig(ModeCloudWatch)
		cfg.CloudWatch = cw
		cfg.Samplers = []Sampler{
			{Metric: WorkerSlots, Sample: func() float64 { return 4 }},
			{Metric: BusySlots, Sample: func() float64 { samples++; return busy[samples-1] }},
		}
		p, err := NewPublisher(cfg)
		if err != nil {
			t.Fatal(err)
		}
		stop := start(t, p)
		time.Sleep(2*time.Minute + time.Second)
		stop()
		ins := cw.inputs()
		if len(ins) != 2 {
			t.Fatalf("%d calls, want 2 (nothing sampled for the final flush)", len(ins))
		}
		for i, in := range ins {
			want := map[Metric]stat{
				WorkerSlots: {Samples: 1, Sum: 4, Min: 4, Max: 4},
				BusySlots:   {Samples: 1, Sum: busy[i], Min: busy[i], Max: busy[i]},
			}
			if diff := cmp.Diff(want, totals(t, []*cloudwatch.PutMetricDataInput{in}, queueDims)); diff != "" {
				t.Errorf("window %d (-want +got):\n%s", i, diff)
			}
		}
		if samples != 2 {
			t.Errorf("BusySlots sampled %d times in 2 minutes, want 2", samples)
		}
	})
}

// TestAddNeverWaitsForAFlush holds a PutMetricData call open and records meanwhile.
func TestAddNeverWaitsForAFlush(t *testing.T) {
	t.Parallel()
	cw := &memCloudWatch{entered: make(chan struct{}), release: make(chan struct{})}
	cfg := testConfig(ModeCloudWatch)
	cfg.CloudWatch = cw
	p, err := NewPublisher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.Add(WorkerErrors, 1)
	flushed := make(chan error, 1)
	go func() { flushed <- p.Flush(t.Context()) }()
	<-cw.entered // the flush is now blocked inside PutMetricData

	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				p.Add(MessagesProcessed, 1)
			}
		})
	}
	wg.Wait() // returns only because Add does not wait for the flush
	close(cw.release)
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	cw.entered = nil
	if err := p.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	got := totals(t, cw.inputs(), queueDims)
	if got[WorkerErrors].Sum != 1 || got[MessagesProcessed].Sum != 8000 {
		t.Errorf("published %+v", got)
	}
}

// TestFlushBehindAHungFlushGivesUp: a flush waits for the one under way, which holds a
// PutMetricData call open, only as long as its own context lasts; the window it would have
// sent goes out with the next flush.
func TestFlushBehindAHungFlushGivesUp(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cw := &memCloudWatch{entered: make(chan struct{}), release: make(chan struct{})}
		cfg := testConfig(ModeCloudWatch)
		cfg.CloudWatch = cw
		p, err := NewPublisher(cfg)
		if err != nil {
			t.Fatal(err)
		}
		p.Add(WorkerErrors, 1)
		flushed := make(chan error, 1)
		go func() { flushed <- p.Flush(t.Context()) }()
		<-cw.entered // the first flush holds PutMetricData open
		p.Add(WorkerErrors, 1)
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if err := p.Flush(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a flush behind a hung one = %v, want its deadline", err)
		}
		close(cw.release)
		if err := <-flushed; err != nil {
			t.Fatal(err)
		}
		cw.entered = nil
		if err := p.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got := totals(t, cw.inputs(), queueDims); got[WorkerErrors].Sum != 2 {
			t.Errorf("WorkerErrors published %v, want 2", got[WorkerErrors].Sum)
		}
	})
}

func TestNoneMode(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var out bytes.Buffer
		cfg := testConfig(ModeNone)
		cfg.Stdout = &out
		p, err := NewPublisher(cfg)
		if err != nil {
			t.Fatal(err)
		}
		stop := start(t, p)
		p.Add(WorkerErrors, 1)
		p.Add(WorkerErrors, math.NaN())
		time.Sleep(2 * time.Minute)
		stop()
		if out.Len() != 0 || p.Stats() != (Stats{}) {
			t.Errorf("none mode wrote %q, stats %+v", out.String(), p.Stats())
		}
	})
}
