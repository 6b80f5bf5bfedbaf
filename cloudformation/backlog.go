package cloudformation

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/setting"
)

// Backlog scaling, the policy of every stack whose tasks publish watchbot's metrics. One
// number is tracked, the backlog per worker slot:
//
//	backlogPerSlot = (visible + k × busy) / slots, target k = Options.BacklogPerSlot
//
// visible is the queue's ApproximateNumberOfMessagesVisible (AWS/SQS, Average over the minute:
// SQS samples it once a minute), busy and slots the Sums over the minute of the BusySlots and
// WorkerSlots gauges each task publishes once a minute, so the service's busy and total
// slots. A busy slot counts as a full slot's backlog, k: target tracking's arithmetic,
// desired = ceil(tasks × backlogPerSlot ÷ k), then asks for
//
//	ceil((busy + visible ÷ k) ÷ concurrency) tasks,
//
// a slot for every running job and one more for every k waiting messages, which start within
// the target latency. Capacity follows the work both ways: as jobs end and nothing waits, the
// metric falls and target tracking scales in, down to --min-tasks when idle. Counting the
// running jobs in full keeps a busy service with an empty queue from reading as idle, and
// ECS stops only tasks that are not protected from scale-in, which listen's
// --scale-in-protection keeps on while a task holds a message.
//
// Without tasks there are no slots, the metric has no data and target tracking does nothing
// (0 × anything is 0): the scale-from-zero rule starts tasks for a backlog nothing serves.
//
// Constants named and defined once here, and read from the template by the simulation in
// internal/testing/scalesim, which reports what they do under load in docs/template.md.
const (
	// BacklogScaleOutCooldown covers the time from a scale-out until its tasks show in
	// slots: a Fargate task starts in about a minute, publishes its first gauges a minute
	// later, and CloudWatch completes that minute's datapoint another minute or so after.
	// During the cooldown target tracking scales out further only for a larger demand,
	// computed from the capacity before the scale-out (Application Auto Scaling User Guide,
	// "Target tracking scaling policies": cooldown period), so the missing slots of tasks
	// still starting do not make it add tasks twice; after it, the metric counts them.
	BacklogScaleOutCooldown = 5 * time.Minute
	// BacklogScaleInCooldown lets stopped tasks leave the metric before the next scale-in: a
	// task drains for at most its StopTimeout (120 s on Fargate), then a minute's datapoint
	// has to pass. Target tracking's own scale-in alarm already waits for 15 minutes below
	// the target, and scales out at once whatever this cooldown.
	BacklogScaleInCooldown = 5 * time.Minute
	// ScaleFromZeroCooldown, like BacklogScaleOutCooldown, covers the time until the tasks
	// the rule started report slots; meanwhile the rule adds tasks only for a larger backlog
	// (the tasks it already added count), so it does not start them again. The rule adds
	// (ChangeInCapacity) rather than sets a count: a count could lower what target tracking
	// asked for while the tasks were starting.
	ScaleFromZeroCooldown = BacklogScaleOutCooldown
	// StalledFactor and StalledMinutes define a stalled scale-out: a backlog per slot above
	// StalledFactor × the target for StalledMinutes one-minute datapoints in a row. Target
	// tracking answers such a backlog within three datapoints, and its tasks show up a few
	// minutes later; a backlog that stays is one it cannot answer, because it multiplies a
	// desired count of zero: tasks still finishing their jobs after a scale-in to zero keep
	// their protection, run on, and report slots, so the scale-from-zero rule sees tasks.
	StalledFactor  = 2
	StalledMinutes = 10
)

// The ids of the backlog metrics in the metric-math expressions.
const (
	idVisible = "visible"
	idBusy    = "busy"
	idSlots   = "slots"
	idDemand  = "demand"
)

// backlogQueries returns the three metrics of backlog scaling and the demand expression,
// visible + k × busy: the backlog the slots must carry, counting each busy slot as full.
// With several queues, visible and busy are the sums over the queues (each queue reports its
// own busy slots), and slots the first queue's: the queues share the task's slots, and each
// reports them all.
func (g *generator) backlogQueries() (visible, busy metricSum, slots MetricStat, demand string) {
	stat := func(m Metric, s string) MetricStat { return MetricStat{Metric: m, Period: 60, Stat: s} }
	qs := g.workQueues()
	return sumOver(idVisible, qs, func(q workQueue) MetricStat {
			return stat(sqsMetric(q, "ApproximateNumberOfMessagesVisible"), "Average")
		}),
		sumOver(idBusy, qs, func(q workQueue) MetricStat { return stat(g.ownMetric(q, alarms.BusySlots), "Sum") }),
		stat(g.ownMetric(qs[0], alarms.WorkerSlots), "Sum"),
		fmt.Sprintf("%s + %s * %s", idVisible, formatNumber(g.o.BacklogPerSlot()), idBusy)
}

