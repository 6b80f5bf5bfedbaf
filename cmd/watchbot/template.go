package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/watchbot/watchbot/cloudformation"
	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/setting"
	"github.com/watchbot/watchbot/supervisor"
)

func templateCommand() *cli.Command {
	d := cloudformation.DefaultOptions()
	return &cli.Command{
		Name:      "template",
		Usage:     "print the CloudFormation stack of a worker on ECS Fargate, with its queues and alarms",
		ArgsUsage: "-- COMMAND [ARG...]",
		Description: "The worker command after -- becomes the container command\n" +
			"  /usr/local/bin/watchbot listen --queue-url <queue> ... -- COMMAND [ARG...]\n" +
			"so the image (a deploy-time parameter) must hold the watchbot binary at /usr/local/bin/watchbot.\n" +
			"Deploy-time values are the template's parameters: ContainerImage, Cluster, Subnets,\n" +
			"SecurityGroups, AssignPublicIp, and exactly one of AlarmEmail and AlarmTopicArn.\n" +
			"Deploy with: aws cloudformation deploy --template-file FILE --stack-name NAME --capabilities CAPABILITY_IAM --parameter-overrides ...",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "format", Value: string(cloudformation.YAML), Usage: "output `FORMAT`: yaml or json"},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "write the template to `FILE` instead of stdout"},
			&cli.StringFlag{Name: "name-prefix", Usage: "`PREFIX` of queue, task family and alarm names (default: the stack's name)"},
			&cli.StringFlag{Name: "queue-name", Usage: "work queue `NAME` (default: PREFIX-queue); the DLQ is NAME-dead-letter"},
			&cli.GenericFlag{Name: "queue", Value: &repeated{}, Usage: "a work queue `NAME[:WEIGHT]` and its DLQ (repeatable, in priority order)"},
			&cli.StringFlag{Name: "queue-policy", Usage: "listen's --queue-policy `POLICY` across several --queue: weighted or strict", DefaultText: cloudformation.QueuePolicyWeighted},
			&cli.BoolFlag{Name: "fifo", Usage: "FIFO queues (content-based deduplication); a --queue-name must end in .fifo"},
			&cli.IntFlag{Name: "max-attempts", Value: d.MaxAttempts, Usage: "attempts before a message is dead-lettered: maxReceiveCount and listen's (1..1000)"},
			durationFlag("visibility-timeout", d.VisibilityTimeout, "the queue's visibility timeout and listen's lease (1s..12h)"),
			durationFlag("queue-retention", d.QueueRetention, "the work queue's message retention (1m to under 14 days; the DLQ keeps 14 days)"),
			&cli.IntFlag{Name: "concurrency", Value: d.Concurrency, Usage: "worker processes per task (listen's --concurrency, 1..1000)"},
			&cli.IntFlag{Name: "cpu", Value: d.CPU, Usage: "Fargate task CPU `UNITS`: 256, 512, 1024, 2048, 4096, 8192 or 16384"},
			&cli.IntFlag{Name: "memory", Value: d.Memory, Usage: "Fargate task memory in `MiB`, one of the values Fargate allows for --cpu"},
			&cli.IntFlag{Name: "min-tasks", Value: d.MinTasks, Usage: "tasks kept running when the queue is empty"},
			&cli.IntFlag{Name: "max-tasks", Value: d.MaxTasks, Usage: "most tasks autoscaling starts"},
			durationFlag("target-latency", d.TargetLatency, "how long a message may wait before a worker starts it (at least 1m)"),
			durationFlag("expected-job-duration", d.ExpectedJobDuration, "how long a worker typically takes for one message (1s..12h)"),
			&cli.StringFlag{Name: "metrics", Value: string(d.Metrics), Usage: "listen's --metrics `MODE`: emf, cloudwatch or none (none: no alarms on its metrics)"},
			&cli.StringFlag{Name: "metrics-namespace", Value: d.MetricsNamespace, Usage: "CloudWatch `NAMESPACE` of watchbot's metrics and alarms"},
			&cli.GenericFlag{Name: "env", Value: &repeated{}, Usage: "extra container environment variable `NAME=VALUE` (repeatable)"},
			&cli.StringFlag{Name: "extra-policy", Usage: "JSON `FILE` of IAM statements added to the task role"},
			&cli.StringFlag{Name: "brake", Value: "on", Usage: "listen's --brake: on, or off (which leaves out the Braking alarm)"},
			&cli.IntFlag{Name: "log-retention-days", Value: d.LogRetentionDays, Usage: "log group retention in `DAYS` (a CloudWatch Logs period: 1, 3, 5, 7, 14, 30, 60, 90, ...)"},
			durationFlag("shutdown-timeout", d.ShutdownTimeout, "listen's drain window; + --kill-grace + 5s is the StopTimeout (at most 120s)"),
			durationFlag("kill-grace", d.KillGrace, "listen's SIGTERM to SIGKILL escalation"),
			&cli.StringFlag{Name: "http-addr", Value: d.HTTPAddr, Usage: "listen's --http-addr `ADDR`, asked by the health check (loopback IP:PORT or :PORT)"},
			&cli.GenericFlag{Name: "schedule", Value: &repeated{}, Usage: "a scheduled task, `NAME=EXPR[,path=/PATH][,body=BODY]` (repeatable)"},
			&cli.StringFlag{Name: "cron-yaml", Usage: "an Elastic Beanstalk cron.yaml `FILE` whose periodic tasks become schedules"},
			&cli.StringFlag{Name: "schedule-timezone", Value: d.ScheduleTimezone, Usage: "IANA time `ZONE` the schedules' cron expressions are read in"},
			&cli.BoolFlag{Name: "reduce", Usage: "add the DynamoDB table of watchbot progress; workers get its ARN in $ProgressTable"},
			&cli.BoolFlag{Name: "dedupe", Usage: "add a DynamoDB table for duplicate suppression, passed to listen as --dedupe-table"},
			&cli.BoolFlag{Name: "limits", Usage: "add a DynamoDB table sharing limits and pauses, passed to listen as --limits-table"},
			&cli.StringFlag{Name: "payload-bucket", Usage: "create the S3 bucket `NAME` for bodies too large for SQS (docs/payloads.md)"},
			&cli.StringFlag{Name: "existing-payload-bucket", Usage: "use the existing S3 bucket `NAME` for large bodies, not created"},
			&cli.StringFlag{Name: "otel-endpoint", Usage: "export traces to the OTLP endpoint `URL` (OTEL_EXPORTER_OTLP_ENDPOINT)"},
			&cli.StringFlag{Name: "otel-protocol", Usage: "OTLP `PROTOCOL` of --otel-endpoint: " + strings.Join(cloudformation.OTelProtocols, " or "), DefaultText: cloudformation.OTelProtocols[0]},
		}, append(thresholdFlags(d.Alarms), templateListenFlags()...)...),
		Action: func(c *cli.Context) error {
			format, err := cloudformation.ParseFormat(c.String("format"))
			if err != nil {
				return usageError{err}
			}
			o, err := templateOptions(c)
			if err != nil {
				return err
			}
			// Generate validates the options, the one check of them.
			tpl, err := cloudformation.Generate(o)
			if _, refused := errors.AsType[settingsError](err); refused {
				// The template passes Volumes to listen in the container's environment.
				return usageError{withFlags(err, map[setting.Name]string{listenspec.SettingVolumes: "--env Volumes"})}
			}
			if err != nil {
				return fmt.Errorf("generate template: %w", err)
			}
			out, err := tpl.Render(format)
			if err != nil {
				return err
			}
			if path := c.String("output"); path != "" {
				return writeOutput(c.App.ErrWriter, path, out)
			}
			_, err = c.App.Writer.Write(out)
			return err
		},
	}
}

