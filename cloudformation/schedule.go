package cloudformation

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/setting"
)

// Schedule is one scheduled task (--schedule, or an entry of --cron-yaml): on every tick an
// EventBridge Scheduler schedule sends one message to the work queue, which one task
// receives, so the task runs once per tick whatever the number of tasks, with no leader
// election. The message carries the attributes listenspec.AttrTaskName (Name),
// listenspec.AttrScheduledAt (the tick's time) and listenspec.AttrTaskPath (Path, if set),
// which an HTTP worker receives as Elastic Beanstalk's X-Aws-Sqsd-Taskname,
// X-Aws-Sqsd-Scheduled-At and X-Aws-Sqsd-Path, and a command as WATCHBOT_ATTR_*.
type Schedule struct {
	// Name names the task: letters, digits, -, _ and ., at most 64 (a Scheduler name).
	Name string
	// Expression is an EventBridge Scheduler rate(...) or cron(...) expression.
	Expression string
	// Path is where an HTTP worker POSTs the message (an absolute path); empty: the URL's.
	Path string
	// Body is the message body; empty means DefaultScheduleBody(Name). It may hold
	// Scheduler's context attributes, e.g. <aws.scheduler.scheduled-time>.
	Body string
}

// Scheduler's context attributes, replaced in the target's input on every invocation
// ("Adding context attributes in EventBridge Scheduler",
// https://docs.aws.amazon.com/scheduler/latest/UserGuide/managing-schedule-context-attributes.html).
const (
	ScheduledTimeAttribute = "<aws.scheduler.scheduled-time>"
)

// Limits of a schedule.
const (
	// MaxScheduleBody bounds a body, which the template holds: a body is an argument of the
	// task, not its data, and a template over 51,200 bytes cannot be deployed without an S3
	// bucket.
	MaxScheduleBody = 8 << 10
	// ScheduleMaxEventAge and ScheduleMaxRetries are the schedules' retry policy: Scheduler
	// retries a SendMessage that failed (throttled, SQS unavailable) with backoff for up to
	// an hour, then drops the tick. A tick delivered later than that is more likely to
	// overlap the next one than to help; the message's watchbot-scheduled-at tells the
	// worker how late it is. The attempts are Scheduler's most, so the age is the bound.
	ScheduleMaxEventAge = time.Hour
	ScheduleMaxRetries  = 185
	// DefaultScheduleTimezone is the zone cron expressions are read in, as Elastic
	// Beanstalk reads cron.yaml.
	DefaultScheduleTimezone = "UTC"

	maxScheduleName = 64
)

// universalSendMessage is Scheduler's universal target for SQS SendMessage: its input is the
// SendMessage request, so unlike the templated SQS target (which sets only the body and a
// FIFO group) it can set message attributes ("Using universal targets",
// https://docs.aws.amazon.com/scheduler/latest/UserGuide/managing-targets-universal.html, and the
// SendMessage example of the context attributes page above).
const universalSendMessage = "arn:aws:scheduler:::aws-sdk:sqs:sendMessage"

// DefaultScheduleBody is the body of a schedule's message when none is given.
func DefaultScheduleBody(name string) string {
	return `{"task":"` + name + `","scheduledAt":"` + ScheduledTimeAttribute + `"}`
}

var scheduleNamePattern = regexp.MustCompile(`^[0-9A-Za-z._-]{1,64}$`)

// ParseSchedule reads a --schedule value: NAME=EXPR[,path=/p][,body=...], EXPR a rate(...)
// or cron(...) expression (commas inside its parentheses belong to it). body= takes the rest
// of the value, commas included, so it comes last.
func ParseSchedule(s string) (Schedule, error) {
	name, rest, ok := strings.Cut(s, "=")
	if !ok {
		return Schedule{}, &ScheduleError{Task: strconv.Quote(s), Reason: "expected NAME=EXPR[,path=/PATH][,body=BODY]"}
	}
	end := strings.Index(rest, ")")
	if end < 0 {
		return Schedule{}, &ScheduleError{Task: name, Reason: fmt.Sprintf("%q is not a rate(...) or cron(...) expression", rest)}
	}
	sc := Schedule{Name: name, Expression: rest[:end+1]}
	rest = rest[end+1:]
	for rest != "" {
		opt, ok := strings.CutPrefix(rest, ",")
		if !ok {
			return Schedule{}, &ScheduleError{Task: name, Reason: fmt.Sprintf("unexpected %q after the expression: expected ,path=/PATH or ,body=BODY", rest)}
		}
		switch {
		case strings.HasPrefix(opt, "body="):
			sc.Body, rest = strings.TrimPrefix(opt, "body="), ""
		case strings.HasPrefix(opt, "path="):
			p, after, _ := strings.Cut(strings.TrimPrefix(opt, "path="), ",")
			sc.Path, rest = p, ""
			if after != "" {
				rest = "," + after
			}
		default:
			return Schedule{}, &ScheduleError{Task: name, Reason: fmt.Sprintf("unknown option %q: expected path=/PATH or body=BODY", opt)}
		}
	}
	return sc, sc.check()
}

