package main

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/watchbot/watchbot/cloudformation"
	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/setting"
)

// Every setting a package may refuse is named by a flag that a command really has.
func TestSettingFlags(t *testing.T) {
	var flags []string
	var walk func([]*cli.Command)
	walk = func(cmds []*cli.Command) {
		for _, cmd := range cmds {
			for _, f := range cmd.Flags {
				for _, n := range f.Names() {
					flags = append(flags, "--"+n)
				}
			}
			walk(cmd.Subcommands)
		}
	}
	walk(newApp(nil, nil, nil, nil).Commands)
	for _, s := range slices.Concat(listenspec.Settings, setting.Names) {
		f, ok := settingFlags[s]
		switch {
		case !ok:
			t.Errorf("setting %s has no flag", s)
		case strings.HasPrefix(f, "--") && !slices.Contains(flags, f):
			t.Errorf("setting %s: %s is no command's flag", s, f)
		}
	}
}

func TestWithFlags(t *testing.T) {
	lease := listenspec.Lease(time.Minute, 2*time.Minute)
	tests := []struct {
		name  string
		err   error
		names map[setting.Name]string
		want  string
	}{
		{"a rule", lease, nil, "--heartbeat-interval (2m0s) must be shorter than --visibility-timeout (1m0s)"},
		{"wrapped", fmt.Errorf("start: %w", lease), nil, "start: --heartbeat-interval (2m0s) must be shorter than --visibility-timeout (1m0s)"},
		{"a command's own name", listenspec.Volumes([]string{"tmp"}, 1), map[setting.Name]string{listenspec.SettingVolumes: "--env Volumes"},
			`--env Volumes ("tmp") must be an absolute directory path`},
		{"a failed call", setting.Error{Setting: setting.QueueURL, Reason: "queue not reachable", Err: errors.New("timeout")}, nil,
			"--queue-url: queue not reachable: timeout"},
		{"a schedule", fmt.Errorf("--cron-yaml c.yaml: %w", &cloudformation.ScheduleError{Task: "tick",
			Reason: "given twice (" + setting.Ref(setting.CronYAML) + ")"}), nil, "--cron-yaml c.yaml: --schedule tick: given twice (--cron-yaml)"},
		{"worded already", usageError{withFlags(listenspec.Volumes([]string{"tmp"}, 1), map[setting.Name]string{listenspec.SettingVolumes: "--env Volumes"})}, nil,
			`--env Volumes ("tmp") must be an absolute directory path`},
		{"no setting", errors.New("other"), nil, "other"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := withFlags(tt.err, tt.names)
			if got.Error() != tt.want {
				t.Errorf("withFlags = %q, want %q", got, tt.want)
			}
			if !errors.Is(got, tt.err) {
				t.Errorf("withFlags(%v) does not wrap it", tt.err)
			}
		})
	}
}

// Each row of listenSettings that names a field sets that field, and no other, from its flag.
func TestListenSettingsSetTheirFields(t *testing.T) {
	for _, s := range listenSettings {
		if s.field == nil {
			continue
		}
		t.Run(s.name, func(t *testing.T) {
			want := defaultListenArgs()
			field := reflect.ValueOf(s.field(&want)).Elem()
			const queue = "https://sqs.us-east-1.amazonaws.com/123456789012/jobs"
			want.Listen.QueueURL = queue
			args := []string{"--queue-url", queue, "--" + s.name}
			switch {
			case field.Type() == durationType:
				args = append(args, "17s")
				field.SetInt(int64(17 * time.Second))
			case field.Kind() == reflect.Int:
				args = append(args, "7")
				field.SetInt(7)
			case field.Kind() == reflect.Float64:
				args = append(args, "0.7")
				field.SetFloat(0.7)
			case field.Kind() == reflect.Bool:
				field.SetBool(true)
			case field.Kind() == reflect.String:
				args = append(args, " x ")
				field.SetString(" x ")
				if s.trim {
					field.SetString("x")
				}
			}
			cmd := &cli.Command{Name: "listen", Flags: cliFlags(listenSettings)}
			got := defaultListenArgs()
			cmd.Action = func(c *cli.Context) error { return readListenArgs(c, listenSettings, &got) }
			if err := parseCommand(cmd, append([]string{"listen"}, args...)); err != nil {
				t.Fatal(err)
			}
			// --log-format's own row reads the terminal; a function is never DeepEqual.
			want.logFormat, got.Metrics.Now, want.Metrics.Now = got.logFormat, nil, nil
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%v did not set its field (%v) alone", args, field)
			}
		})
	}
}

// A row's setting is the path of the supervisor.Config field it sets, as listenspec names it,
// so a refusal of that field is worded with the row's flag.
func TestListenSettingsNameTheirFields(t *testing.T) {
	var a listenArgs
	config := reflect.ValueOf(&a.Listen).Elem()
	for _, s := range listenSettings {
		if s.field == nil || s.setting == "" {
			continue
		}
		path, ok := fieldPath(config, reflect.ValueOf(s.field(&a)).Pointer())
		if ok && setting.Name(path) != s.setting {
			t.Errorf("--%s sets Config.%s but names the setting %s", s.name, path, s.setting)
		}
	}
}

// fieldPath returns the dotted path of the field at address addr inside the struct v.
func fieldPath(v reflect.Value, addr uintptr) (string, bool) {
	for i := range v.NumField() {
		f := v.Field(i)
		if f.Addr().Pointer() == addr && f.Kind() != reflect.Struct {
			return v.Type().Field(i).Name, true
		}
		if f.Kind() == reflect.Struct {
			if sub, ok := fieldPath(f, addr); ok {
				return v.Type().Field(i).Name + "." + sub, true
			}
		}
	}
	return "", false
}
