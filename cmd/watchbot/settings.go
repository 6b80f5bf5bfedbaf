package main

import (
	"errors"
	"reflect"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/setting"
)

// listenSetting is one row of listenSettings: one of listen's flags, and how its value gets
// into listenArgs.
type listenSetting struct {
	// name is the flag's, without its dashes.
	name string
	// setting is what a setting.Error refusing this flag's value names; "" when no rule does.
	setting setting.Name
	// field returns the field of a listenArgs the flag sets, as a pointer. The flag's type
	// follows from the field's (a duration, an int, a float64, a bool or a string kind), and
	// its default is the field's value in defaultListenArgs.
	field func(a *listenArgs) any
	// usage, env and defaultText are the flag's help line, its environment variables, and
	// its default as --help shows it when that is not the field's value.
	usage       string
	env         []string
	defaultText string
	// trim drops the spaces around a string value.
	trim bool
	// flag and bind replace what field gives when the value needs parsing: flag makes the
	// flag (a new one for each command, which parsing changes), bind reads its value into
	// listenArgs.
	flag func() cli.Flag
	bind func(s listenSetting, c *cli.Context, a *listenArgs) error
	// template says whether `watchbot template` offers the flag too.
	template templateUse
	// try says whether `watchbot try` offers the flag too, environment variables included:
	// try runs one worker as listen would, so a setting of how one run goes reads the same.
	try bool
	// tryDefaultText is the default as try's --help shows it, when try's differs from listen's.
	tryDefaultText string
}

// templateUse is whether `watchbot template` offers one of listen's flags, and how it passes
// it on to the listen command it generates.
type templateUse int

const (
	listenOnly templateUse = iota
	// templateOption is read into the cloudformation.Options field of the same name.
	templateOption
	// templateArg is passed on as given (cloudformation.Options.LimitArgs).
	templateArg
)

var durationType = reflect.TypeFor[time.Duration]()

// cliFlag returns the row's flag, with def's value of its field as the default.
func (s listenSetting) cliFlag(def *listenArgs) cli.Flag {
	if s.flag != nil {
		return s.flag()
	}
	v := reflect.ValueOf(s.field(def)).Elem()
	switch {
	case v.Type() == durationType:
		f := durationFlag(s.name, time.Duration(v.Int()), s.usage, s.env...)
		if s.defaultText != "" {
			f.DefaultText = s.defaultText
		}
		return f
	case v.Kind() == reflect.Int:
		return &cli.IntFlag{Name: s.name, Value: int(v.Int()), Usage: s.usage, EnvVars: s.env, DefaultText: s.defaultText}
	case v.Kind() == reflect.Float64:
		return &cli.Float64Flag{Name: s.name, Value: v.Float(), Usage: s.usage, EnvVars: s.env, DefaultText: s.defaultText}
	case v.Kind() == reflect.Bool:
		return &cli.BoolFlag{Name: s.name, Value: v.Bool(), Usage: s.usage, EnvVars: s.env, DefaultText: s.defaultText}
	case v.Kind() == reflect.String:
		return &cli.StringFlag{Name: s.name, Value: v.String(), Usage: s.usage, EnvVars: s.env, DefaultText: s.defaultText}
	}
	panic("listen setting --" + s.name + ": no flag for a field of type " + v.Type().String())
}

// read copies the flag's value into a.
func (s listenSetting) read(c *cli.Context, a *listenArgs) error {
	if s.bind != nil {
		return s.bind(s, c, a)
	}
	v := reflect.ValueOf(s.field(a)).Elem()
	switch {
	case v.Type() == durationType:
		v.SetInt(int64(durationOf(c, s.name)))
	case v.Kind() == reflect.Int:
		v.SetInt(int64(c.Int(s.name)))
	case v.Kind() == reflect.Float64:
		v.SetFloat(c.Float64(s.name))
	case v.Kind() == reflect.Bool:
		v.SetBool(c.Bool(s.name))
	case v.Kind() == reflect.String && s.trim:
		v.SetString(strings.TrimSpace(c.String(s.name)))
	case v.Kind() == reflect.String:
		v.SetString(c.String(s.name))
	}
	return nil
}

