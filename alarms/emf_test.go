package alarms

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
)

// writes records each Write call separately.
type writes struct {
	mu    sync.Mutex
	calls []string
	fail  error
}

func (w *writes) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fail != nil {
		return 0, w.fail
	}
	w.calls = append(w.calls, string(p))
	return len(p), nil
}

func (w *writes) lines() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.calls...)
}

// cloudWatchUnits are the units CloudWatch accepts.
var cloudWatchUnits = strings.Fields(`Seconds Microseconds Milliseconds Bytes Kilobytes Megabytes Gigabytes
Terabytes Bits Kilobits Megabits Gigabits Terabits Percent Count Bytes/Second Kilobytes/Second
Megabytes/Second Gigabytes/Second Terabytes/Second Bits/Second Kilobits/Second Megabits/Second
Gigabits/Second Terabits/Second Count/Second None`)

// emfMetricValues is what one EMF document says about one metric under one dimension set.
type emfMetricValues struct {
	Name       Metric
	Namespace  string
	Dimensions map[string]string
	Unit       string
	Values     []float64
	Timestamp  int64
}

// parseEMF checks one line against the embedded metric format specification and returns the
// metric values CloudWatch would extract from it.
func parseEMF(t *testing.T, line string) []emfMetricValues {
	t.Helper()
	if !strings.HasSuffix(line, "\n") || strings.Count(line, "\n") != 1 {
		t.Fatalf("not one newline-terminated line: %q", line)
	}
	var root map[string]json.RawMessage
	if err := json.Unmarshal([]byte(line), &root); err != nil {
		t.Fatalf("not a JSON object: %v: %s", err, line)
	}
	var meta map[string]json.RawMessage
	if err := json.Unmarshal(root["_aws"], &meta); err != nil {
		t.Fatalf("_aws is not an object: %s", line)
	}
	for k := range meta {
		if k != "Timestamp" && k != "CloudWatchMetrics" {
			t.Errorf("_aws has member %q", k)
		}
	}
	var ts int64
	if err := json.Unmarshal(meta["Timestamp"], &ts); err != nil || ts <= 0 {
		t.Errorf("_aws.Timestamp %s is not a positive integer of milliseconds", meta["Timestamp"])
	}
	var directives []struct {
		Namespace  string
		Dimensions [][]string
		Metrics    []map[string]any
	}
	dec := json.NewDecoder(bytes.NewReader(meta["CloudWatchMetrics"]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&directives); err != nil || len(directives) == 0 {
		t.Fatalf("_aws.CloudWatchMetrics %s: %v", meta["CloudWatchMetrics"], err)
	}
	var out []emfMetricValues
	for _, d := range directives {
		if d.Namespace == "" || len(d.Dimensions) == 0 || len(d.Metrics) == 0 || len(d.Metrics) > 100 {
			t.Errorf("directive %+v: namespace, dimension sets and 1 to 100 metrics are required", d)
		}
		for _, m := range d.Metrics {
			for k := range m {
				if k != "Name" && k != "Unit" && k != "StorageResolution" {
					t.Errorf("metric definition has member %q", k)
				}
			}
			name, _ := m["Name"].(string)
			unit, _ := m["Unit"].(string)
			if !strings.Contains(" "+strings.Join(cloudWatchUnits, " ")+" ", " "+unit+" ") {
				t.Errorf("metric %s: unit %q is not a CloudWatch unit", name, unit)
			}
			raw, ok := root[name]
			if !ok {
				t.Fatalf("metric %q has no target member: %s", name, line)
			}
			var values []float64
			var one float64
			if err := json.Unmarshal(raw, &one); err == nil {
				values = []float64{one}
			} else if err := json.Unmarshal(raw, &values); err != nil || len(values) == 0 || len(values) > 100 {
				t.Fatalf("metric %q: %s is neither a number nor an array of 1 to 100 numbers", name, raw)
			}
			for _, set := range d.Dimensions {
				if len(set) > 30 {
					t.Errorf("dimension set of %d", len(set))
				}
				dims := make(map[string]string)
				for _, k := range set {
					var v string
					if err := json.Unmarshal(root[k], &v); err != nil {
						t.Fatalf("dimension %q has no string target member: %s", k, line)
					}
					dims[k] = v
				}
				out = append(out, emfMetricValues{Metric(name), d.Namespace, dims, unit, values, ts})
			}
		}
	}
	return out
}

// emfTotals parses lines and combines, per metric, the values carried with exactly dims.
func emfTotals(t *testing.T, lines []string, dims map[string]string) map[Metric]stat {
	t.Helper()
	out := make(map[Metric]stat)
	for _, line := range lines {
		for _, mv := range parseEMF(t, line) {
			if !cmp.Equal(mv.Dimensions, dims) {
				continue
			}
			name := mv.Name
			s, seen := out[name]
			if !seen {
				s.Min, s.Max = math.Inf(1), math.Inf(-1)
			}
			for _, v := range mv.Values {
				s.Samples++
				s.Sum += v
				s.Min, s.Max = min(s.Min, v), max(s.Max, v)
			}
			out[name] = s
		}
	}
	return out
}

func TestEMFLines(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		out := &writes{}
		cfg := testConfig(ModeEMF)
		cfg.Stdout = out
		cfg.Dimensions = []Dimension{{"QueueName", "jobs"}, {"Service", "resize"}}
		p, err := NewPublisher(cfg)
		if err != nil {
			t.Fatal(err)
		}
		stop := start(t, p)
		for range 3 {
			p.Add(WorkerErrors, 1)
		}
		p.Add(DeadLetter, 1)
		p.Add(MessagesProcessed, 1)
		p.Add(WorkerDuration, 1200)
		p.Add(WorkerDuration, 80.25)
		p.Add(MessageAge, 40)
		time.Sleep(time.Minute)
		synctest.Wait()

		lines := out.lines()
		if len(lines) != 1 {
			t.Fatalf("%d lines after one window, want 1: %q", len(lines), lines)
		}
		want := map[Metric]stat{
			WorkerErrors:      {1, 3, 3, 3},
			DeadLetter:        {1, 1, 1, 1},
			MessagesProcessed: {1, 1, 1, 1},
			WorkerDuration:    {2, 1280.25, 80.25, 1200},
			MessageAge:        {1, 40, 40, 40},
		}
		for _, dims := range []map[string]string{{"QueueName": "jobs", "Service": "resize"}, {"QueueName": "jobs"}} {
			if diff := cmp.Diff(want, emfTotals(t, lines, dims)); diff != "" {
				t.Errorf("dimensions %v (-want +got):\n%s", dims, diff)
			}
		}
		for _, mv := range parseEMF(t, lines[0]) {
			if mv.Namespace != "Watchbot" || mv.Timestamp != synctestEpoch.Add(time.Minute).UnixMilli() {
				t.Errorf("namespace %q, timestamp %d", mv.Namespace, mv.Timestamp)
			}
		}

		// A quiet window writes nothing; the shutdown flush writes what is left.
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := len(out.lines()); n != 1 {
			t.Errorf("a quiet window wrote %d lines", n-1)
		}
		p.Add(WorkerSpawnErrors, 1)
		stop()
		lines = out.lines()
		if len(lines) != 2 {
			t.Fatalf("%d lines after shutdown, want 2", len(lines))
		}
		if diff := cmp.Diff(map[Metric]stat{WorkerSpawnErrors: {1, 1, 1, 1}}, emfTotals(t, lines[1:], map[string]string{"QueueName": "jobs"})); diff != "" {
			t.Errorf("shutdown flush (-want +got):\n%s", diff)
		}
		if s := p.Stats(); s.Published != 7 || s.Dropped != 0 {
			t.Errorf("stats %+v, want 7 values published (a counter is one value per window)", s)
		}
	})
}

