// Package setting is the error every watchbot library returns when one of its options is
// wrong: it names the option refused (a Name, the field of the library's options struct) and
// the value, and leaves the wording of that name to the command line, which knows it as a
// flag (--heartbeat-interval) or an environment variable. listen's names live with its
// rules in internal/listenspec; the template's and the operator tools' are here.
//
// It imports nothing of watchbot's, so every package can return its Error.
package setting

import (
	"fmt"
	"reflect"
	"regexp"
)

// Name names one option by the field of the options struct that holds it
// (supervisor.Config's VisibilityTimeout, cloudformation.Options' CPU). The libraries speak
// of names; only the command line knows them as flags, and turns one into the other when it
// prints an Error.
type Name string

// QueueURL is the queue a command works on, which every command takes as --queue-url.
const QueueURL Name = "QueueURL"

// The template generator's own options (cloudformation.Options fields).
const (
	NamePrefix          Name = "NamePrefix"
	QueueName           Name = "QueueName"
	Queue               Name = "Queues"
	FIFO                Name = "FIFO"
	QueueRetention      Name = "QueueRetention"
	CPU                 Name = "CPU"
	Memory              Name = "Memory"
	MinTasks            Name = "MinTasks"
	MaxTasks            Name = "MaxTasks"
	Environment         Name = "Environment"
	ExtraStatements     Name = "ExtraStatements"
	Alarms              Name = "Alarms"
	LogRetentionDays    Name = "LogRetentionDays"
	TargetLatency       Name = "TargetLatency"
	ExpectedJobDuration Name = "ExpectedJobDuration"
	OTelEndpoint        Name = "OTelEndpoint"
	OTelProtocol        Name = "OTelProtocol"
	Schedules           Name = "Schedules"
	ScheduleTimezone    Name = "ScheduleTimezone"
	// CronYAML is the cron.yaml file that schedules are read from (ParseCronYAML), which
	// joins Schedules.
	CronYAML Name = "CronYAML"
	// ExistingPayloadBucket is an S3 bucket the template uses without creating it.
	ExistingPayloadBucket Name = "Payload.ExistingBucket"
)

// The operator tools' own options: the dead-letter queue's location (deadletter.Location),
// what a replay selects and how fast it goes, how many messages an operation takes, and the
// reason of a failed map-reduce job; and what `send` sends (producer.Request): a body given
// inline or from a file, a delay, attributes, a FIFO group, and the S3 bucket of the bodies
// too large for SQS with the size above which a body goes there (producer.Offload).
const (
	DLQURL           Name = "DLQURL"
	To               Name = "To"
	MatchBody        Name = "Filter.Body"
	MatchAttr        Name = "Filter.Attrs"
	Limit            Name = "Limit"
	Rate             Name = "Rate"
	IDs              Name = "IDs"
	Reason           Name = "Reason"
	Body             Name = "Body"
	File             Name = "File"
	Delay            Name = "Delay"
	Attrs            Name = "Attributes"
	GroupID          Name = "GroupID"
	PayloadBucket    Name = "Offload.Bucket"
	PayloadThreshold Name = "Payload.Threshold"
)

// Names lists every Name of this package, so the command line can check it words each one.
var Names = []Name{
	QueueURL,
	NamePrefix, QueueName, Queue, FIFO, QueueRetention, CPU, Memory, MinTasks, MaxTasks, Environment,
	ExtraStatements, Alarms, LogRetentionDays, TargetLatency, ExpectedJobDuration, OTelEndpoint,
	OTelProtocol, Schedules, ScheduleTimezone, CronYAML, ExistingPayloadBucket,
	DLQURL, To, MatchBody, MatchAttr, Limit, Rate, IDs, Reason, Body, File, Delay, Attrs, GroupID,
	PayloadBucket, PayloadThreshold,
}

// Error is a setting that a rule refused (the configuration is wrong), or, when Err is set,
// a startup call that the setting led to and that failed (the queue it names is not
// reachable: the setting may be right and the service down).
type Error struct {
	// Setting is the option refused; "" when the rule is about no one option.
	Setting Name
	// Value is the refused value, or nil when Reason says it all ("is required").
	Value any
	// Reason says what the value must be ("must be between 1 and 1000"). Other settings
	// appear in it as Ref placeholders, which Render replaces with their names.
	Reason string
	// Err is the failed call, if any.
	Err error
}

// Refuse returns the Error of a setting whose value breaks a rule.
func Refuse(s Name, value any, reason string) Error {
	return Error{Setting: s, Value: value, Reason: reason}
}

// Ref stands for setting s inside a Reason, until Render names it. Its delimiters are control
// characters, so that a value the user typed into a Reason (a regular expression, a schedule)
// is never taken for a placeholder.
func Ref(s Name) string { return refMark + string(s) + refMark }

const refMark = "\x1f"

var refPattern = regexp.MustCompile(refMark + `[A-Za-z.]+` + refMark)

// Error renders e with the settings' own names (HeartbeatInterval).
func (e Error) Error() string {
	return e.Render(func(s Name) string { return string(s) })
}

// Unwrap returns the failed call, if any.
func (e Error) Unwrap() error { return e.Err }

// Render writes e with name giving each setting's name as the user knows it: "NAME (VALUE)
// REASON", or "NAME: REASON" without a value; then ": ERR" when a call failed.
func (e Error) Render(name func(Name) string) string {
	reason := refPattern.ReplaceAllStringFunc(e.Reason, func(ref string) string {
		return name(Name(ref[1 : len(ref)-1]))
	})
	out := name(e.Setting)
	switch {
	case e.Setting == "":
		out = reason
	case e.Value != nil:
		out += " (" + showValue(e.Value) + ")"
		if reason != "" {
			out += " " + reason
		}
	case reason != "":
		out += ": " + reason
	}
	if e.Err != nil {
		if out != "" {
			out += ": "
		}
		out += e.Err.Error()
	}
	return out
}

// showValue quotes strings, so that an empty or spaced value is seen as typed; a value with
// a String method shows that.
func showValue(v any) string {
	if s, ok := v.(fmt.Stringer); ok {
		return s.String()
	}
	if reflect.ValueOf(v).Kind() == reflect.String {
		return fmt.Sprintf("%q", v)
	}
	return fmt.Sprint(v)
}