// cliFlags returns the flags of rows, with listen's defaults.
func cliFlags(rows []listenSetting) []cli.Flag {
	def := defaultListenArgs()
	flags := make([]cli.Flag, len(rows))
	for i, s := range rows {
		flags[i] = s.cliFlag(&def)
	}
	return flags
}

// readListenArgs reads the flags of rows into a.
func readListenArgs(c *cli.Context, rows []listenSetting, a *listenArgs) error {
	for _, s := range rows {
		if err := s.read(c, a); err != nil {
			return err
		}
	}
	return nil
}

// settingFlags names each setting by the flag that sets it. The packages return
// setting.Errors naming settings; this table is the one place where they become flags:
// listen's follow from listenSettings, the others' are listed here.
var settingFlags = func() map[setting.Name]string {
	names := map[setting.Name]string{
		listenspec.SettingCommand: "the worker command",
		listenspec.SettingAttempt: "--attempt",
		// The template's own.
		setting.NamePrefix:                 "--name-prefix",
		setting.QueueName:                  "--queue-name",
		setting.Queue:                      "--queue",
		setting.FIFO:                       "--fifo",
		setting.QueueRetention:             "--queue-retention",
		setting.CPU:                        "--cpu",
		setting.Memory:                     "--memory",
		setting.MinTasks:                   "--min-tasks",
		setting.MaxTasks:                   "--max-tasks",
		listenspec.SettingMetrics:          "--metrics",
		listenspec.SettingMetricsNamespace: "--metrics-namespace",
		setting.Environment:                "--env",
		setting.ExtraStatements:            "--extra-policy",
		setting.Alarms:                     "alarm thresholds (--worker-errors-threshold, --oldest-message-age-threshold, --braking-threshold)",
		setting.LogRetentionDays:           "--log-retention-days",
		setting.TargetLatency:              "--target-latency",
		setting.ExpectedJobDuration:        "--expected-job-duration",
		setting.OTelEndpoint:               "--otel-endpoint",
		setting.OTelProtocol:               "--otel-protocol",
		setting.Schedules:                  "--schedule",
		setting.ScheduleTimezone:           "--schedule-timezone",
		setting.CronYAML:                   "--cron-yaml",
		// The operator tools'.
		setting.DLQURL:    "--dlq-url",
		setting.To:        "--to",
		setting.MatchBody: "--match-body",
		setting.MatchAttr: "--match-attr",
		setting.Limit:     "--limit",
		setting.Rate:      "--rate",
		setting.IDs:       "--id",
		setting.Reason:    "--reason",
		setting.Body:      "--body",
		setting.File:      "--file",
		setting.Delay:     "--delay",
		setting.Attrs:     "--attr",
		setting.GroupID:   "--group-id",
		// The payload bucket's, beside listen's --payload-bucket.
		setting.ExistingPayloadBucket: "--existing-payload-bucket",
		setting.PayloadBucket:         "--payload-bucket",
		setting.PayloadThreshold:      "--payload-threshold",
	}
	for _, s := range listenSettings {
		if s.setting != "" {
			names[s.setting] = "--" + s.name
		}
	}
	return names
}()

// flagOf names setting s by its flag, or by its own name if it has none.
func flagOf(s setting.Name) string {
	if f, ok := settingFlags[s]; ok {
		return f
	}
	return string(s)
}

// withFlags returns err with the first error in it that names settings (a setting.Error,
// a cloudformation.ScheduleError), if any, worded with the flags of names (settingFlags where
// names has none). What err wraps stays reachable with errors.As. An error already worded is left as it is: main words every error once more, and would
// otherwise turn a command's own names (template's "--env Volumes") back into listen's flags.
func withFlags(err error, names map[setting.Name]string) error {
	var e settingsError
	var done flagged
	if err == nil || errors.As(err, &done) || !errors.As(err, &e) {
		return err
	}
	named := e.Render(func(s setting.Name) string {
		if f, ok := names[s]; ok {
			return f
		}
		return flagOf(s)
	})
	return flagged{err: err, text: strings.Replace(err.Error(), e.Error(), named, 1)}
}

// settingsError is a library's typed error that names settings: Render words it with the
// names the user knows them by.
type settingsError interface {
	error
	Render(name func(setting.Name) string) string
}

// flagged is an error reworded with flag names.
type flagged struct {
	err  error
	text string
}

func (f flagged) Error() string { return f.text }
func (f flagged) Unwrap() error { return f.err }
