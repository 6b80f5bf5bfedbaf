package alarms

import (
	"math"
	"slices"
)

// maxDistinct is how many distinct values a window keeps exactly per metric: PutMetricData
// takes at most 150 values per datum. Beyond it a window keeps only its statistic set.
const maxDistinct = 150

// maxValue bounds the magnitude CloudWatch accepts (2^360); larger values are refused.
var maxValue = math.Ldexp(1, 360)

// validValue reports whether CloudWatch accepts v: finite and within ±2^360.
func validValue(v float64) bool {
	return !math.IsNaN(v) && !math.IsInf(v, 0) && math.Abs(v) <= maxValue
}

// aggregate is one metric's values within a flush window: a statistic set, plus the exact
// distinct values and their counts while there are at most maxDistinct of them.
type aggregate struct {
	count, sum, min, max float64
	// distinct maps value → occurrences; nil once the window saw more than maxDistinct values.
	distinct map[float64]float64
}

func newAggregate() *aggregate {
	return &aggregate{distinct: make(map[float64]float64)}
}

// add records one value; callers have checked it with validValue.
func (a *aggregate) add(v float64) {
	if a.count == 0 || v < a.min {
		a.min = v
	}
	if a.count == 0 || v > a.max {
		a.max = v
	}
	a.count++
	a.sum += v
	if a.distinct == nil {
		return
	}
	if _, ok := a.distinct[v]; !ok && len(a.distinct) == maxDistinct {
		a.distinct = nil
		return
	}
	a.distinct[v]++
}

// exact reports whether the window still holds every value exactly.
func (a *aggregate) exact() bool { return a.distinct != nil }

// valueCounts returns the window's values in ascending order with their occurrences. While the
// window is exact they are the values recorded; beyond maxDistinct they are synthesized from the
// statistic set (min once, max once, the mean of the rest count−2 times), which keeps
// SampleCount, Sum, Minimum, Maximum and Average exact but not percentiles.
func (a *aggregate) valueCounts() (values, counts []float64) {
	if a.exact() {
		values = make([]float64, 0, len(a.distinct))
		for v := range a.distinct {
			values = append(values, v)
		}
		slices.Sort(values)
		counts = make([]float64, len(values))
		for i, v := range values {
			counts[i] = a.distinct[v]
		}
		return values, counts
	}
	switch {
	case a.count == 1:
		return []float64{a.sum}, []float64{1}
	case a.count == 2:
		return []float64{a.min, a.max}, []float64{1, 1}
	}
	rest := (a.sum - a.min - a.max) / (a.count - 2)
	return []float64{a.min, rest, a.max}, []float64{1, a.count - 2, 1}
}

// sampleChunks hands out a window's samples (each value repeated as often as it occurred) in chunks.
type sampleChunks struct {
	values, counts []float64
	i              int
	used           float64 // occurrences of values[i] already handed out
}

func newSampleChunks(a *aggregate) *sampleChunks {
	values, counts := a.valueCounts()
	return &sampleChunks{values: values, counts: counts}
}

// next returns up to n further samples, or nil when none are left.
func (s *sampleChunks) next(n int) []float64 {
	var out []float64
	for len(out) < n && s.i < len(s.values) {
		out = append(out, s.values[s.i])
		s.used++
		if s.used >= s.counts[s.i] {
			s.i++
			s.used = 0
		}
	}
	return out
}
