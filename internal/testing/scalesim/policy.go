package scalesim

import (
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/google/go-cmp/cmp"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/cloudformation"
)

// Target tracking's own alarms, which Application Auto Scaling creates and manages for a
// target tracking policy (they are not in the template): the scale-out alarm fires when the
// metric is above the target for 3 datapoints of one minute, the scale-in alarm when it is
// below the target less about 10 % for 15. AWS documents the margin ("How target tracking
// scaling for Application Auto Scaling works": it "slows down scaling by removing capacity
// only when utilization passes a threshold that is far enough below the target value,
// usually more than 10% lower"); the counts and the 90 % are those of the alarms it creates
// for an ECS service (TargetTracking-…-AlarmHigh "for 3 datapoints within 3 minutes",
// AlarmLow "for 15 datapoints within 15 minutes", as the CloudWatch console lists them).
const (
	trackingHighPeriods = 3
	trackingLowPeriods  = 15
	trackingLowFactor   = 0.9
)

// scaler is a scalable target with its scaling policies and their alarms: what Application
// Auto Scaling does with the template's autoscaling resources.
type scaler struct {
	min, max int
	desired  int
	alarms   []*alarm
	activity []Activity
}

// Activity is one change of the desired count, and the alarm that caused it.
type Activity struct {
	At, From, To int
	Alarm        string
}

func (s *scaler) clamp(n int) int { return max(s.min, min(s.max, n)) }

func (s *scaler) set(now, n int, alarm string) {
	s.activity = append(s.activity, Activity{At: now, From: s.desired, To: n, Alarm: alarm})
	s.desired = n
}

