package cloudformation

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/setting"
)

func TestParseSchedule(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Schedule
	}{
		{"tick=rate(5 minutes)", Schedule{Name: "tick", Expression: "rate(5 minutes)"}},
		{"report=cron(0,30 8 ? * MON-FRI *),path=/report", Schedule{Name: "report", Expression: "cron(0,30 8 ? * MON-FRI *)", Path: "/report"}},
		{`digest=rate(1 day),body={"kind":"digest","items":[1,2]}`, Schedule{Name: "digest", Expression: "rate(1 day)", Body: `{"kind":"digest","items":[1,2]}`}},
		{"a.b_c-d=rate(1 hour),path=/x/y?z=1,body=a,b", Schedule{Name: "a.b_c-d", Expression: "rate(1 hour)", Path: "/x/y?z=1", Body: "a,b"}},
	} {
		got, err := ParseSchedule(c.in)
		if err != nil {
			t.Errorf("ParseSchedule(%q): %v", c.in, err)
			continue
		}
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("ParseSchedule(%q) (-want +got):\n%s", c.in, diff)
		}
	}
	for _, c := range []struct{ in, want string }{
		{"tick", "expected NAME=EXPR"},
		{"tick=", "is not a rate(...) or cron(...) expression"},
		{"tick=rate(5 minute)", "Schedules tick: \"rate(5 minute)\": the unit is singular for 1"},
		{"tick=rate(5 minutes)path=/x", "unexpected \"path=/x\" after the expression"},
		{"tick=rate(5 minutes),method=GET", `unknown option "method=GET"`},
		{"tick=rate(5 minutes),path=report", `path ("report") must start with /`},
		{"bad name=rate(5 minutes)", "the name must be 1 to 64 letters"},
		{strings.Repeat("n", 65) + "=rate(5 minutes)", "the name must be 1 to 64 letters"},
		{"=rate(5 minutes)", "the name must be"},
		{"big=rate(5 minutes),body=" + strings.Repeat("x", MaxScheduleBody+1), "must be at most 8192 bytes"},
	} {
		_, err := ParseSchedule(c.in)
		if se, ok := errors.AsType[*ScheduleError](err); !ok || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "Schedules "+se.Task+": ") {
			t.Errorf("ParseSchedule(%.40q) = %v, want a ScheduleError with %q", c.in, err, c.want)
		}
	}
}

