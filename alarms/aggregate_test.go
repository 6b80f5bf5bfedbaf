package alarms

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestAggregate(t *testing.T) {
	t.Parallel()
	many := make([]float64, 200)
	for i := range many {
		many[i] = float64(i + 1) // 200 distinct values: beyond maxDistinct
	}
	tests := []struct {
		name                 string
		values               []float64
		count, sum, min, max float64
		exact                bool
		wantValues, wantCnts []float64
	}{
		{"one", []float64{7}, 1, 7, 7, 7, true, []float64{7}, []float64{1}},
		{"counts repeated values", []float64{1, 1, 1, 2, 1}, 5, 6, 1, 2, true, []float64{1, 2}, []float64{4, 1}},
		{"negative and zero", []float64{-5, 0, 5}, 3, 0, -5, 5, true, []float64{-5, 0, 5}, []float64{1, 1, 1}},
		{"beyond 150 distinct keeps the statistic set", many, 200, 20100, 1, 200, false,
			[]float64{1, (20100 - 1 - 200) / 198.0, 200}, []float64{1, 198, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newAggregate()
			for _, v := range tt.values {
				a.add(v)
			}
			got := []float64{a.count, a.sum, a.min, a.max}
			if diff := cmp.Diff([]float64{tt.count, tt.sum, tt.min, tt.max}, got); diff != "" {
				t.Errorf("count, sum, min, max (-want +got):\n%s", diff)
			}
			if a.exact() != tt.exact {
				t.Errorf("exact = %v, want %v", a.exact(), tt.exact)
			}
			values, counts := a.valueCounts()
			if diff := cmp.Diff(tt.wantValues, values); diff != "" {
				t.Errorf("values (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantCnts, counts); diff != "" {
				t.Errorf("counts (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSampleChunksKeepStatistics checks that the samples handed out in chunks add up to the
// window's statistic set, whether the window is exact or synthesized.
func TestSampleChunksKeepStatistics(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 2, 3, 99, 100, 101, 150, 151, 1000, 12345} {
		a := newAggregate()
		for i := range n {
			a.add(float64(i%400) + 0.5)
		}
		s := newSampleChunks(a)
		var count, sum float64
		lo, hi := math.Inf(1), math.Inf(-1)
		chunks := 0
		for chunk := s.next(maxEMFValues); chunk != nil; chunk = s.next(maxEMFValues) {
			if len(chunk) > maxEMFValues {
				t.Fatalf("n=%d: chunk of %d values", n, len(chunk))
			}
			chunks++
			for _, v := range chunk {
				count++
				sum += v
				lo, hi = min(lo, v), max(hi, v)
			}
		}
		if count != a.count || math.Abs(sum-a.sum) > 1e-6*a.sum || lo != a.min || hi != a.max {
			t.Errorf("n=%d: samples give count %v sum %v min %v max %v; window has %v %v %v %v",
				n, count, sum, lo, hi, a.count, a.sum, a.min, a.max)
		}
		if want := (n + maxEMFValues - 1) / maxEMFValues; chunks != want {
			t.Errorf("n=%d: %d chunks, want %d", n, chunks, want)
		}
	}
}

func TestValidValue(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		v    float64
		want bool
	}{
		{0, true}, {-1, true}, {1e108, true}, {1e300, false}, {math.Ldexp(1, 360), true}, {-math.Ldexp(1, 360), true},
		{math.Ldexp(1, 361), false}, {math.NaN(), false}, {math.Inf(1), false}, {math.Inf(-1), false},
	} {
		if got := validValue(tt.v); got != tt.want {
			t.Errorf("validValue(%v) = %v, want %v", tt.v, got, tt.want)
		}
	}
}

func TestSplitRequests(t *testing.T) {
	t.Parallel()
	sized := func(sizes ...int) []datum {
		ds := make([]datum, len(sizes))
		for i, s := range sizes {
			ds[i].size = s
		}
		return ds
	}
	repeat := func(n, size int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = size
		}
		return s
	}
	tests := []struct {
		name               string
		ds                 []datum
		maxDatums, maxSize int
		want               []int // datums per request
	}{
		{"empty", nil, 1000, 1000, nil},
		{"one request", sized(repeat(10, 10)...), 1000, 1000, []int{10}},
		{"exactly 1000", sized(repeat(1000, 1)...), 1000, 1 << 20, []int{1000}},
		{"1001 datums", sized(repeat(1001, 1)...), 1000, 1 << 20, []int{1000, 1}},
		{"2500 datums", sized(repeat(2500, 1)...), 1000, 1 << 20, []int{1000, 1000, 500}},
		{"bytes bind first", sized(repeat(10, 300)...), 1000, 1000, []int{3, 3, 3, 1}},
		{"a datum filling a request", sized(1000, 1, 1000), 1000, 1000, []int{1, 1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []int
			total := 0
			for _, req := range splitRequests(tt.ds, tt.maxDatums, tt.maxSize) {
				got = append(got, len(req))
				size := 0
				for _, d := range req {
					size += d.size
				}
				if size > tt.maxSize && len(req) > 1 {
					t.Errorf("request of %d bytes, limit %d", size, tt.maxSize)
				}
				total += len(req)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("request sizes (-want +got):\n%s", diff)
			}
			if total != len(tt.ds) {
				t.Errorf("%d datums sent, want %d", total, len(tt.ds))
			}
		})
	}
}