func formatNumber(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func (g *generator) backlogScaling() {
	visible, busy, slots, demand := g.backlogQueries()
	k := g.o.BacklogPerSlot()
	tracked := func(id string, m MetricStat) TargetTrackingMetricDataQuery {
		return TargetTrackingMetricDataQuery{Id: id, MetricStat: &TargetTrackingMetricStat{Metric: m.Metric, Stat: m.Stat}}
	}
	g.add(ResBacklogPolicy, Resource{Type: "AWS::ApplicationAutoScaling::ScalingPolicy", Properties: &ScalingPolicy{
		PolicyName:      sub(g.name("-backlog")),
		PolicyType:      "TargetTrackingScaling",
		ScalingTargetId: Ref(ResScalableTarget),
		TargetTrackingScalingPolicyConfiguration: &TargetTrackingScalingPolicyConfiguration{
			TargetValue: k,
			CustomizedMetricSpecification: &CustomizedMetricSpecification{Metrics: slices.Concat(
				visible.trackedQueries(),
				busy.trackedQueries(),
				[]TargetTrackingMetricDataQuery{
					tracked(idSlots, slots),
					{Id: idDemand, Expression: demand, Label: "backlog the slots carry, each busy slot counted as full"},
					{Id: "backlogPerSlot", Expression: idDemand + " / " + idSlots, Label: "backlog per worker slot", ReturnData: true},
				})},
			// Scale-in is how an idle service shrinks: protection, not this flag, keeps
			// busy tasks from being stopped.
			DisableScaleIn:   false,
			ScaleOutCooldown: seconds(BacklogScaleOutCooldown),
			ScaleInCooldown:  seconds(BacklogScaleInCooldown),
		},
	}})

	g.add(ResScaleFromZeroPolicy, Resource{Type: "AWS::ApplicationAutoScaling::ScalingPolicy", Properties: &ScalingPolicy{
		PolicyName:      sub(g.name("-scale-from-zero")),
		PolicyType:      "StepScaling",
		ScalingTargetId: Ref(ResScalableTarget),
		StepScalingPolicyConfiguration: &StepScalingPolicyConfiguration{
			AdjustmentType: "ChangeInCapacity", Cooldown: seconds(ScaleFromZeroCooldown), MetricAggregationType: "Maximum",
			StepAdjustments: ScaleFromZeroSteps(float64(g.o.Concurrency)*k, g.o.MaxTasks),
		},
	}})
	result := func(expression string) MetricDataQuery {
		return MetricDataQuery{Id: "result", Expression: expression, ReturnData: true}
	}
	actions := []any{Ref(ResScaleFromZeroPolicy)}
	g.add(ResScaleFromZeroAlarm, Resource{Type: "AWS::CloudWatch::Alarm", Properties: &Alarm{
		AlarmName: sub(g.name("-scale-from-zero")),
		AlarmDescription: "Messages are waiting and no task reports worker slots: start the tasks the backlog needs. " +
			"Target tracking cannot scale out from zero tasks.",
		// FILL: with no task, the slots metric has no data at all.
		Metrics: slices.Concat(visible.alarmQueries(), []MetricDataQuery{
			{Id: idSlots, MetricStat: &slots},
			result(fmt.Sprintf("IF(FILL(%s, 0) == 0, %s, 0)", idSlots, idVisible)),
		}),
		EvaluationPeriods: 1, Threshold: 0, ComparisonOperator: "GreaterThanThreshold",
		// An idle queue's metrics stop after a while: no data means nothing waits.
		TreatMissingData: "notBreaching",
		AlarmActions:     actions,
	}})
	g.add(ResScaleOutStalledAlarm, Resource{Type: "AWS::CloudWatch::Alarm", Properties: &Alarm{
		AlarmName: sub(g.name("-scale-out-stalled")),
		AlarmDescription: fmt.Sprintf("The backlog per slot has stayed above %d times the target for %d minutes: add the tasks "+
			"the backlog needs. It happens after a scale-in to zero while protected tasks still run.", StalledFactor, StalledMinutes),
		Metrics: slices.Concat(visible.alarmQueries(), busy.alarmQueries(), []MetricDataQuery{
			{Id: idSlots, MetricStat: &slots},
			{Id: idDemand, Expression: demand},
			result(fmt.Sprintf("IF(%s > %s * %s, %s, 0)", idDemand, formatNumber(StalledFactor*k), idSlots, idDemand)),
		}),
		EvaluationPeriods: StalledMinutes, Threshold: 0, ComparisonOperator: "GreaterThanThreshold",
		TreatMissingData: "notBreaching",
		AlarmActions:     actions,
	}})
}

// ScaleFromZeroSteps are the tasks the scale-from-zero rule adds, by demand (the backlog
// visible + k × busy): perTask (concurrency × k) of it per task, rounded up to the
// next of 1, 2, 3, 5, 8, 12, … tasks (half as many again each step), and --max-tasks beyond
// the last below it. Above about 3,500 tasks that needs more steps than the 20 Application
// Auto Scaling allows, and the counts double instead (1, 2, 4, 8, …). The overshoot, less
// than the growth, is trimmed by target tracking once the tasks report; the simulation
// shows the finer steps start less surplus on a steady load.
func ScaleFromZeroSteps(perTask float64, maxTasks int) []StepAdjustment {
	const maxSteps = 20
	var steps []StepAdjustment
	for _, grow := range []func(n int) int{
		func(n int) int { return max(n+1, (3*n+1)/2) },
		func(n int) int { return 2 * n },
	} {
		steps = steps[:0]
		lower := 0.0
		for n := 1; n < maxTasks; n = grow(n) {
			upper := float64(n) * perTask
			steps = append(steps, StepAdjustment{MetricIntervalLowerBound: ptr(lower), MetricIntervalUpperBound: ptr(upper), ScalingAdjustment: n})
			lower = upper
		}
		steps = append(steps, StepAdjustment{MetricIntervalLowerBound: ptr(lower), ScalingAdjustment: maxTasks})
		if len(steps) <= maxSteps {
			break
		}
	}
	return steps
}

// Bounds of the backlog target.
const (
	// MinTargetLatency is CloudWatch's period: a latency finer than the metrics means nothing.
	MinTargetLatency = time.Minute
	// MaxExpectedJobDuration is SQS's longest lease: no job runs longer on one receive.
	MaxExpectedJobDuration = 12 * time.Hour
)

func (o Options) validateBacklogTarget() error {
	if o.Metrics == MetricsNone {
		// Backlog scaling counts the slots watchbot's metrics report; without them the stack
		// scales on the visible messages alone, and these would silently do nothing.
		def := DefaultOptions()
		for _, unused := range []struct {
			name         setting.Name
			value, unset time.Duration
		}{{setting.TargetLatency, o.TargetLatency, def.TargetLatency}, {setting.ExpectedJobDuration, o.ExpectedJobDuration, def.ExpectedJobDuration}} {
			if unused.value != unused.unset {
				return setting.Refuse("", nil, fmt.Sprintf("%s needs watchbot's metrics (%s emf or cloudwatch): with %[2]s none the stack scales on the visible messages alone",
					setting.Ref(unused.name), setting.Ref(listenspec.SettingMetrics)))
			}
		}
		return nil
	}
	switch {
	case o.TargetLatency%time.Second != 0 || o.TargetLatency < MinTargetLatency:
		return setting.Refuse(setting.TargetLatency, o.TargetLatency, fmt.Sprintf("must be a whole number of seconds, at least %v", MinTargetLatency))
	case o.TargetLatency >= o.QueueRetention:
		return setting.Refuse(setting.TargetLatency, o.TargetLatency, fmt.Sprintf("must be shorter than %s (%v): messages would expire while they wait", setting.Ref(setting.QueueRetention), o.QueueRetention))
	case o.ExpectedJobDuration%time.Second != 0 || o.ExpectedJobDuration < time.Second || o.ExpectedJobDuration > MaxExpectedJobDuration:
		return setting.Refuse(setting.ExpectedJobDuration, o.ExpectedJobDuration, fmt.Sprintf("must be a whole number of seconds between 1s and %v", MaxExpectedJobDuration))
	}
	return nil
}

// BacklogPerSlot is the target of backlog scaling, after AWS's "backlog per instance"
// guidance (acceptable latency ÷ average processing time): the messages one worker slot may
// have waiting for it, TargetLatency ÷ ExpectedJobDuration, rounded to three decimals. It is
// at least 1: a message cannot start sooner than when a slot is free for it, so a latency
// shorter than a job asks for a free slot for every waiting message, and no more.
//
// With the defaults, 5m ÷ 1m = 5; for 30 s jobs, 5m ÷ 30s = 10.
func (o Options) BacklogPerSlot() float64 {
	k := o.TargetLatency.Seconds() / o.ExpectedJobDuration.Seconds()
	return max(1, math.Round(k*1000)/1000)
}
