package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/cloudformation"
)

// runTemplate runs `watchbot template args...` and returns the exit code and both streams.
func runTemplate(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(append([]string{"watchbot", "template"}, args...), strings.NewReader(""), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func renderOptions(t *testing.T, o cloudformation.Options, f cloudformation.Format) string {
	t.Helper()
	tpl, err := cloudformation.Generate(o)
	if err != nil {
		t.Fatal(err)
	}
	out, err := tpl.Render(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func TestTemplateDefaults(t *testing.T) {
	code, stdout, stderr := runTemplate(t, "--", "/app/worker", "--mode", "fast")
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	o := cloudformation.DefaultOptions()
	o.Command = []string{"/app/worker", "--mode", "fast"}
	if diff := cmp.Diff(renderOptions(t, o, cloudformation.YAML), stdout); diff != "" {
		t.Errorf("default YAML (-want +got):\n%s", diff)
	}
}

// TestTemplateFlags checks that every option flag reaches cloudformation.Options.
func TestTemplateFlags(t *testing.T) {
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.json")
	if err := os.WriteFile(policy, []byte(`[{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::inputs/*"}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "stack.json")
	code, stdout, stderr := runTemplate(t,
		"--format", "json", "--output", out,
		"--name-prefix", "orders", "--queue-name", "orders-in.fifo", "--fifo",
		"--max-attempts", "7", "--visibility-timeout", "600", "--queue-retention", "72h",
		"--concurrency", "3", "--cpu", "1024", "--memory", "3072", "--min-tasks", "1", "--max-tasks", "30",
		"--target-latency", "10m", "--expected-job-duration", "45s",
		"--metrics", "cloudwatch", "--metrics-namespace", "Orders",
		"--env", "LOG_LEVEL=debug", "--env", "DSN=postgres://db/x?a=b", "--env", "HOSTS=a,b",
		"--extra-policy", policy,
		"--worker-errors-threshold", "0", "--oldest-message-age-threshold", "15m", "--braking-threshold", "5m", "--brake", "off",
		"--log-retention-days", "90", "--shutdown-timeout", "1m", "--kill-grace", "10s", "--http-addr", "[::1]:9091",
		"--reduce", "--dedupe", "--otel-endpoint", "https://otlp.example.com", "--otel-protocol", "grpc",
		"--", "sh", "-c", "exec /app/orders",
	)
	if code != 0 || stdout != "" || !strings.HasPrefix(stderr, "watchbot template: wrote "+out) {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	o := cloudformation.DefaultOptions()
	o.NamePrefix, o.QueueName, o.FIFO = "orders", "orders-in.fifo", true
	o.MaxAttempts, o.VisibilityTimeout, o.QueueRetention = 7, 10*time.Minute, 72*time.Hour
	o.Concurrency, o.CPU, o.Memory, o.MinTasks, o.MaxTasks = 3, 1024, 3072, 1, 30
	o.TargetLatency, o.ExpectedJobDuration = 10*time.Minute, 45*time.Second
	o.Metrics, o.MetricsNamespace = cloudformation.MetricsCloudWatch, "Orders"
	o.Environment = map[string]string{"LOG_LEVEL": "debug", "DSN": "postgres://db/x?a=b", "HOSTS": "a,b"} // a value's commas are its own
	o.ExtraStatements = []cloudformation.Statement{{Effect: "Allow", Action: []string{"s3:GetObject"}, Resource: []any{"arn:aws:s3:::inputs/*"}}}
	o.Alarms = alarms.Thresholds{WorkerErrorsPerMinute: 0, OldestMessageAgeSeconds: 900, BrakingMinutes: 5}
	o.Brake = false
	o.LogRetentionDays, o.ShutdownTimeout, o.KillGrace = 90, time.Minute, 10*time.Second
	o.HTTPAddr = "[::1]:9091"
	o.Reduce, o.Dedupe = true, true
	o.OTelEndpoint, o.OTelProtocol = "https://otlp.example.com", "grpc"
	o.Command = []string{"sh", "-c", "exec /app/orders"}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(renderOptions(t, o, cloudformation.JSON), string(got)); diff != "" {
		t.Errorf("template from flags (-want +got):\n%s", diff)
	}
	if info, err := os.Stat(out); err != nil || info.Mode().Perm() != 0o644 {
		t.Errorf("output file mode: %v %v", info.Mode(), err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("temporary files left behind: %v", entries)
	}
}

// TestTemplateSchedules checks that --cron-yaml, --schedule and --schedule-timezone reach
// cloudformation.Options: the cron.yaml's tasks first, then each --schedule in order.
func TestTemplateSchedules(t *testing.T) {
	cronYAML := filepath.Join(t.TempDir(), "cron.yaml")
	if err := os.WriteFile(cronYAML, []byte("version: 1\ncron:\n - name: \"backup-job\"\n   url: \"/backup\"\n   schedule: \"0 */12 * * *\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runTemplate(t, "--format", "json",
		"--schedule", `report=cron(0,30 8 ? * MON-FRI *),path=/report,body={"a":1,"b":2}`,
		"--cron-yaml", cronYAML,
		"--schedule", "tick=rate(1 minute)",
		"--schedule-timezone", "America/New_York",
		"--", "/app/worker")
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	o := cloudformation.DefaultOptions()
	o.Command = []string{"/app/worker"}
	o.ScheduleTimezone = "America/New_York"
	o.Schedules = []cloudformation.Schedule{
		{Name: "backup-job", Expression: "cron(0 0,12 * * ? *)", Path: "/backup"},
		{Name: "report", Expression: "cron(0,30 8 ? * MON-FRI *)", Path: "/report", Body: `{"a":1,"b":2}`},
		{Name: "tick", Expression: "rate(1 minute)"},
	}
	if diff := cmp.Diff(renderOptions(t, o, cloudformation.JSON), stdout); diff != "" {
		t.Errorf("template from flags (-want +got):\n%s", diff)
	}
}

func TestTemplateBadInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	notJSON := write("not-json.json", "Effect: Allow")
	principal := write("principal.json", `{"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "*"}`)
	cronBoth := write("cron-both.yaml", "version: 1\ncron:\n - {name: payroll, url: /pay, schedule: '0 0 1 * 5'}\n")
	cronBroken := write("cron-broken.yaml", "version: 1\ncron: [\n")
	cronBadURL := write("cron-bad-url.yaml", "version: 1\ncron:\n - {name: a, url: pay, schedule: '0 0 1 * *'}\n")
	cronDup := write("cron-dup.yaml", "version: 1\ncron:\n - {name: tick, url: /t, schedule: '* * * * *'}\n")
	lowercase := write("lowercase.json", `{"Version": "2012-10-17", "Statement": [{"Effect": "allow", "Action": "s3:GetObject", "Resource": "*"}]}`)
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"max attempts 0", []string{"--max-attempts", "0"}, "--max-attempts (0) must be between 1 and 1000"},
		{"max attempts 1001", []string{"--max-attempts", "1001"}, "--max-attempts (1001) must be between 1 and 1000"},
		{"max attempts not a number", []string{"--max-attempts", "ten"}, "max-attempts"},
		{"otel endpoint not a URL", []string{"--otel-endpoint", "collector:4318"}, `--otel-endpoint ("collector:4318") must be an http:// or https:// URL`},
		{"otel protocol without endpoint", []string{"--otel-protocol", "grpc"}, `--otel-protocol ("grpc") needs --otel-endpoint`},
		{"otel variable twice", []string{"--otel-endpoint", "http://localhost:4318", "--env", "OTEL_EXPORTER_OTLP_PROTOCOL=grpc"},
			`--env ("OTEL_EXPORTER_OTLP_PROTOCOL") is set by the template itself with --otel-endpoint`},
		{"brake neither on nor off", []string{"--brake", "maybe"}, `--brake ("maybe") must be on or off`},
		{"visibility over 12h", []string{"--visibility-timeout", "13h"}, "--visibility-timeout (13h0m0s) must be between 1s and 12h"},
		{"visibility negative", []string{"--visibility-timeout", "-5s"}, "--visibility-timeout (-5s)"},
		{"visibility not a duration", []string{"--visibility-timeout", "soon"}, "visibility-timeout"},
		{"retention 14 days", []string{"--queue-retention", "336h"}, "--queue-retention (336h0m0s)"},
		{"fifo with non-fifo name", []string{"--fifo", "--queue-name", "orders"}, `--queue-name ("orders") must end in .fifo with --fifo`},
		{"fifo name without --fifo", []string{"--queue-name", "orders.fifo"}, "add --fifo"},
		{"unknown format", []string{"--format", "toml"}, `--format ("toml") must be yaml or json`},
		{"cpu/memory", []string{"--cpu", "512", "--memory", "512"}, "--memory (512) is not a Fargate size for --cpu 512"},
		{"metrics", []string{"--metrics", "prometheus"}, `--metrics ("prometheus")`},
		{"env without =", []string{"--env", "DEBUG"}, `--env "DEBUG": expected NAME=VALUE`},
		{"env twice", []string{"--env", "A=1", "--env", "A=2"}, "--env A: given twice"},
		{"env reserved", []string{"--env", "WATCHBOT_QUEUE_URL=x"}, `--env ("WATCHBOT_QUEUE_URL") is set by the template itself`},
		{"env names the progress table", []string{"--reduce", "--env", "ProgressTable=jobs"}, `--env ("ProgressTable") is set by the template itself: with --reduce it names its own table`},
		{"extra policy missing", []string{"--extra-policy", filepath.Join(dir, "nope.json")}, "--extra-policy: open"},
		{"extra policy not json", []string{"--extra-policy", notJSON}, "--extra-policy " + notJSON + ": expected a policy document"},
		{"extra policy principal", []string{"--extra-policy", principal}, "statement 1: Principal is not allowed"},
		{"extra policy effect", []string{"--extra-policy", lowercase}, `statement 1: Effect ("allow") must be "Allow" or "Deny"`},
		{"threshold", []string{"--oldest-message-age-threshold", "10s"}, "--oldest-message-age-threshold"},
		{"threshold fraction", []string{"--oldest-message-age-threshold", "90.5s"}, "--oldest-message-age-threshold (1m30.5s) must be a whole number of seconds"},
		{"stop timeout", []string{"--shutdown-timeout", "2m"}, "must fit in Fargate's longest stop timeout"},
		{"log retention", []string{"--log-retention-days", "10"}, "--log-retention-days (10)"},
		{"target latency too short", []string{"--target-latency", "30s"}, "--target-latency (30s) must be a whole number of seconds, at least 1m0s"},
		{"target latency past retention", []string{"--target-latency", "2h", "--queue-retention", "1h"}, "--target-latency (2h0m0s) must be shorter than --queue-retention (1h0m0s)"},
		{"job duration over 12h", []string{"--expected-job-duration", "13h"}, "--expected-job-duration (13h0m0s)"},
		{"target latency without metrics", []string{"--metrics", "none", "--target-latency", "10m"}, "--target-latency needs watchbot's metrics"},
		{"job duration without metrics", []string{"--expected-job-duration", "2m", "--metrics", "none"}, "--expected-job-duration needs watchbot's metrics"},
		{"http addr without port", []string{"--http-addr", "9090"}, `--http-addr ("9090") must be HOST:PORT`},
		{"http addr of the task", []string{"--http-addr", "10.0.0.5:9090"}, `--http-addr ("10.0.0.5:9090") must have a loopback IP`},
		{"schedule without expression", []string{"--schedule", "tick"}, `--schedule "tick": expected NAME=EXPR`},
		{"schedule rate unit", []string{"--schedule", "tick=rate(2 minute)"}, `--schedule tick: "rate(2 minute)": the unit is singular for 1`},
		{"schedule cron fields", []string{"--schedule", "tick=cron(0 8 * * *)"}, "--schedule tick: \"cron(0 8 * * *)\": a cron expression has 6 fields"},
		{"schedule path", []string{"--schedule", "tick=rate(5 minutes),path=tick"}, `--schedule tick: path ("tick") must start with /`},
		{"schedule name", []string{"--schedule", "my tick=rate(5 minutes)"}, `--schedule "my tick": the name must be`},
		{"schedule twice", []string{"--schedule", "tick=rate(5 minutes)", "--schedule", "tick=rate(1 hour)"}, "--schedule tick: given twice"},
		{"schedule and cron.yaml clash", []string{"--cron-yaml", cronDup, "--schedule", "tick=rate(1 hour)"},
			"--schedule tick: given twice (names must be unique, --cron-yaml entries included)"},
		{"schedule time zone", []string{"--schedule", "tick=rate(5 minutes)", "--schedule-timezone", "Mars/Olympus"},
			`--schedule-timezone ("Mars/Olympus") must be an IANA time zone, e.g. UTC or Europe/Paris`},
		{"schedule time zone empty", []string{"--schedule", "tick=rate(5 minutes)", "--schedule-timezone", ""}, "--schedule-timezone: must not be empty (UTC by default)"},
		{"cron.yaml bad url", []string{"--cron-yaml", cronBadURL}, "--cron-yaml " + cronBadURL + `: entry a: --schedule a: path ("pay") must start with /`},
		{"cron.yaml missing", []string{"--cron-yaml", filepath.Join(dir, "nope.yaml")}, "--cron-yaml: open"},
		{"cron.yaml malformed", []string{"--cron-yaml", cronBroken}, "--cron-yaml " + cronBroken + ": not YAML"},
		{"cron.yaml both days", []string{"--cron-yaml", cronBoth}, "entry payroll: schedule \"0 0 1 * 5\": both day-of-month and day-of-week are restricted"},
		{"Volumes a system directory", []string{"--env", "Volumes=/etc", "--concurrency", "1"}, `--env Volumes ("/etc") is a system directory`},
		{"payload bucket twice", []string{"--payload-bucket", "a-payloads", "--existing-payload-bucket", "b-payloads"}, "--payload-bucket and --existing-payload-bucket: give one"},
		{"payload bucket empty", []string{"--payload-bucket", ""}, "--payload-bucket: give the name of the bucket to create"},
		{"payload bucket upper case", []string{"--payload-bucket", "Payloads"}, `--payload-bucket ("Payloads") is not an S3 bucket name`},
		{"payload bucket with a dot", []string{"--payload-bucket", "acme.payloads"}, `--payload-bucket ("acme.payloads") has a dot`},
		{"payload bucket stack name", []string{"--payload-bucket", "p-${AWS::StackName}"}, "may contain only ${AWS::AccountId} and ${AWS::Region}"},
		{"existing payload bucket empty", []string{"--existing-payload-bucket", ""}, `--existing-payload-bucket ("") must name a bucket`},
		{"no command", nil, "the worker command is required"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-")+".yaml")
			args := append([]string{"--output", out}, c.args...)
			if c.name != "no command" {
				args = append(args, "--", "/app/worker")
			}
			code, stdout, stderr := runTemplate(t, args...)
			if code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			if stdout != "" {
				t.Errorf("printed %q", stdout)
			}
			if !strings.HasPrefix(stderr, "watchbot: ") || !strings.Contains(stderr, c.want) || strings.Count(stderr, "\n") != 1 {
				t.Errorf("stderr %q, want one line with %q", stderr, c.want)
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("output file written: %v", err)
			}
		})
	}
}

func TestTemplateOutputFailure(t *testing.T) {
	code, stdout, stderr := runTemplate(t, "--output", filepath.Join(t.TempDir(), "missing-dir", "t.yaml"), "--", "/app/worker")
	if code != 1 || stdout != "" || !strings.Contains(stderr, "write --output") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// --output replaces a file whole, and says on stderr that it did.
func TestTemplateOutputReplaces(t *testing.T) {
	out := filepath.Join(t.TempDir(), "stack.yaml")
	if err := os.WriteFile(out, []byte("an older stack\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runTemplate(t, "--output", out, "--", "/app/worker")
	if code != 0 || stdout != "" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	o := cloudformation.DefaultOptions()
	o.Command = []string{"/app/worker"}
	if want := renderOptions(t, o, cloudformation.YAML); string(got) != want {
		t.Errorf("%s holds %d bytes, want the template's %d", out, len(got), len(want))
	}
	if want := fmt.Sprintf("watchbot template: replaced %s (%d bytes)\n", out, len(got)); stderr != want {
		t.Errorf("stderr %q, want %q", stderr, want)
	}
	if entries, _ := os.ReadDir(filepath.Dir(out)); len(entries) != 1 {
		t.Errorf("the directory holds %d files, want the template alone", len(entries))
	}
}
