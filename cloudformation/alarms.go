package cloudformation

import (
	"fmt"
	"regexp"

	"github.com/watchbot/watchbot/alarms"
)

// AlarmTargetError is what CloudFormation reports when neither or both of AlarmEmail and
// AlarmTopicArn are set.
const AlarmTargetError = "Set exactly one of the parameters AlarmEmail and AlarmTopicArn"

var logicalID = regexp.MustCompile(`^[A-Za-z0-9]+$`)

// AlarmLogicalID is the logical id of the alarm rendered from d.
func AlarmLogicalID(d alarms.Definition) string { return d.Name + "Alarm" }

// RenderedAlarms returns the alarm definitions the template renders: all of them, except with
// --metrics none those on watchbot's own metrics, which nothing would publish, and without the
// brake the Braking alarm, which could never fire.
func RenderedAlarms(o Options) []alarms.Definition {
	var out []alarms.Definition
	for _, d := range alarms.Definitions(o.Alarms) {
		if d.Namespace == "" && o.Metrics == MetricsNone || d.Name == alarms.Braking && !o.Brake {
			continue
		}
		out = append(out, d)
	}
	return out
}

// alarms adds the alarm topic, the check of its parameters and every queue's alarms.
func (g *generator) alarms() error {
	g.add(ResAlarmTopic, Resource{Type: "AWS::SNS::Topic", Condition: CondCreateAlarmTopic, Properties: &Topic{
		DisplayName:  "watchbot alarms",
		Subscription: []Subscription{{Protocol: "email", Endpoint: Ref(ParamAlarmEmail)}},
	}})
	g.add(ResAlarmTargetCheck, alarmTargetCheck())
	actions := If(CondUseAlarmTopicArn, []any{Ref(ParamAlarmTopicArn)}, If(CondCreateAlarmTopic, []any{Ref(ResAlarmTopic)}, NoValue))
	qs := g.workQueues()
	for _, q := range qs {
		// Each queue gets every alarm: its own DLQ's depth, its oldest message, its workers'
		// errors and its brake. With several queues, the alarm names carry the queue's.
		name := ""
		if len(qs) > 1 {
			name = "-" + q.short
		}
		if err := g.queueAlarms(q, q.suffix, name, actions); err != nil {
			return err
		}
	}
	return nil
}

// queueAlarms adds the alarms of queue q: logical ids end in idSuffix, alarm names in
// "<prefix><nameInfix>-<alarm>".
func (g *generator) queueAlarms(q workQueue, idSuffix, nameInfix string, actions any) error {
	queueNames := map[alarms.Subject]any{
		alarms.WorkQueue:       GetAtt(q.id, "QueueName"),
		alarms.DeadLetterQueue: GetAtt(q.dlqID, "QueueName"),
	}
	for _, d := range RenderedAlarms(g.o) {
		id := AlarmLogicalID(d) + idSuffix
		if !logicalID.MatchString(id) {
			return fmt.Errorf("alarm %q: name must be letters and digits to make a logical id", d.Name)
		}
		if _, taken := g.t.Resources[id]; taken {
			return fmt.Errorf("alarm %q: logical id %s is taken", d.Name, id)
		}
		queue, ok := queueNames[d.Subject]
		if !ok {
			return fmt.Errorf("alarm %q: unknown subject %q", d.Name, d.Subject)
		}
		namespace := d.Namespace
		if namespace == "" {
			namespace = g.o.MetricsNamespace
		}
		g.add(id, Resource{Type: "AWS::CloudWatch::Alarm", Properties: &Alarm{
			AlarmName:          sub(g.name(nameInfix + "-" + d.Name)),
			AlarmDescription:   d.Description,
			Namespace:          namespace,
			MetricName:         d.Metric,
			Dimensions:         []Dimension{{Name: "QueueName", Value: queue}},
			Statistic:          d.Statistic,
			Period:             d.PeriodSeconds,
			EvaluationPeriods:  d.EvaluationPeriods,
			Threshold:          d.Threshold,
			ComparisonOperator: string(d.Comparison),
			TreatMissingData:   d.TreatMissingData,
			AlarmActions:       actions,
			OKActions:          actions,
		}})
	}
	return nil
}

// alarmTargetCheck is created only when neither or both of AlarmEmail and AlarmTopicArn are
// set. Its value cannot match its pattern, so SSM refuses it and stack creation fails with
// this resource's logical id and description in the events. (A Rules section would refuse the
// parameters before any resource is created, but the pinned linter cannot read Rules.)
func alarmTargetCheck() Resource {
	return Resource{Type: "AWS::SSM::Parameter", Condition: CondAlarmTargetInvalid, Properties: &SSMParameter{
		Type:           "String",
		Description:    AlarmTargetError + ": this check fails on purpose when neither or both are set.",
		Value:          AlarmTargetError,
		AllowedPattern: "^$",
	}}
}