// TestEMFManySamples: windows with more samples than a line may carry are spread over several
// lines so that CloudWatch's SampleCount, Sum, Minimum and Maximum are the window's.
func TestEMFManySamples(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		samples  int
		distinct int
		lines    int
	}{
		{"100 samples fit one line", 100, 100, 1},
		{"101 samples take two", 101, 101, 2},
		{"exact values repeated", 1000, 10, 10},
		{"beyond 150 distinct values", 12345, 12345, 124},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := &writes{}
			cfg := testConfig(ModeEMF)
			cfg.Stdout = out
			p, err := NewPublisher(cfg)
			if err != nil {
				t.Fatal(err)
			}
			want := stat{Min: math.Inf(1), Max: math.Inf(-1)}
			for i := range tt.samples {
				v := float64(i%tt.distinct)*1.5 + 3
				p.Add(WorkerDuration, v)
				want.Samples++
				want.Sum += v
				want.Min, want.Max = min(want.Min, v), max(want.Max, v)
			}
			p.Add(WorkerErrors, 1)
			if err := p.Flush(t.Context()); err != nil {
				t.Fatal(err)
			}
			lines := out.lines()
			if len(lines) != tt.lines {
				t.Errorf("%d lines, want %d", len(lines), tt.lines)
			}
			got := emfTotals(t, lines, map[string]string{"QueueName": "jobs"})
			if g := got[WorkerDuration]; g.Samples != want.Samples || math.Abs(g.Sum-want.Sum) > 1e-9*want.Sum || g.Min != want.Min || g.Max != want.Max {
				t.Errorf("WorkerDuration %+v, want %+v", g, want)
			}
			if got[WorkerErrors] != (stat{1, 1, 1, 1}) {
				t.Errorf("WorkerErrors %+v: a counter must appear once", got[WorkerErrors])
			}
		})
	}
}

func TestEMFWriteFailureIsReported(t *testing.T) {
	t.Parallel()
	out := &writes{fail: errors.New("write /dev/stdout: broken pipe")}
	var logs logBuffer
	cfg := testConfig(ModeEMF)
	cfg.Stdout = out
	cfg.Logger = logs.logger()
	p, err := NewPublisher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.Add(DeadLetter, 1)
	p.Add(DeadLetter, 1)
	p.Add(MessageAge, 10)
	if err := p.Flush(t.Context()); err == nil || !strings.Contains(err.Error(), "broken pipe") {
		t.Fatalf("Flush() = %v, want the write error", err)
	}
	recs := logs.records(t, metricsLost...)
	if len(recs) != 1 {
		t.Fatalf("%d drop records, want 1", len(recs))
	}
	if diff := cmp.Diff(map[string]any{"DeadLetter": 2.0, "MessageAge": 10.0}, recs[0]["lost_sums"]); diff != "" {
		t.Errorf("lost sums (-want +got):\n%s", diff)
	}
	if s := p.Stats(); s.Dropped != 2 || s.Failures != 1 {
		t.Errorf("stats %+v, want 2 values dropped", s)
	}
}