// templateOptions copies the flags into cloudformation.Options.
func templateOptions(c *cli.Context) (cloudformation.Options, error) {
	o := cloudformation.DefaultOptions()
	o.NamePrefix = c.String("name-prefix")
	o.QueueName = c.String("queue-name")
	for _, v := range repeatedValues(c, "queue") {
		q, err := cloudformation.ParseQueueSpec(v)
		if err != nil {
			return o, usageError{withFlags(err, nil)}
		}
		o.Queues = append(o.Queues, q)
	}
	o.QueuePolicy = c.String("queue-policy")
	o.FIFO = c.Bool("fifo")
	o.MaxAttempts = c.Int("max-attempts")
	o.VisibilityTimeout = durationOf(c, "visibility-timeout")
	o.QueueRetention = durationOf(c, "queue-retention")
	o.Command = c.Args().Slice()
	o.Concurrency = c.Int("concurrency")
	o.CPU = c.Int("cpu")
	o.Memory = c.Int("memory")
	o.MinTasks = c.Int("min-tasks")
	o.MaxTasks = c.Int("max-tasks")
	o.TargetLatency = durationOf(c, "target-latency")
	o.ExpectedJobDuration = durationOf(c, "expected-job-duration")
	o.Metrics = cloudformation.MetricsMode(c.String("metrics"))
	o.MetricsNamespace = c.String("metrics-namespace")
	var err error
	if o.Alarms, err = readThresholds(c); err != nil {
		return o, err
	}
	if o.Brake, err = brakeOn(c.String("brake")); err != nil {
		return o, err
	}
	o.LogRetentionDays = c.Int("log-retention-days")
	o.ShutdownTimeout = durationOf(c, "shutdown-timeout")
	o.KillGrace = durationOf(c, "kill-grace")
	o.HTTPAddr = c.String("http-addr")
	o.ScheduleTimezone = c.String("schedule-timezone")
	o.Reduce = c.Bool("reduce")
	o.Dedupe = c.Bool("dedupe")
	o.Limits = c.Bool("limits")
	o.OTelEndpoint, o.OTelProtocol = c.String("otel-endpoint"), c.String("otel-protocol")
	if o.PayloadBucket, err = cloudformation.ChoosePayloadBucket(givenString(c, "payload-bucket"), givenString(c, "existing-payload-bucket")); err != nil {
		return o, usageError{withFlags(err, nil)}
	}
	for _, read := range []func(*cli.Context, *cloudformation.Options) error{readTemplateListen, readTemplateSchedules, readTemplateEnv, readExtraPolicy} {
		if err := read(c, &o); err != nil {
			return o, err
		}
	}
	return o, nil
}