func TestParseCronYAML(t *testing.T) {
	// The example of Elastic Beanstalk's "Periodic tasks".
	got, err := ParseCronYAML([]byte(`version: 1
cron:
 - name: "backup-job"
   url: "/backup"
   schedule: "0 */12 * * *"
 - name: "audit"
   url: "/audit"
   schedule: "0 23 * * *"
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []Schedule{
		{Name: "backup-job", Expression: "cron(0 0,12 * * ? *)", Path: "/backup"},
		{Name: "audit", Expression: "cron(0 23 * * ? *)", Path: "/audit"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}

	for _, c := range []struct{ name, yaml, want string }{
		{"not yaml", "version: 1\ncron: [", "not YAML"},
		{"version 2", "version: 2\ncron:\n - {name: a, url: /a, schedule: '* * * * *'}", "version (2) must be 1"},
		{"no version", "cron:\n - {name: a, url: /a, schedule: '* * * * *'}", "version (0) must be 1"},
		{"empty", "version: 1\ncron: []", "the cron list is empty"},
		{"unknown key", "version: 1\ncron:\n - {name: a, url: /a, schedule: '* * * * *', method: GET}", `unknown field "method"`},
		{"missing url", "version: 1\ncron:\n - {name: a, schedule: '* * * * *'}", "entry 1: name, url and schedule are required"},
		{"both days", "version: 1\ncron:\n - {name: payroll, url: /pay, schedule: '0 0 1 * 5'}", "entry payroll: schedule \"0 0 1 * 5\": both day-of-month and day-of-week"},
		{"bad url", "version: 1\ncron:\n - {name: a, url: pay, schedule: '0 0 1 * *'}", "entry a: Schedules a: path (\"pay\") must start with /"},
		{"bad name", "version: 1\ncron:\n - {name: 'a b', url: /a, schedule: '0 0 1 * *'}", "the name must be"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := ParseCronYAML([]byte(c.yaml)); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("ParseCronYAML = %v, want an error with %q", err, c.want)
			}
		})
	}
}

func TestSchedulesValidate(t *testing.T) {
	o := DefaultOptions()
	o.Command = []string{"/app/worker"}
	o.Schedules = []Schedule{{Name: "a", Expression: "rate(1 hour)"}, {Name: "a", Expression: "rate(2 hours)"}}
	if se, ok := errors.AsType[*ScheduleError](o.Validate()); !ok || se.Task != "a" || !strings.HasPrefix(se.Reason, "given twice") {
		t.Errorf("duplicate names: %v", se)
	}
	o.Schedules = o.Schedules[:1]
	for _, tz := range []string{"", "Mars/Olympus", "Local"} {
		o.ScheduleTimezone = tz
		if e, ok := errors.AsType[setting.Error](o.Validate()); !ok || e.Setting != setting.ScheduleTimezone {
			t.Errorf("time zone %q: %v", tz, e)
		}
	}
}

func TestScheduleLogicalID(t *testing.T) {
	s := []Schedule{{Name: "backup-job"}, {Name: "backup_job"}, {Name: "audit"}, {Name: "backup.job"}}
	var got []string
	for i := range s {
		got = append(got, ScheduleLogicalID(s, i))
	}
	if diff := cmp.Diff([]string{"ScheduleBackupJob", "ScheduleBackupJob2", "ScheduleAudit", "ScheduleBackupJob3"}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestScheduleResources checks what each schedule sends: one SendMessage to the work queue,
// with the attributes listen reads, by a role that may do nothing else.
func TestScheduleResources(t *testing.T) {
	for _, fifo := range []bool{false, true} {
		o := DefaultOptions()
		o.Command = []string{"/app/worker"}
		o.FIFO = fifo
		o.Schedules = []Schedule{
			{Name: "backup-job", Expression: "cron(0 0,12 * * ? *)", Path: "/backup"},
			{Name: "tick", Expression: "rate(1 minute)", Body: "${NotASubstitution} <aws.scheduler.execution-id>"},
		}
		tpl := generate(t, o)
		role := tpl.Resources[ResSchedulerRole].Properties.(*Role)
		trust := role.AssumeRolePolicyDocument.Statement
		if len(trust) != 1 || trust[0].Principal["Service"] != "scheduler.amazonaws.com" || trust[0].Condition["StringEquals"]["aws:SourceAccount"] == nil {
			t.Errorf("trust policy %+v", trust)
		}
		if len(role.Policies) != 1 || len(role.Policies[0].PolicyDocument.Statement) != 1 {
			t.Fatalf("policies %+v", role.Policies)
		}
		s := role.Policies[0].PolicyDocument.Statement[0]
		if !cmp.Equal(s.Action, []string{"sqs:SendMessage"}) || !cmp.Equal(s.Resource, []any{GetAtt(ResQueue, "Arn")}) {
			t.Errorf("the scheduler role may %v on %v, want sqs:SendMessage on the work queue", s.Action, s.Resource)
		}
		for i, sc := range o.Schedules {
			r := tpl.Resources[ScheduleLogicalID(o.Schedules, i)]
			p, ok := r.Properties.(*SchedulerSchedule)
			if r.Type != "AWS::Scheduler::Schedule" || !ok {
				t.Fatalf("schedule %s: %+v", sc.Name, r)
			}
			if p.ScheduleExpression != sc.Expression || p.FlexibleTimeWindow.Mode != "OFF" || p.State != "ENABLED" || p.ScheduleExpressionTimezone != "UTC" {
				t.Errorf("schedule %s: %+v", sc.Name, p)
			}
			if p.Target.Arn != universalSendMessage || !cmp.Equal(p.Target.RoleArn, GetAtt(ResSchedulerRole, "Arn")) {
				t.Errorf("schedule %s: target %+v", sc.Name, p.Target)
			}
			parts := p.Target.Input.(Fn)["Fn::Join"].([]any)[1].([]any)
			if len(parts) != 3 || !cmp.Equal(parts[1], Ref(ResQueue)) {
				t.Fatalf("schedule %s: input %v", sc.Name, parts)
			}
			var req struct {
				QueueUrl, MessageBody, MessageGroupId, MessageDeduplicationId string
				MessageAttributes                                             map[string]struct{ DataType, StringValue string }
			}
			if err := json.Unmarshal([]byte(parts[0].(string)+"https://sqs.example/q"+parts[2].(string)), &req); err != nil {
				t.Fatalf("schedule %s: input is not JSON: %v", sc.Name, err)
			}
			attr := func(name string) string { return req.MessageAttributes[name].StringValue }
			if req.QueueUrl != "https://sqs.example/q" || attr(listenspec.AttrTaskName) != sc.Name ||
				attr(listenspec.AttrScheduledAt) != "<aws.scheduler.scheduled-time>" || attr(listenspec.AttrTaskPath) != sc.Path {
				t.Errorf("schedule %s: request %+v", sc.Name, req)
			}
			if want := sc.Body; want != "" && req.MessageBody != want {
				t.Errorf("schedule %s: body %q, want %q", sc.Name, req.MessageBody, want)
			}
			if fifo != (req.MessageGroupId == sc.Name) || fifo != (req.MessageDeduplicationId == sc.Name+"-<aws.scheduler.scheduled-time>") {
				t.Errorf("schedule %s (fifo %v): group %q, deduplication id %q", sc.Name, fifo, req.MessageGroupId, req.MessageDeduplicationId)
			}
		}
	}
	o := DefaultOptions()
	o.Command = []string{"/app/worker"}
	if _, ok := generate(t, o).Resources[ResSchedulerRole]; ok {
		t.Error("a stack without schedules has a scheduler role")
	}
}
