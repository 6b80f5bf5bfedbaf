package scalesim

import (
	"math"
	"testing"
	"time"

	"github.com/watchbot/watchbot/cloudformation"
)

func TestParseExpr(t *testing.T) {
	env := map[string]value{"visible": some(50), "busy": some(6), "slots": some(8), "none": missing}
	for _, c := range []struct {
		expr string
		want value
	}{
		{"visible + 10 * busy", some(110)},
		{"(visible + 10 * busy) / slots", some(13.75)},
		{"visible - busy - 4", some(40)},
		{"-busy + 1", some(-5)},
		{"2 * (3 + 4) / 7", some(2)},
		{"visible > 5 * slots", some(1)},
		{"visible >= 50 AND busy == 6", some(1)},
		{"visible < 50 || busy != 6", some(0)},
		{"IF(visible > 20 * slots, visible, 0)", some(0)},
		{"IF(slots == 8, visible, 0)", some(50)},
		// Missing data: arithmetic and comparisons give no datapoint, FILL gives one.
		{"none + 1", missing},
		{"none > 0", missing},
		{"IF(none == 0, visible, 0)", missing},
		{"FILL(none, 0)", some(0)},
		{"IF(FILL(none, 0) == 0, visible, 0)", some(50)},
		{"IF(FILL(slots, 0) == 0, visible, 0)", some(0)},
		{"visible / (slots - 8)", missing},
		{"unknown", missing},
	} {
		e, err := parseExpr(c.expr)
		if err != nil {
			t.Errorf("%s: %v", c.expr, err)
			continue
		}
		if got := e(env); got != c.want {
			t.Errorf("%s = %+v, want %+v", c.expr, got, c.want)
		}
	}
	for _, bad := range []string{"", "visible +", "(visible", "IF(visible, 1)", "METRICS()", "visible $ 2", "FILL(visible, 0"} {
		if _, err := parseExpr(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func bound(v float64) *float64 { return &v }

func TestPickStep(t *testing.T) {
	out := []cloudformation.StepAdjustment{
		{MetricIntervalLowerBound: bound(0), MetricIntervalUpperBound: bound(10), ScalingAdjustment: 1},
		{MetricIntervalLowerBound: bound(10), ScalingAdjustment: 5},
	}
	in := []cloudformation.StepAdjustment{
		{MetricIntervalLowerBound: bound(-10), MetricIntervalUpperBound: bound(0), ScalingAdjustment: -1},
		{MetricIntervalUpperBound: bound(-10), ScalingAdjustment: -5},
	}
	for _, c := range []struct {
		steps []cloudformation.StepAdjustment
		x     float64
		below bool
		want  int
		ok    bool
	}{
		// Above the threshold: lower bound inclusive, upper exclusive.
		{out, 0, false, 1, true},
		{out, 9.9, false, 1, true},
		{out, 10, false, 5, true},
		{out, -1, false, 0, false},
		// Below: lower exclusive, upper inclusive.
		{in, 0, true, -1, true},
		{in, -10, true, -5, true},
		{in, -9.9, true, -1, true},
	} {
		got, ok := pickStep(c.steps, c.x, c.below)
		if got != c.want || ok != c.ok {
			t.Errorf("pickStep(%v, below %v) = %d, %v; want %d, %v", c.x, c.below, got, ok, c.want, c.ok)
		}
	}
}

// TestTrackingArithmetic follows target tracking: desired = ceil(capacity × metric ÷
// target), scale-outs in the cooldown computed from the capacity before it, scale-ins held
// by theirs, a scale-out never held by a scale-in's.
func TestTrackingArithmetic(t *testing.T) {
	s := &scaler{min: 0, max: 50, desired: 4}
	p := &tracking{s: s, cfg: cloudformation.TargetTrackingScalingPolicyConfiguration{TargetValue: 10, ScaleOutCooldown: 300, ScaleInCooldown: 300},
		lastOut: math.MinInt32, lastIn: math.MinInt32}
	steps := []struct {
		at      int
		out     bool
		metric  float64
		desired int
	}{
		{0, true, 13.75, 6},    // ceil(4 × 13.75 / 10) = ceil(5.5)
		{60, true, 13.75, 6},   // in the cooldown, from 4 again: no more
		{120, true, 20, 8},     // a larger demand in the cooldown: ceil(4 × 20 / 10)
		{240, true, 10.1, 8},   // from 4: 5, not larger
		{300, true, 10.1, 9},   // cooldown over: ceil(8 × 10.1 / 10) = 9
		{360, false, 5, 5},     // scale-in: ceil(9 × 5 / 10)
		{420, false, 2, 5},     // held by the scale-in cooldown
		{480, true, 30, 15},    // a scale-out is not: from 5, the capacity before it
		{900, false, 0, 0},     // idle: to the minimum
		{960, true, 1000, 0},   // from zero, target tracking multiplies nothing
		{1200, false, 9.5, 0},  // nothing to remove
		{1300, true, 1e9, 0},   // still nothing
		{1400, false, 1e9, 0},  // a high metric never scales in
		{1500, true, 12.01, 0}, // nor out from zero
	}
	for _, st := range steps {
		if st.out {
			p.scaleOut(st.at, st.metric)
		} else {
			p.scaleIn(st.at, st.metric)
		}
		if s.desired != st.desired {
			t.Fatalf("at %d (%s %v): desired %d, want %d", st.at, map[bool]string{true: "out", false: "in"}[st.out], st.metric, s.desired, st.desired)
		}
	}
}

func TestStepCooldown(t *testing.T) {
	s := &scaler{min: 0, max: 20, desired: 2}
	p := &stepPolicy{s: s, last: math.MinInt32, cfg: cloudformation.StepScalingPolicyConfiguration{
		AdjustmentType: "ChangeInCapacity", Cooldown: 60, MetricAggregationType: "Maximum",
		StepAdjustments: cloudformation.ScaleOutSteps(1, 20),
	}}
	p.invoke(0, []float64{3}, false, "a")
	if s.desired != 3 {
		t.Fatalf("+1: %d", s.desired)
	}
	p.invoke(30, []float64{3}, false, "a")
	if s.desired != 3 {
		t.Fatalf("same step in the cooldown: %d", s.desired)
	}
	p.invoke(45, []float64{50}, false, "a") // +2, from the capacity before the cooldown
	if s.desired != 4 {
		t.Fatalf("larger step in the cooldown: %d", s.desired)
	}
	p.invoke(60, []float64{3}, false, "a")
	if s.desired != 5 {
		t.Fatalf("after the cooldown: %d", s.desired)
	}
	in := &stepPolicy{s: s, last: math.MinInt32, cfg: cloudformation.StepScalingPolicyConfiguration{
		AdjustmentType: "ExactCapacity", Cooldown: 60, MetricAggregationType: "Maximum",
		StepAdjustments: []cloudformation.StepAdjustment{{MetricIntervalUpperBound: bound(0), ScalingAdjustment: 0}},
	}}
	in.invoke(100, []float64{0, 0}, true, "b")
	if s.desired != 0 {
		t.Fatalf("exact capacity 0: %d", s.desired)
	}
	if got := aggregate("Average", []float64{1, 2, 6}); got != 3 {
		t.Errorf("Average = %v", got)
	}
}

func TestAlarmEvaluate(t *testing.T) {
	cw := &cloudWatch{}
	for n, v := range []float64{5, 0, 7, 8} {
		cw.put(srcVisible, n*period+sqsSample, v)
	}
	visible := series{{id: "m", src: srcVisible, stat: "Maximum", returned: true}}
	for _, c := range []struct {
		periods   int
		cmp       string
		threshold float64
		missing   string
		last      int
		want      []float64 // nil: no action
	}{
		{1, "GreaterThanThreshold", 0, "notBreaching", 0, []float64{5}},
		{1, "GreaterThanThreshold", 0, "notBreaching", 1, nil},
		{2, "GreaterThanThreshold", 6, "notBreaching", 3, []float64{1, 2}},
		{3, "GreaterThanThreshold", 0, "notBreaching", 3, nil},
		{2, "GreaterThanThreshold", 6, "notBreaching", 4, nil},                // period 4 has no data
		{2, "LessThanOrEqualToThreshold", 0, "breaching", 5, []float64{0, 0}}, // missing counts as at the threshold
		{2, "LessThanOrEqualToThreshold", 0, "breaching", 2, nil},
		{1, "GreaterThanThreshold", 0, "missing", 4, nil},
	} {
		var got []float64
		a := &alarm{name: "a", series: visible, periods: c.periods, threshold: c.threshold, cmp: c.cmp, onMissing: c.missing,
			onAlarm: func(_ int, breach []float64) { got = breach }}
		if err := a.evaluate(cw, 0, c.last); err != nil {
			t.Fatal(err)
		}
		if len(got) != len(c.want) || (got != nil && (got[0] != c.want[0] || got[len(got)-1] != c.want[len(c.want)-1])) {
			t.Errorf("%+v: breach %v, want %v", c, got, c.want)
		}
	}
}

// newTestWorld returns a world for load under policy, generated from Options(load), after
// tweak changed the template.
func newTestWorld(t *testing.T, load Load, policy Policy, tweak func(*cloudformation.Template)) *world {
	t.Helper()
	o := withMetrics(Options(load), policy.Metrics)
	tpl, err := cloudformation.Generate(o)
	if err != nil {
		t.Fatal(err)
	}
	if tweak != nil {
		tweak(tpl)
	}
	w, err := newWorld(load, policy, o, tpl)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// busyTask is a running task, started at 0, whose slots run jobs of the given ends.
func busyTask(ends ...int) *task {
	k := &task{ready: 0, nextGauges: period, lastBusy: 0}
	for _, end := range ends {
		k.jobs = append(k.jobs, job{sent: 0, end: end})
	}
	return k
}

// TestScaleInSkipsProtectedTasks: ECS stops tasks above the desired count, but not a
// protected one; an unprotected busy task is stopped and its job cut when it outlives
// --shutdown-timeout, its message visible again.
func TestScaleInSkipsProtectedTasks(t *testing.T) {
	load := Load{Name: "idle", Job: 10 * time.Minute, Horizon: time.Minute}
	for _, protect := range []bool{true, false} {
		w := newTestWorld(t, load, Policy{Metrics: cloudformation.MetricsNone, Protection: protect, ProtectionIdle: ProtectionIdle}, nil)
		w.tasks = []*task{busyTask(600), busyTask(), busyTask(15)}
		w.tasks[1].lastBusy = math.MinInt32 // idle long since
		// Up to the end of the idle hold after the job that ends at 15 s (its last busy
		// second is 14).
		for t := range 14 + int(ProtectionIdle/time.Second) {
			if err := w.step(t); err != nil {
				panic(err)
			}
		}
		// The idle task went at once; the one whose job ended at 15 s went then (its job
		// done) when unprotected, and stays protected for the idle time when protected.
		switch {
		case protect && (len(w.tasks) != 2 || w.result.Cut != 0 || w.tasks[0].stopping):
			t.Errorf("protected: %d tasks, %d cut", len(w.tasks), w.result.Cut)
		case !protect && (len(w.tasks) != 0 || w.result.Cut != 1 || w.visible.len() != 1 || w.result.Done != 1):
			t.Errorf("unprotected: %d tasks, %d cut, %d visible, %d done", len(w.tasks), w.result.Cut, w.visible.len(), w.result.Done)
		}
	}
}

// TestStalledScaleOut: a scale-in to zero while a protected task still runs leaves a desired
// count of zero that target tracking cannot multiply, and a task that reports slots, so the
// scale-from-zero alarm is silent. The stalled alarm sets the capacity the backlog needs;
// without it the service stays at the one task while the backlog grows.
func TestStalledScaleOut(t *testing.T) {
	// Quiet for 10 minutes while the task's jobs run and its gauges reach CloudWatch, then a
	// message a second for an hour: more than one task's 4 slots of 30 s jobs can serve.
	const quiet = 600
	load := Load{Name: "stall", Job: 30 * time.Second, Duration: quiet*time.Second + time.Hour, Horizon: 2 * time.Hour,
		Rate: func(t int) float64 { return float64(min(1, max(0, t-quiet+1))) }}
	policy := Policies[len(Policies)-1]
	for _, stalled := range []bool{true, false} {
		w := newTestWorld(t, load, policy, func(tpl *cloudformation.Template) {
			if !stalled {
				delete(tpl.Resources, cloudformation.ResScaleOutStalledAlarm)
			}
		})
		w.tasks = []*task{busyTask(quiet, quiet, quiet, quiet)}
		r, err := w.run()
		if err != nil {
			t.Fatal(err)
		}
		var rescued bool
		for _, a := range r.Activity {
			rescued = rescued || (a.Alarm == cloudformation.ResScaleOutStalledAlarm && a.From == 0)
		}
		switch {
		case stalled && (!rescued || r.Drained < 0 || r.Activity[0].At > quiet+(cloudformation.StalledMinutes+3)*period):
			t.Errorf("with the stalled alarm: %v, %+v", r, r.Activity)
		case !stalled && (r.Drained >= 0 || r.Peak != 1):
			t.Errorf("without the stalled alarm the service recovered: %v", r)
		}
	}
}