// givenString is the string flag's value, or nil when it is not given.
func givenString(c *cli.Context, name string) *string {
	if !c.IsSet(name) {
		return nil
	}
	v := c.String(name)
	return &v
}

// templateListenFlags are listen's flags that `watchbot template` offers too (listenSettings'
// rows with a template use), with listen's defaults: the template reads none of them from the
// environment, which is the deploying machine's, not the task's.
func templateListenFlags() []cli.Flag {
	rows := templateListenSettings()
	for i := range rows {
		rows[i].env = nil
	}
	return cliFlags(rows)
}

func templateListenSettings() []listenSetting {
	var rows []listenSetting
	for _, s := range listenSettings {
		if s.template != listenOnly {
			rows = append(rows, s)
		}
	}
	return rows
}

// readTemplateListen reads listen's flags of the template by listen's own rows, and checks the
// limits by listen's rules: the tuning goes into the options' fields of the same names, the
// limits that are set into LimitArgs, as given.
func readTemplateListen(c *cli.Context, o *cloudformation.Options) error {
	rows := templateListenSettings()
	a := defaultListenArgs()
	err := readListenArgs(c, rows, &a)
	if err == nil {
		err = supervisor.CheckLimits(a.Listen.Limits, a.Listen.BatchSize)
	}
	if err != nil {
		return usageError{withFlags(err, nil)}
	}
	l := a.Listen
	o.Backoff, o.HeartbeatInterval, o.MaxJobDuration, o.BatchSize, o.BatchWindow = l.Backoff, l.HeartbeatInterval, l.MaxJobDuration, l.BatchSize, l.BatchWindow
	for _, s := range rows {
		switch {
		case s.template != templateArg || !c.IsSet(s.name):
		case s.field != nil && reflect.TypeOf(s.field(&a)).Elem().Kind() == reflect.Bool:
			if c.Bool(s.name) {
				o.LimitArgs = append(o.LimitArgs, "--"+s.name) // a bool flag takes no separate value
			}
		default:
			o.LimitArgs = append(o.LimitArgs, "--"+s.name, c.String(s.name))
		}
	}
	return nil
}

// readTemplateSchedules reads --cron-yaml's schedules, then --schedule's.
func readTemplateSchedules(c *cli.Context, o *cloudformation.Options) error {
	if path := c.String("cron-yaml"); path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return usagef("--cron-yaml: %v", err)
		}
		schedules, err := cloudformation.ParseCronYAML(data)
		if err != nil {
			return usagef("--cron-yaml %s: %w", path, err)
		}
		o.Schedules = schedules
	}
	for _, v := range repeatedValues(c, "schedule") {
		sc, err := cloudformation.ParseSchedule(v)
		if err != nil {
			return usageError{err}
		}
		o.Schedules = append(o.Schedules, sc)
	}
	return nil
}

// readTemplateEnv reads --env's NAME=VALUE pairs.
func readTemplateEnv(c *cli.Context, o *cloudformation.Options) error {
	for _, kv := range repeatedValues(c, "env") {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			return usagef("--env %q: expected NAME=VALUE", kv)
		}
		if o.Environment == nil {
			o.Environment = map[string]string{}
		}
		if _, dup := o.Environment[name]; dup {
			return usagef("--env %s: given twice", name)
		}
		o.Environment[name] = value
	}
	return nil
}

// readExtraPolicy reads --extra-policy's IAM statements.
func readExtraPolicy(c *cli.Context, o *cloudformation.Options) error {
	path := c.String("extra-policy")
	if path == "" {
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return usagef("--extra-policy: %v", err)
	}
	if o.ExtraStatements, err = cloudformation.ParseStatements(data); err != nil {
		return usagef("--extra-policy %s: %v", path, err)
	}
	return nil
}

// writeOutput writes the template to --output's path and says on stderr what it wrote, and
// whether it replaced a file: stdout stays free for a pipe, and a file overwritten is never a
// surprise.
func writeOutput(stderr io.Writer, path string, data []byte) error {
	_, statErr := os.Stat(path)
	if err := writeFileAtomic(path, data); err != nil {
		return err
	}
	verb := "wrote"
	if statErr == nil {
		verb = "replaced"
	}
	_, err := fmt.Fprintf(stderr, "watchbot template: %s %s (%d bytes)\n", verb, path, len(data))
	return err
}

// writeFileAtomic writes data to path through a temporary file in the same directory, so that
// path holds either its old content or the whole template, never a part.
func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write --output: %w", err)
	}
	defer os.Remove(f.Name()) // no-op after the rename
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write --output: %w", err)
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return fmt.Errorf("write --output: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write --output: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write --output: %w", err)
	}
	return nil
}