// ScheduleError is a schedule that the template cannot hold, named by Task: its name, or,
// quoted, the value given when it has no valid name. The command line says where the schedule
// came from (Render).
type ScheduleError struct {
	Task string
	// Reason says what is wrong; other settings appear in it as setting.Ref placeholders.
	Reason string
	// Err is the expression's own error, if that is what is wrong.
	Err error
}

// Error renders e with the settings' own names.
func (e *ScheduleError) Error() string {
	return e.Render(func(s setting.Name) string { return string(s) })
}

// Unwrap returns the expression's error, if any.
func (e *ScheduleError) Unwrap() error { return e.Err }

// Render writes e as "SCHEDULES TASK: REASON[: ERR]", with name giving each setting's name as
// the user knows it (--schedule).
func (e *ScheduleError) Render(name func(setting.Name) string) string {
	out := name(setting.Schedules) + " " + e.Task
	if reason := (setting.Error{Reason: e.Reason}).Render(name); reason != "" {
		out += ": " + reason
	}
	if e.Err != nil {
		out += ": " + e.Err.Error()
	}
	return out
}

// check validates one schedule, naming it.
func (sc Schedule) check() error {
	if !scheduleNamePattern.MatchString(sc.Name) {
		return &ScheduleError{Task: strconv.Quote(sc.Name), Reason: fmt.Sprintf("the name must be 1 to %d letters, digits, -, _ and .", maxScheduleName)}
	}
	if err := CheckScheduleExpression(sc.Expression); err != nil {
		return &ScheduleError{Task: sc.Name, Err: err}
	}
	if sc.Path != "" && (!strings.HasPrefix(sc.Path, "/") || strings.ContainsAny(sc.Path, " \t\r\n")) {
		return &ScheduleError{Task: sc.Name, Reason: fmt.Sprintf("path (%q) must start with / and hold no spaces", sc.Path)}
	}
	if len(sc.Body) > MaxScheduleBody {
		return &ScheduleError{Task: sc.Name, Reason: fmt.Sprintf("the body (%d bytes) must be at most %d bytes", len(sc.Body), MaxScheduleBody)}
	}
	return nil
}

// checkSchedules validates the schedules and their time zone.
func checkSchedules(schedules []Schedule, timezone string) error {
	seen := map[string]bool{}
	for _, sc := range schedules {
		if err := sc.check(); err != nil {
			return err
		}
		if seen[sc.Name] {
			return &ScheduleError{Task: sc.Name, Reason: "given twice (names must be unique, " + setting.Ref(setting.CronYAML) + " entries included)"}
		}
		seen[sc.Name] = true
	}
	if timezone == "" {
		return setting.Refuse(setting.ScheduleTimezone, nil, "must not be empty (UTC by default)")
	}
	if _, err := time.LoadLocation(timezone); err != nil || strings.EqualFold(timezone, "Local") {
		return setting.Refuse(setting.ScheduleTimezone, timezone, "must be an IANA time zone, e.g. UTC or Europe/Paris")
	}
	return nil
}

// CronYAML is Elastic Beanstalk's cron.yaml ("Periodic tasks", Elastic Beanstalk worker
// environments, https://docs.aws.amazon.com/elasticbeanstalk/latest/dg/using-features-managing-env-tiers.html#worker-periodictasks).
type CronYAML struct {
	Version int            `json:"version"`
	Cron    []CronYAMLTask `json:"cron"`
}

