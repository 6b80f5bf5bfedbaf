package cloudformation

import (
	"slices"

	"github.com/watchbot/watchbot/alarms"
)

// autoscaling adds the service's scalable target and its policies: backlog scaling when the
// tasks publish watchbot's metrics, visible scaling when they do not.
func (g *generator) autoscaling() {
	g.add(ResScalableTarget, Resource{Type: "AWS::ApplicationAutoScaling::ScalableTarget", Properties: &ScalableTarget{
		ServiceNamespace:  "ecs",
		ScalableDimension: "ecs:service:DesiredCount",
		ResourceId:        Join("/", "service", Ref(ParamCluster), GetAtt(ResService, "Name")),
		// ECS's service-linked role for Application Auto Scaling; AWS creates it on first use.
		RoleARN:     Sub("arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/ecs.application-autoscaling.amazonaws.com/AWSServiceRoleForApplicationAutoScaling_ECSService"),
		MinCapacity: g.o.MinTasks,
		MaxCapacity: g.o.MaxTasks,
	}})
	if g.o.Metrics == MetricsNone {
		g.visibleScaling()
		return
	}
	g.backlogScaling()
}

// sqsMetric is an AWS/SQS metric of the work queue q.
func sqsMetric(q workQueue, name string) Metric {
	return Metric{Namespace: alarms.SQSNamespace, MetricName: name, Dimensions: []Dimension{{Name: "QueueName", Value: GetAtt(q.id, "QueueName")}}}
}

// ownMetric is one of watchbot's metrics of the work queue q, in the metrics namespace.
func (g *generator) ownMetric(q workQueue, m alarms.Metric) Metric {
	return Metric{Namespace: g.o.MetricsNamespace, MetricName: string(m), Dimensions: []Dimension{{Name: "QueueName", Value: GetAtt(q.id, "QueueName")}}}
}

// ptr is v for the optional bounds of a step.
func ptr(v float64) *float64 { return &v }

// ScaleOutSteps are the task-count increases of visible scaling while messages are visible,
// by backlog: up to 10 messages per worker slot +1 task, up to 100 per slot a tenth of
// --max-tasks (at least 2), beyond that a quarter (at least 4). MaxCapacity caps every step.
func ScaleOutSteps(concurrency, maxTasks int) []StepAdjustment {
	low, high := float64(10*concurrency), float64(100*concurrency)
	return []StepAdjustment{
		{MetricIntervalLowerBound: ptr(0), MetricIntervalUpperBound: &low, ScalingAdjustment: 1},
		{MetricIntervalLowerBound: &low, MetricIntervalUpperBound: &high, ScalingAdjustment: max(2, (maxTasks+9)/10)},
		{MetricIntervalLowerBound: &high, ScalingAdjustment: max(4, (maxTasks+3)/4)},
	}
}

// visibleScaling is the policy of a stack without watchbot's metrics (--metrics none), which
// has no measure of its capacity: step scaling out while messages are visible, and back to
// --min-tasks only when visible plus in-flight messages have been 0 for 5 minutes. Under a
// steady load it never scales in; listen's scale-in protection keeps the scale-in from
// stopping a task that took a message meanwhile.
func (g *generator) visibleScaling() {
	g.add(ResScaleOutPolicy, Resource{Type: "AWS::ApplicationAutoScaling::ScalingPolicy", Properties: &ScalingPolicy{
		PolicyName:      sub(g.name("-scale-out")),
		PolicyType:      "StepScaling",
		ScalingTargetId: Ref(ResScalableTarget),
		StepScalingPolicyConfiguration: &StepScalingPolicyConfiguration{
			AdjustmentType: "ChangeInCapacity", Cooldown: 60, MetricAggregationType: "Maximum",
			StepAdjustments: ScaleOutSteps(g.o.Concurrency, g.o.MaxTasks),
		},
	}})
	qs := g.workQueues()
	maximum := func(name string) func(q workQueue) MetricStat {
		return func(q workQueue) MetricStat {
			return MetricStat{Metric: sqsMetric(q, name), Period: 60, Stat: "Maximum"}
		}
	}
	scaleOut := &Alarm{
		AlarmName:         sub(g.name("-scale-out")),
		AlarmDescription:  "Messages are waiting: add tasks (step scaling on the visible backlog).",
		EvaluationPeriods: 1,
		Threshold:         0, ComparisonOperator: "GreaterThanThreshold", TreatMissingData: "notBreaching",
		AlarmActions: []any{Ref(ResScaleOutPolicy)},
	}
	if len(qs) == 1 {
		visible := sqsMetric(qs[0], "ApproximateNumberOfMessagesVisible")
		scaleOut.Namespace, scaleOut.MetricName, scaleOut.Dimensions = visible.Namespace, visible.MetricName, visible.Dimensions
		scaleOut.Statistic, scaleOut.Period = "Maximum", 60
	} else {
		// The queues' visible messages added up: the alarm watches the sum.
		scaleOut.Metrics = sumOver("visible", qs, maximum("ApproximateNumberOfMessagesVisible")).alarmQueries()
		scaleOut.Metrics[len(scaleOut.Metrics)-1].ReturnData = true
	}
	g.add(ResScaleOutAlarm, Resource{Type: "AWS::CloudWatch::Alarm", Properties: scaleOut})

	g.add(ResScaleInPolicy, Resource{Type: "AWS::ApplicationAutoScaling::ScalingPolicy", Properties: &ScalingPolicy{
		PolicyName:      sub(g.name("-scale-in")),
		PolicyType:      "StepScaling",
		ScalingTargetId: Ref(ResScalableTarget),
		StepScalingPolicyConfiguration: &StepScalingPolicyConfiguration{
			AdjustmentType: "ExactCapacity", Cooldown: 60, MetricAggregationType: "Maximum",
			StepAdjustments: []StepAdjustment{{MetricIntervalUpperBound: ptr(0), ScalingAdjustment: g.o.MinTasks}},
		},
	}})
	g.add(ResScaleInAlarm, Resource{Type: "AWS::CloudWatch::Alarm", Properties: &Alarm{
		AlarmName: sub(g.name("-scale-in")),
		AlarmDescription: "Nothing visible and nothing in flight for 5 minutes: back to the minimum task count. " +
			"Scale-in protection keeps a task that took a message meanwhile.",
		Metrics: slices.Concat(
			sumOver("visible", qs, maximum("ApproximateNumberOfMessagesVisible")).alarmQueries(),
			sumOver("inflight", qs, maximum("ApproximateNumberOfMessagesNotVisible")).alarmQueries(),
			[]MetricDataQuery{{Id: "backlog", Expression: "visible + inflight", Label: "visible and in-flight messages", ReturnData: true}},
		),
		EvaluationPeriods: 5, Threshold: 0, ComparisonOperator: "LessThanOrEqualToThreshold",
		// SQS stops reporting an idle queue's metrics after a while: idle means empty.
		TreatMissingData: "breaching",
		AlarmActions:     []any{Ref(ResScaleInPolicy)},
	}})
}