// newScaler reads the autoscaling of tpl, generated from o: its scalable target, and every
// scaling policy with the alarms that invoke it. Anything the model does not know, a metric
// or statistic, an adjustment type, is an error, so the simulation cannot quietly drift from
// the template.
func newScaler(tpl *cloudformation.Template, o cloudformation.Options) (*scaler, error) {
	s := &scaler{}
	step := map[string]*stepPolicy{}
	for _, id := range slices.Sorted(maps.Keys(tpl.Resources)) {
		switch p := tpl.Resources[id].Properties.(type) {
		case *cloudformation.ScalableTarget:
			s.min, s.max = p.MinCapacity, p.MaxCapacity
		case *cloudformation.ScalingPolicy:
			switch {
			case p.PolicyType == "StepScaling" && p.StepScalingPolicyConfiguration != nil:
				cfg := *p.StepScalingPolicyConfiguration
				if !slices.Contains([]string{"ChangeInCapacity", "ExactCapacity"}, cfg.AdjustmentType) ||
					!slices.Contains([]string{"Maximum", "Minimum", "Average"}, cfg.MetricAggregationType) {
					return nil, fmt.Errorf("%s: %s steps aggregated by %s are not modelled", id, cfg.AdjustmentType, cfg.MetricAggregationType)
				}
				step[id] = &stepPolicy{s: s, cfg: cfg, last: math.MinInt32}
			case p.PolicyType == "TargetTrackingScaling" && p.TargetTrackingScalingPolicyConfiguration != nil:
				if err := s.addTracking(id, *p.TargetTrackingScalingPolicyConfiguration, o); err != nil {
					return nil, err
				}
			default:
				return nil, fmt.Errorf("%s: policy type %s is not modelled", id, p.PolicyType)
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(tpl.Resources)) {
		a, ok := tpl.Resources[id].Properties.(*cloudformation.Alarm)
		if !ok {
			continue
		}
		actions, _ := a.AlarmActions.([]any)
		for _, action := range actions {
			ref, _ := action.(cloudformation.Fn)
			policy, ok := step[fmt.Sprint(ref["Ref"])]
			if !ok {
				continue
			}
			sr, err := alarmSeries(a, o)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", id, err)
			}
			al := &alarm{name: id, series: sr, periods: a.EvaluationPeriods, threshold: a.Threshold, cmp: a.ComparisonOperator, onMissing: a.TreatMissingData}
			below := al.below()
			al.onAlarm = func(now int, breach []float64) { policy.invoke(now, breach, below, id) }
			s.alarms = append(s.alarms, al)
		}
	}
	if s.max == 0 || len(s.alarms) == 0 {
		return nil, fmt.Errorf("no scalable target or no scaling alarm in the template")
	}
	return s, nil
}

// metricSource maps a template metric to the model's.
func metricSource(m cloudformation.Metric, o cloudformation.Options) (source, error) {
	queue := []cloudformation.Dimension{{Name: "QueueName", Value: cloudformation.GetAtt(cloudformation.ResQueue, "QueueName")}}
	if !cmp.Equal(m.Dimensions, queue) {
		return 0, fmt.Errorf("metric %s: dimensions %v are not the work queue's", m.MetricName, m.Dimensions)
	}
	switch {
	case m.Namespace == alarms.SQSNamespace && m.MetricName == "ApproximateNumberOfMessagesVisible":
		return srcVisible, nil
	case m.Namespace == alarms.SQSNamespace && m.MetricName == "ApproximateNumberOfMessagesNotVisible":
		return srcNotVisible, nil
	case m.Namespace == o.MetricsNamespace && m.MetricName == string(alarms.WorkerSlots):
		return srcSlots, nil
	case m.Namespace == o.MetricsNamespace && m.MetricName == string(alarms.BusySlots):
		return srcBusy, nil
	}
	return 0, fmt.Errorf("metric %s/%s is not modelled", m.Namespace, m.MetricName)
}

func alarmSeries(a *cloudformation.Alarm, o cloudformation.Options) (series, error) {
	queries := a.Metrics
	if len(queries) == 0 {
		stat := &cloudformation.MetricStat{Metric: cloudformation.Metric{Namespace: a.Namespace, MetricName: a.MetricName, Dimensions: a.Dimensions},
			Period: a.Period, Stat: a.Statistic}
		queries = []cloudformation.MetricDataQuery{{Id: "m", MetricStat: stat, ReturnData: true}}
	}
	return newSeries(queries, o)
}

// newSeries reads a metric-math computation: metrics with their statistic over one-minute
// periods, and expressions.
func newSeries(queries []cloudformation.MetricDataQuery, o cloudformation.Options) (series, error) {
	var sr series
	for _, q := range queries {
		entry := query{id: q.Id, returned: q.ReturnData}
		if m := q.MetricStat; m != nil {
			if m.Period != period {
				return nil, fmt.Errorf("%s: period %d s is not modelled", q.Id, m.Period)
			}
			src, err := metricSource(m.Metric, o)
			if err != nil {
				return nil, err
			}
			if _, err := (datapoints{n: 1}).stat(m.Stat); err != nil {
				return nil, err
			}
			entry.src, entry.stat = src, m.Stat
		} else {
			e, err := parseExpr(q.Expression)
			if err != nil {
				return nil, err
			}
			entry.expr = e
		}
		sr = append(sr, entry)
	}
	return sr, nil
}

// stepPolicy is a step scaling policy ("Step scaling policies for Application Auto Scaling"):
// the alarm's breach, aggregated over its datapoints, picks a step; above the threshold a
// step's lower bound is inclusive and its upper bound exclusive, below it the reverse.
// Cooldown: after an activity, a scale-out happens again only if it is larger, counting the
// capacity the first one added; a scale-in waits for the cooldown to end.
type stepPolicy struct {
	s      *scaler
	cfg    cloudformation.StepScalingPolicyConfiguration
	last   int // time of the last activity that started a cooldown
	before int // the capacity before it
}

func (p *stepPolicy) invoke(now int, breach []float64, below bool, alarm string) {
	x := aggregate(p.cfg.MetricAggregationType, breach)
	adj, ok := pickStep(p.cfg.StepAdjustments, x, below)
	if !ok {
		return
	}
	cur := p.s.desired
	cooling := now < p.last+p.cfg.Cooldown
	base := cur
	if cooling {
		base = p.before
	}
	want := adj // ExactCapacity
	if p.cfg.AdjustmentType == "ChangeInCapacity" {
		want = base + adj
	}
	want = p.s.clamp(want)
	if want == cur || (cooling && want < cur) {
		return
	}
	if !cooling {
		p.last, p.before = now, cur
	}
	p.s.set(now, want, alarm)
}

// aggregate is Maximum, Minimum or Average of vs (not empty).
func aggregate(kind string, vs []float64) float64 {
	switch kind {
	case "Maximum":
		return slices.Max(vs)
	case "Minimum":
		return slices.Min(vs)
	}
	sum := 0.0
	for _, v := range vs {
		sum += v
	}
	return sum / float64(len(vs))
}

func pickStep(steps []cloudformation.StepAdjustment, x float64, below bool) (int, bool) {
	for _, st := range steps {
		lo, hi := math.Inf(-1), math.Inf(1)
		if st.MetricIntervalLowerBound != nil {
			lo = *st.MetricIntervalLowerBound
		}
		if st.MetricIntervalUpperBound != nil {
			hi = *st.MetricIntervalUpperBound
		}
		if (!below && lo <= x && x < hi) || (below && lo < x && x <= hi) {
			return st.ScalingAdjustment, true
		}
	}
	return 0, false
}

// tracking is a target tracking policy ("Target tracking scaling policies for Application
// Auto Scaling"): desired = ceil(capacity × metric ÷ target), from the latest datapoint.
// Scale-out cooldown: another scale-out only if larger, computed from the capacity before the
// one that started the cooldown (the capacity it added counts as part of the next); scale-in
// cooldown: scale-ins wait, scale-outs do not.
type tracking struct {
	s                  *scaler
	cfg                cloudformation.TargetTrackingScalingPolicyConfiguration
	high, low          string // its alarms' names
	lastOut, beforeOut int
	lastIn             int
}

func (s *scaler) addTracking(id string, cfg cloudformation.TargetTrackingScalingPolicyConfiguration, o cloudformation.Options) error {
	if cfg.CustomizedMetricSpecification == nil {
		return fmt.Errorf("%s: only a customized metric is modelled", id)
	}
	// Target tracking reads its metrics in one-minute periods.
	var queries []cloudformation.MetricDataQuery
	for _, q := range cfg.CustomizedMetricSpecification.Metrics {
		mq := cloudformation.MetricDataQuery{Id: q.Id, Expression: q.Expression, ReturnData: q.ReturnData}
		if q.MetricStat != nil {
			mq.MetricStat = &cloudformation.MetricStat{Metric: q.MetricStat.Metric, Period: period, Stat: q.MetricStat.Stat}
		}
		queries = append(queries, mq)
	}
	sr, err := newSeries(queries, o)
	if err != nil {
		return fmt.Errorf("%s: %w", id, err)
	}
	p := &tracking{s: s, cfg: cfg, high: id + "-AlarmHigh", low: id + "-AlarmLow", lastOut: math.MinInt32, lastIn: math.MinInt32}
	target := cfg.TargetValue
	latest := func(breach []float64, threshold float64) float64 { return breach[len(breach)-1] + threshold }
	s.alarms = append(s.alarms,
		&alarm{name: p.high, series: sr, periods: trackingHighPeriods, threshold: target, cmp: "GreaterThanThreshold", onMissing: "missing",
			onAlarm: func(now int, breach []float64) { p.scaleOut(now, latest(breach, target)) }},
		&alarm{name: p.low, series: sr, periods: trackingLowPeriods, threshold: trackingLowFactor * target, cmp: "LessThanThreshold", onMissing: "missing",
			onAlarm: func(now int, breach []float64) { p.scaleIn(now, latest(breach, trackingLowFactor*target)) }},
	)
	return nil
}

// proportional is target tracking's capacity for metric m at capacity c, rounded up (a hair
// of tolerance keeps 5.0000000001 at 5).
func (p *tracking) proportional(c int, m float64) int {
	return p.s.clamp(int(math.Ceil(float64(c)*m/p.cfg.TargetValue - 1e-9)))
}

func (p *tracking) scaleOut(now int, m float64) {
	cur := p.s.desired
	cooling := now < p.lastOut+p.cfg.ScaleOutCooldown
	base := cur
	if cooling {
		base = p.beforeOut
	}
	want := p.proportional(base, m)
	if want <= cur {
		return
	}
	if !cooling {
		p.lastOut, p.beforeOut = now, cur
	}
	p.s.set(now, want, p.high)
}

func (p *tracking) scaleIn(now int, m float64) {
	if p.cfg.DisableScaleIn || now < p.lastIn+p.cfg.ScaleInCooldown {
		return
	}
	cur := p.s.desired
	if want := p.proportional(cur, m); want < cur {
		// A scale-in ends a scale-out's cooldown: the capacity it counted is gone.
		p.lastIn, p.lastOut = now, math.MinInt32
		p.s.set(now, want, p.low)
	}
}