// CronYAMLTask is one periodic task of a cron.yaml: schedule is a five-field Unix cron
// expression, read in UTC.
type CronYAMLTask struct {
	Name     string `json:"name"`
	URL      string `json:"url"`
	Schedule string `json:"schedule"`
}

// ParseCronYAML reads an Elastic Beanstalk cron.yaml into schedules: name becomes the task
// name, url the path, and the Unix cron expression an EventBridge one (UnixCron).
func ParseCronYAML(data []byte) ([]Schedule, error) {
	raw, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("not YAML: %w", err)
	}
	var doc CronYAML
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("expected version: 1 and a cron list of {name, url, schedule}: %w", err)
	}
	if doc.Version != 1 {
		return nil, fmt.Errorf("version (%d) must be 1", doc.Version)
	}
	if len(doc.Cron) == 0 {
		return nil, errors.New("the cron list is empty")
	}
	out := make([]Schedule, 0, len(doc.Cron))
	for i, task := range doc.Cron {
		if task.Name == "" || task.URL == "" || task.Schedule == "" {
			return nil, fmt.Errorf("entry %d: name, url and schedule are required", i+1)
		}
		expr, err := UnixCron(task.Schedule)
		if err != nil {
			return nil, fmt.Errorf("entry %s: schedule %w", task.Name, err)
		}
		sc := Schedule{Name: task.Name, Expression: expr, Path: task.URL}
		if err := sc.check(); err != nil {
			return nil, fmt.Errorf("entry %s: %w", task.Name, err)
		}
		out = append(out, sc)
	}
	return out, nil
}

// ResSchedulerRole is the role the schedules send their messages with.
const ResSchedulerRole = "SchedulerRole"

// ScheduleLogicalID returns the logical id of schedule i of schedules: "Schedule" and the
// name's letters and digits in camel case (backup-job: ScheduleBackupJob), numbered when two
// names would give the same.
func ScheduleLogicalID(schedules []Schedule, i int) string {
	id := func(name string) string {
		var b strings.Builder
		b.WriteString("Schedule")
		upper := true // the first letter of the name and of each part after a - _ or .
		for _, r := range name {
			if r == '-' || r == '_' || r == '.' {
				upper = true
				continue
			}
			if upper && r >= 'a' && r <= 'z' {
				r -= 'a' - 'A'
			}
			b.WriteRune(r)
			upper = false
		}
		return b.String()
	}
	mine, n := id(schedules[i].Name), 1
	for j := range i {
		if id(schedules[j].Name) == mine {
			n++
		}
	}
	if n > 1 {
		return fmt.Sprintf("%s%d", mine, n)
	}
	return mine
}

// schedules adds the role and one schedule per Options.Schedules.
func (g *generator) schedules() {
	if len(g.o.Schedules) == 0 {
		return
	}
	g.add(ResSchedulerRole, Resource{Type: "AWS::IAM::Role", Properties: &Role{
		AssumeRolePolicyDocument: PolicyDocument{Version: policyVersion, Statement: []Statement{{
			Effect:    "Allow",
			Principal: map[string]any{"Service": "scheduler.amazonaws.com"},
			Action:    []string{"sts:AssumeRole"},
			// Only Scheduler acting for this account's schedules (confused deputy; "Set up
			// the execution role", EventBridge Scheduler User Guide).
			Condition: map[string]map[string]any{"StringEquals": {"aws:SourceAccount": Ref("AWS::AccountId")}},
		}}},
		// SSE-SQS needs no KMS permission.
		Policies: []RolePolicy{{PolicyName: "send-scheduled-tasks", PolicyDocument: PolicyDocument{Version: policyVersion, Statement: []Statement{
			{Sid: "WorkQueue", Effect: "Allow", Action: []string{"sqs:SendMessage"}, Resource: []any{GetAtt(ResQueue, "Arn")}},
		}}}},
	}})
	for i, sc := range g.o.Schedules {
		g.add(ScheduleLogicalID(g.o.Schedules, i), Resource{Type: "AWS::Scheduler::Schedule", Properties: &SchedulerSchedule{
			Description:                "watchbot scheduled task " + sc.Name + ": one message to the work queue per tick",
			ScheduleExpression:         sc.Expression,
			ScheduleExpressionTimezone: g.o.ScheduleTimezone,
			FlexibleTimeWindow:         FlexibleTimeWindow{Mode: "OFF"},
			State:                      "ENABLED",
			Target: ScheduleTarget{
				Arn:     universalSendMessage,
				RoleArn: GetAtt(ResSchedulerRole, "Arn"),
				Input:   sendMessageInput(sc, g.o.FIFO),
				RetryPolicy: RetryPolicy{
					MaximumEventAgeInSeconds: seconds(ScheduleMaxEventAge),
					MaximumRetryAttempts:     ScheduleMaxRetries,
				},
			},
		}})
	}
}

