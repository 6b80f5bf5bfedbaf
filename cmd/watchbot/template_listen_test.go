package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/urfave/cli/v2"

	"github.com/watchbot/watchbot/app"
	"github.com/watchbot/watchbot/backoff"
	"github.com/watchbot/watchbot/cloudformation"
	"github.com/watchbot/watchbot/supervisor"
	"github.com/watchbot/watchbot/worker"
)

// TestTemplatesStartListen generates templates over a table of option combinations, takes the
// container's command and environment out of each, and runs them through listen's own flag
// parsing (environment aliases included) and validation, as the container would: any
// generated stack whose listen would refuse to start fails the test. The container's health
// check goes through health's flag parsing the same way, and must ask the address listen
// serves. Every generation option is used by some row.
func TestTemplatesStartListen(t *testing.T) {
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.json")
	if err := os.WriteFile(policy, []byte(`{"Effect":"Allow","Action":"s3:GetObject","Resource":"arn:aws:s3:::in/*"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cronYAML := filepath.Join(dir, "cron.yaml")
	if err := os.WriteFile(cronYAML, []byte("version: 1\ncron:\n - {name: audit, url: /audit, schedule: '0 23 * * *'}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	base := supervisor.DefaultConfig()
	tests := []struct {
		name string
		args []string
		want func(c *supervisor.Config) // listen's config, from listen's defaults
	}{
		{"defaults", nil, func(c *supervisor.Config) { c.MaxAttempts = 10 }},
		{"fifo with names and retention", []string{"--fifo", "--queue-name", "orders.fifo", "--name-prefix", "shop", "--queue-retention", "96h", "--max-attempts", "3"},
			func(c *supervisor.Config) { c.MaxAttempts = 3 }},
		{"lease and concurrency", []string{"--visibility-timeout", "45s", "--heartbeat-interval", "10s", "--concurrency", "16", "--max-attempts", "1000"},
			func(c *supervisor.Config) {
				c.VisibilityTimeout, c.HeartbeatInterval, c.Concurrency, c.MaxAttempts = 45*time.Second, 10*time.Second, 16, 1000
			}},
		{"longest lease", []string{"--visibility-timeout", "12h", "--max-job-duration", "11h"},
			func(c *supervisor.Config) {
				c.MaxAttempts, c.VisibilityTimeout, c.MaxJobDuration = 10, 12*time.Hour, 11*time.Hour
			}},
		{"batch mode", []string{"--batch-size", "50", "--batch-window", "5s", "--concurrency", "2"},
			func(c *supervisor.Config) {
				c.MaxAttempts, c.BatchSize, c.BatchWindow, c.Concurrency = 10, 50, 5*time.Second, 2
			}},
		{"backoff", []string{"--backoff-base", "500ms", "--backoff-min", "1s", "--backoff-max", "10m", "--backoff-jitter", "full"},
			func(c *supervisor.Config) {
				c.MaxAttempts = 10
				c.Backoff = backoff.Exponential{Base: 500 * time.Millisecond, Min: time.Second, Max: 10 * time.Minute, Jitter: backoff.Full}
			}},
		{"metrics cloudwatch, drain at Fargate's limit", []string{"--metrics", "cloudwatch", "--metrics-namespace", "Team/Jobs", "--shutdown-timeout", "90s", "--kill-grace", "25s"},
			func(c *supervisor.Config) {
				c.MaxAttempts, c.ShutdownTimeout, c.KillGrace = 10, 90*time.Second, 25*time.Second
			}},
		{"no metrics", []string{"--metrics", "none"}, func(c *supervisor.Config) { c.MaxAttempts = 10 }},
		{"a Lambda function", []string{"--lambda", "--lambda-function-name", "resize", "--lambda-handler", "index.handler", "--lambda-init-timeout", "30s"},
			func(c *supervisor.Config) {
				c.MaxAttempts, c.BatchSize = 10, 10
				c.Lambda = worker.LambdaWorker{Enabled: true, FunctionName: "resize", Handler: "index.handler", InitTimeout: 30 * time.Second}
			}},
		{"metrics scraped from outside the task", []string{"--http-addr", ":9464"}, func(c *supervisor.Config) { c.MaxAttempts = 10 }},
		{"no brake", []string{"--brake", "off"}, func(c *supervisor.Config) { c.MaxAttempts, c.Brake.Enabled = 10, false }},
		{"Watchbot's environment", []string{"--env", "Volumes=/scratch", "--env", "maxJobDuration=300", "--env", "structuredLogging=false", "--env", "TMPDIR=/work"},
			func(c *supervisor.Config) {
				c.MaxAttempts, c.Volumes, c.MaxJobDuration = 10, []string{"/scratch"}, 5*time.Minute
			}},
		{"scheduled tasks", []string{"--fifo", "--schedule", "tick=rate(5 minutes),path=/tick", "--cron-yaml", cronYAML, "--schedule-timezone", "Europe/Paris"},
			func(c *supervisor.Config) { c.MaxAttempts = 10 }},
		{"one container per job", []string{"--env", "writableFilesystem=true"}, func(c *supervisor.Config) { c.MaxAttempts, c.Once = 10, true }},
		{"traces to a collector", []string{"--otel-endpoint", "http://localhost:4318", "--otel-protocol", "http/protobuf"},
			func(c *supervisor.Config) { c.MaxAttempts = 10 }},
		{"one queue by --queue, its weight and policy for listen unneeded", []string{"--queue", "urgent:3", "--queue-policy", "strict"},
			func(c *supervisor.Config) { c.MaxAttempts = 10 }},
		{"several queues, in priority order, weighted", []string{"--queue", "urgent", "--queue", "bulk:3", "--queue", "backfill"},
			func(c *supervisor.Config) {
				c.MaxAttempts = 10
				c.Queues.More = []string{generatedQueueURLOf("QueueBulk"), generatedQueueURLOf("QueueBackfill")}
				c.Queues.Weights = map[string]int{"stack-bulk": 3}
			}},
		{"several queues, strict", []string{"--queue", "urgent", "--queue", "bulk", "--queue-policy", "strict"},
			func(c *supervisor.Config) {
				c.MaxAttempts = 10
				c.Queues.More, c.Queues.Policy = []string{generatedQueueURLOf("QueueBulk")}, supervisor.PolicyStrict
			}},
		{"several queues with duplicate suppression", []string{"--queue", "urgent", "--queue", "bulk", "--dedupe"},
			func(c *supervisor.Config) {
				c.MaxAttempts, c.Dedupe.Table = 10, generatedTableName(cloudformation.DedupeTable.LogicalID)
				c.Queues.More = []string{generatedQueueURLOf("QueueBulk")}
			}},
		{"reduce mode", []string{"--reduce"}, func(c *supervisor.Config) { c.MaxAttempts = 10 }},
		{"a payload bucket the stack creates", []string{"--payload-bucket", "payloads-${AWS::AccountId}"},
			func(c *supervisor.Config) { c.MaxAttempts, c.Payload.Buckets = 10, []string{generatedPayloadBucket} }},
		{"an existing payload bucket", []string{"--existing-payload-bucket", "acme-payloads"},
			func(c *supervisor.Config) { c.MaxAttempts, c.Payload.Buckets = 10, []string{"acme-payloads"} }},
		{"duplicate suppression", []string{"--dedupe"},
			func(c *supervisor.Config) {
				c.MaxAttempts, c.Dedupe.Table = 10, generatedTableName(cloudformation.DedupeTable.LogicalID)
			}},
		{"limits shared by the fleet", []string{"--limits", "--rate-limit", "300/m", "--fleet-concurrency", "8", "--limit-key", "attr:tenant",
			"--rate-limit-per-key", "1/s", "--concurrency-per-key", "2", "--limit-wait", "1m", "--max-pause", "5m"},
			func(c *supervisor.Config) {
				c.MaxAttempts = 10
				c.Limits.Fleet.Table, c.Limits.Fleet.Task = generatedTableName(cloudformation.LimitsTable.LogicalID), taskName(context.Background())
				c.Limits.Fleet.Rate, c.Limits.Fleet.Concurrency, c.Limits.Key = 5, 8, "attr:tenant"
				c.Limits.Fleet.RatePerKey, c.Limits.Fleet.ConcurrencyPerKey, c.Limits.Wait, c.Limits.Fleet.MaxPause = 1, 2, time.Minute, 5*time.Minute
				c.Limits.Fleet.Member = fleetMember(*c)
			}},
		{"task size, scaling, alarms, logs, policy, yaml to a file", []string{"--cpu", "1024", "--memory", "4096", "--min-tasks", "1", "--max-tasks", "50",
			"--target-latency", "15m", "--expected-job-duration", "2m",
			"--worker-errors-threshold", "3", "--oldest-message-age-threshold", "30m", "--braking-threshold", "20m", "--log-retention-days", "7", "--extra-policy", policy,
			"--format", "yaml", "--output", filepath.Join(dir, "stack.yaml")},
			func(c *supervisor.Config) { c.MaxAttempts = 10 }},
	}
	used := map[string]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, a := range tt.args {
				if name, ok := strings.CutPrefix(a, "--"); ok {
					used[name] = true
				}
			}
			command, env, check := generatedContainer(t, tt.args)
			for name, value := range env {
				t.Setenv(name, value)
			}
			cfg, err := parseListenCommand(command)
			if err != nil {
				t.Fatalf("the generated task would not start: listen %v (env %v): %v", command, env, err)
			}
			served, asked := flagValue(command, "--http-addr"), ""
			if len(check) < 2 || check[0] != "CMD" || check[1] != cloudformation.WatchbotPath {
				t.Errorf("health check %q does not exec %s", check, cloudformation.WatchbotPath)
			} else if asked, err = parseHealthCommand(check[2:]); err != nil {
				t.Errorf("the health check would not run: %v: %v", check, err)
			}
			if served == "" || asked != served {
				t.Errorf("the health check asks %q, listen serves --http-addr %q", asked, served)
			}
			want := base
			want.QueueURL = generatedQueueURL
			want.Command = []string{"/app/worker", "--mode", "thumbnail"}
			tt.want(&want)
			if diff := cmp.Diff(want, cfg); diff != "" {
				t.Errorf("listen's config (-want +got):\n%s", diff)
			}
		})
	}
	for _, f := range templateCommand().Flags {
		if name := f.Names()[0]; !used[name] {
			t.Errorf("no row uses --%s: every generation option must reach a listen that starts", name)
		}
	}
}

// generatedQueueURL stands for the queue's URL, an intrinsic in the template.
const generatedQueueURL = "https://sqs.eu-west-1.amazonaws.com/123456789012/queue"

// generatedQueueURLOf stands for the URL of a further queue of a stack with several (logical
// id Queue + its name in camel case), named as the template names it with the stack "stack".
func generatedQueueURLOf(id string) string {
	return "https://sqs.eu-west-1.amazonaws.com/123456789012/stack-" + strings.ToLower(strings.TrimPrefix(id, "Queue"))
}

// generatedTableName stands for the name of the state table with logical id id, an intrinsic
// in the template, as CloudFormation names it; generatedTableARN for its ARN.
func generatedTableName(id string) string { return "stack-" + id + "-1A2B3C4D5E6F" }

func generatedTableARN(id string) string {
	return "arn:aws:dynamodb:eu-west-1:123456789012:table/" + generatedTableName(id)
}

// generatedPayloadBucket stands for the name of the payload bucket the template creates.
const generatedPayloadBucket = "payloads-123456789012"

// generatedAgentURI stands for the ECS agent's URI, which the agent sets in every container.
const generatedAgentURI = "http://169.254.170.2/api/0123456789abcdef-1234567890"

// generatedContainer runs `watchbot template args -- /app/worker --mode thumbnail` and returns
// the container's command (after the entry point) and environment, intrinsics resolved, and
// its health check's command.
func generatedContainer(t *testing.T, args []string) (command []string, env map[string]string, check []string) {
	t.Helper()
	args = append(slices.Clone(args), "--", "/app/worker", "--mode", "thumbnail")
	out := ""
	if i := slices.Index(args, "--output"); i >= 0 {
		code, _, stderr := runTemplate(t, args...)
		if code != 0 {
			t.Fatalf("template %v: exit %d: %s", args, code, stderr)
		}
		data, err := os.ReadFile(args[i+1])
		if err != nil {
			t.Fatal(err)
		}
		out = string(data)
		args = append(args[:i:i], args[i+2:]...)
	}
	if i := slices.Index(args, "--format"); i >= 0 {
		args = append(args[:i:i], args[i+2:]...)
	}
	code, stdout, stderr := runTemplate(t, append([]string{"--format", "json"}, args...)...)
	if code != 0 {
		t.Fatalf("template %v: exit %d: %s", args, code, stderr)
	}
	if out != "" && !strings.Contains(out, "listen") {
		t.Errorf("--output wrote no template: %q", out)
	}
	var tpl struct {
		Resources map[string]struct {
			Type       string
			Properties struct {
				ContainerDefinitions []struct {
					EntryPoint  []string
					Command     []any
					Environment []struct {
						Name  string
						Value any
					}
					HealthCheck struct{ Command []string }
				}
			}
		}
	}
	if err := json.Unmarshal([]byte(stdout), &tpl); err != nil {
		t.Fatal(err)
	}
	for _, r := range tpl.Resources {
		if r.Type != "AWS::ECS::TaskDefinition" {
			continue
		}
		c := r.Properties.ContainerDefinitions[0]
		if !slices.Equal(c.EntryPoint, []string{"/usr/local/bin/watchbot"}) {
			t.Fatalf("entry point %v", c.EntryPoint)
		}
		for _, a := range c.Command {
			command = append(command, resolve(t, a))
		}
		env = map[string]string{}
		for _, kv := range c.Environment {
			env[kv.Name] = resolve(t, kv.Value)
		}
		return command, env, c.HealthCheck.Command
	}
	t.Fatal("no task definition in the template")
	return nil, nil, nil
}

// flagValue returns the value after the flag name in args, before any "--".
func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == "--" {
			break
		}
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// parseHealthCommand parses args (starting with "health") as the health command does and
// returns the address it would ask, without asking.
func parseHealthCommand(args []string) (string, error) {
	cmd := healthCommand()
	var addr string
	var addrErr error
	cmd.Action = func(c *cli.Context) error {
		addr = c.String("http-addr")
		if c.NArg() > 0 {
			addrErr = fmt.Errorf("arguments %q", c.Args().Slice())
		} else if _, err := healthURL(addr); err != nil {
			addrErr = err
		}
		return nil
	}
	if err := parseCommand(cmd, args); err != nil {
		return "", err
	}
	return addr, addrErr
}

// parseCommand runs the watchbot command cmd on args (starting with its name), printing
// nothing, and returns the error of its flag parsing.
func parseCommand(cmd *cli.Command, args []string) error {
	app := &cli.App{Name: "watchbot", Commands: []*cli.Command{cmd}, Writer: io.Discard, ErrWriter: io.Discard,
		ExitErrHandler: func(*cli.Context, error) {}}
	withUsage(app.Commands)
	if err := app.Run(append([]string{"watchbot"}, args...)); err != nil {
		return fmt.Errorf("flags: %w", err)
	}
	return nil
}

// resolve turns a template value into what the container sees: the queue's URL for the
// queue's Ref, a region for AWS::Region, a state table's name and ARN for its Ref and Arn,
// the stack's name for a name built from it.
func resolve(t *testing.T, v any) string {
	t.Helper()
	switch v := v.(type) {
	case string:
		return v
	case map[string]any:
		if s, ok := v["Fn::Sub"].(string); ok && !strings.Contains(strings.ReplaceAll(s, "${AWS::StackName}", ""), "${") {
			return strings.ReplaceAll(s, "${AWS::StackName}", "stack")
		}
		switch ref, _ := v["Ref"].(string); {
		case ref == "Queue":
			return generatedQueueURL
		case strings.HasPrefix(ref, "Queue"):
			return generatedQueueURLOf(ref)
		case ref == "AWS::Region":
			return "eu-west-1"
		}
		if v["Ref"] == cloudformation.ResPayloadBucket {
			return generatedPayloadBucket
		}
		for _, table := range cloudformation.Tables(cloudformation.Options{Reduce: true, Dedupe: true, Limits: true}) {
			switch {
			case v["Ref"] == table.LogicalID:
				return generatedTableName(table.LogicalID)
			case cmp.Equal(v["Fn::GetAtt"], []any{table.LogicalID, "Arn"}):
				return generatedTableARN(table.LogicalID)
			}
		}
	}
	t.Fatalf("cannot resolve %v", v)
	return ""
}

// parseListenCommand parses args (starting with "listen") as the listen command does and
// returns the config it validates.
func parseListenCommand(args []string) (supervisor.Config, error) {
	cmd := listenCommand(nil)
	var cfg supervisor.Config
	var cfgErr error
	cmd.Action = func(c *cli.Context) error {
		// In a task the ECS agent sets its URI; the template asks for protection.
		var opts app.Options
		opts, cfgErr = listenOptions(c, generatedAgentURI)
		cfg = opts.Listen
		return nil
	}
	if err := parseCommand(cmd, args); err != nil {
		return cfg, err
	}
	return cfg, cfgErr
}

// TestTemplateReduceReachesProgress checks that `watchbot progress`, run by the worker of a
// --reduce stack, finds the stack's progress table in the environment the template sets.
func TestTemplateReduceReachesProgress(t *testing.T) {
	_, env, _ := generatedContainer(t, []string{"--reduce"})
	t.Setenv("WATCHBOT_PROGRESS_TABLE", "")
	for name, value := range env {
		t.Setenv(name, value)
	}
	c := cli.NewContext(&cli.App{}, flag.NewFlagSet("progress", flag.ContinueOnError), nil)
	c.Context = t.Context()
	_, where, err := progressStore(c, progressArgs{})
	if want := "$" + cloudformation.ProgressTable.Env; err != nil || !strings.Contains(where, want) {
		t.Errorf("watchbot progress in the task: %q, %v; want the table from %s", where, err, want)
	}
}