// queueURLMark stands for the queue's URL in the input until it is split around it. QueueUrl
// is the request's first field, so its first occurrence is the URL's, whatever a body holds.
const queueURLMark = "watchbot:queue-url"

// messageAttribute is a String message attribute of a SendMessage request.
type messageAttribute struct {
	DataType    string `json:"DataType"`
	StringValue string `json:"StringValue"`
}

// SendMessageInput returns the SendMessage request a schedule sends, as JSON, with queueURL
// for the queue's URL. In a FIFO queue the group is the task's name, so its ticks run in
// order, and the deduplication id is the name and the tick's time, so Scheduler's retries of
// one tick are one message while every tick is a new one.
func SendMessageInput(sc Schedule, fifo bool, queueURL string) string {
	body := sc.Body
	if body == "" {
		body = DefaultScheduleBody(sc.Name)
	}
	attrs := map[string]messageAttribute{
		listenspec.AttrTaskName:    {DataType: "String", StringValue: sc.Name},
		listenspec.AttrScheduledAt: {DataType: "String", StringValue: ScheduledTimeAttribute},
	}
	if sc.Path != "" {
		attrs[listenspec.AttrTaskPath] = messageAttribute{DataType: "String", StringValue: sc.Path}
	}
	req := struct {
		QueueUrl               string                      `json:"QueueUrl"`
		MessageBody            string                      `json:"MessageBody"`
		MessageAttributes      map[string]messageAttribute `json:"MessageAttributes"`
		MessageGroupId         string                      `json:"MessageGroupId,omitempty"`
		MessageDeduplicationId string                      `json:"MessageDeduplicationId,omitempty"`
	}{QueueUrl: queueURL, MessageBody: body, MessageAttributes: attrs}
	if fifo {
		req.MessageGroupId, req.MessageDeduplicationId = sc.Name, sc.Name+"-"+ScheduledTimeAttribute
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false) // the context attributes' < and > must stay as they are
	_ = enc.Encode(req)      // strings and maps of strings always encode
	return strings.TrimSuffix(out.String(), "\n")
}

// sendMessageInput is SendMessageInput with the queue's URL as Ref, joined in rather than
// substituted (Fn::Sub), so that nothing in a body is read as ${...}.
func sendMessageInput(sc Schedule, fifo bool) any {
	input := SendMessageInput(sc, fifo, queueURLMark)
	before, after, _ := strings.Cut(input, queueURLMark)
	return Join("", before, Ref(ResQueue), after)
}

// SchedulerSchedule is the Properties of AWS::Scheduler::Schedule.
type SchedulerSchedule struct {
	Description                string             `json:"Description"`
	ScheduleExpression         string             `json:"ScheduleExpression"`
	ScheduleExpressionTimezone string             `json:"ScheduleExpressionTimezone"`
	FlexibleTimeWindow         FlexibleTimeWindow `json:"FlexibleTimeWindow"`
	State                      string             `json:"State"`
	Target                     ScheduleTarget     `json:"Target"`
}

// FlexibleTimeWindow is a schedule's window; OFF invokes the target at the tick.
type FlexibleTimeWindow struct {
	Mode string `json:"Mode"`
}

// ScheduleTarget is what a schedule invokes, with which role and input.
type ScheduleTarget struct {
	Arn         string      `json:"Arn"`
	RoleArn     any         `json:"RoleArn"`
	Input       any         `json:"Input"`
	RetryPolicy RetryPolicy `json:"RetryPolicy"`
}

// RetryPolicy bounds Scheduler's retries of a failed invocation.
type RetryPolicy struct {
	MaximumEventAgeInSeconds int `json:"MaximumEventAgeInSeconds"`
	MaximumRetryAttempts     int `json:"MaximumRetryAttempts"`
}
