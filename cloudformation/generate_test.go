package cloudformation

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/watchbot/watchbot/alarms"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// example is one set of options the tests generate, lint and compare with golden files.
type example struct {
	name    string
	formats []Format
	opts    func() Options
}

func examples(t *testing.T) []example {
	t.Helper()
	extra, err := ParseStatements([]byte(`{
		"Version": "2012-10-17",
		"Statement": [
			{"Sid": "ReadInputs", "Effect": "Allow", "Action": ["s3:GetObject"], "Resource": "arn:aws:s3:::example-inputs/*"},
			{"Effect": "Deny", "NotAction": "s3:*", "NotResource": ["arn:aws:s3:::example-inputs", "arn:aws:s3:::example-inputs/*"],
			 "Condition": {"Bool": {"aws:SecureTransport": "false"}}}
		]}`))
	if err != nil {
		t.Fatal(err)
	}
	return []example{
		{name: "default", formats: []Format{YAML, JSON}, opts: func() Options {
			o := DefaultOptions()
			o.Command = []string{"/app/worker", "--mode", "thumbnail"}
			return o
		}},
		{name: "fifo", formats: []Format{YAML, JSON}, opts: func() Options {
			o := DefaultOptions()
			o.NamePrefix = "orders"
			o.FIFO = true
			o.MaxAttempts = 5
			o.VisibilityTimeout = 10 * time.Minute
			o.QueueRetention = 7 * 24 * time.Hour
			o.Command = []string{"sh", "-c", "exec /app/process-order"}
			o.Concurrency = 4
			o.CPU, o.Memory = 1024, 4096
			o.MinTasks, o.MaxTasks = 1, 20
			o.Brake = false
			return o
		}},
		{name: "cloudwatch", formats: []Format{JSON}, opts: func() Options {
			o := DefaultOptions()
			o.QueueName = "thumbnails"
			o.Metrics = MetricsCloudWatch
			o.MetricsNamespace = "Thumbnails/Workers"
			o.Command = []string{"/app/worker"}
			o.Environment = map[string]string{"LOG_LEVEL": "debug", "BUCKET": "example-inputs"}
			o.ExtraStatements = extra
			o.Alarms = alarms.Thresholds{WorkerErrorsPerMinute: 0, OldestMessageAgeSeconds: 600, BrakingMinutes: 15}
			o.ShutdownTimeout, o.KillGrace = 90*time.Second, 20*time.Second
			o.HTTPAddr = ":9464" // every interface, for a Prometheus outside the task
			return o
		}},
		// Elastic Beanstalk's cron.yaml example, converted, and a rate with its own body, on a
		// FIFO queue (group and deduplication id per tick).
		{name: "schedules", formats: []Format{YAML, JSON}, opts: func() Options {
			o := DefaultOptions()
			o.NamePrefix = "reports"
			o.FIFO = true
			o.Command = []string{"/app/worker"}
			o.Schedules = []Schedule{
				{Name: "backup-job", Expression: "cron(0 0,12 * * ? *)", Path: "/backup"},
				{Name: "audit", Expression: "cron(0 23 * * ? *)", Path: "/audit"},
				{Name: "digest", Expression: "rate(15 minutes)", Body: `{"kind":"digest","at":"<aws.scheduler.scheduled-time>"}`},
			}
			o.ScheduleTimezone = "Europe/Paris"
			return o
		}},
		{name: "no-metrics", formats: []Format{JSON}, opts: func() Options {
			o := DefaultOptions()
			o.Metrics = MetricsNone
			o.Command = []string{"/app/worker"}
			return o
		}},
		// Watchbot's reduce mode: the progress table of `watchbot progress`.
		{name: "reduce", formats: []Format{JSON}, opts: func() Options {
			o := DefaultOptions()
			o.Reduce = true
			o.Command = []string{"/app/map-or-reduce"}
			return o
		}},
		// Duplicate suppression: the dedupe table of listen's --dedupe-table.
		{name: "dedupe", formats: []Format{JSON}, opts: func() Options {
			o := DefaultOptions()
			o.Dedupe = true
			o.Command = []string{"/app/worker"}
			return o
		}},
		// Limits shared by the fleet: the limits table of listen's --limits-table, and the
		// limits passed on as given.
		{name: "limits", formats: []Format{YAML, JSON}, opts: func() Options {
			o := DefaultOptions()
			o.NamePrefix = "partner"
			o.Limits = true
			o.LimitArgs = []string{"--rate-limit", "50/s", "--limit-key", "attr:tenant", "--concurrency-per-key", "2"}
			o.Command = []string{"/app/worker"}
			return o
		}},
		// Traces exported to a collector beside watchbot in the task, over gRPC.
		{name: "tracing", formats: []Format{YAML, JSON}, opts: func() Options {
			o := DefaultOptions()
			o.NamePrefix = "thumbs"
			o.Command = []string{"/app/worker"}
			o.OTelEndpoint, o.OTelProtocol = "http://localhost:4317", "grpc"
			o.Environment = map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=production"}
			return o
		}},
		// Several queues in priority order, weighted 3:1:1, served by one listen; scaling on
		// their summed backlogs and busy slots, alarms per queue.
		{name: "queues", formats: []Format{YAML, JSON}, opts: func() Options {
			o := DefaultOptions()
			o.NamePrefix = "media"
			o.Queues = []QueueSpec{{Name: "urgent", Weight: 3}, {Name: "bulk", Weight: 1}, {Name: "backfill-jobs", Weight: 1}}
			o.Concurrency = 8
			o.Command = []string{"/app/worker"}
			return o
		}},
		// Strict priority over FIFO queues, without watchbot's metrics: step scaling on the
		// summed visible messages.
		{name: "queues-strict-no-metrics", formats: []Format{JSON}, opts: func() Options {
			o := DefaultOptions()
			o.Queues = []QueueSpec{{Name: "high", Weight: 1}, {Name: "low", Weight: 1}}
			o.QueuePolicy = QueuePolicyStrict
			o.FIFO = true
			o.Metrics = MetricsNone
			o.Command = []string{"/app/worker"}
			return o
		}},
		// Bodies too large for SQS in a bucket the stack creates, named per account and
		// region, with a queue retention that is not whole days.
		{name: "payloads", formats: []Format{YAML, JSON}, opts: func() Options {
			o := DefaultOptions()
			o.NamePrefix = "docs"
			o.QueueRetention = 36 * time.Hour
			o.PayloadBucket = PayloadBucket{Name: "docs-payloads-${AWS::AccountId}-${AWS::Region}"}
			o.Command = []string{"/app/render"}
			return o
		}},
		// An existing bucket: granted and passed to listen, not created.
		{name: "payloads-existing", formats: []Format{JSON}, opts: func() Options {
			o := DefaultOptions()
			o.PayloadBucket = PayloadBucket{Name: "acme.shared-payloads", Existing: true}
			o.Command = []string{"/app/worker"}
			return o
		}},
		{name: "reduce-dedupe", formats: []Format{YAML, JSON}, opts: func() Options {
			o := DefaultOptions()
			o.NamePrefix = "tiles"
			o.Reduce, o.Dedupe = true, true
			o.Concurrency = 4
			o.Environment = map[string]string{"BUCKET": "example-tiles"}
			o.Command = []string{"/app/map-or-reduce"}
			return o
		}},
	}
}

func generate(t *testing.T, o Options) *Template {
	t.Helper()
	tpl, err := Generate(o)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	return tpl
}

func render(t *testing.T, tpl *Template, f Format) []byte {
	t.Helper()
	out, err := tpl.Render(f)
	if err != nil {
		t.Fatalf("Render(%s): %v", f, err)
	}
	return out
}

func TestGolden(t *testing.T) {
	for _, ex := range examples(t) {
		for _, f := range ex.formats {
			t.Run(ex.name+"."+string(f), func(t *testing.T) {
				got := render(t, generate(t, ex.opts()), f)
				// Generating twice gives the same bytes (no map-order leaks).
				if again := render(t, generate(t, ex.opts()), f); !bytes.Equal(got, again) {
					t.Fatal("two renders of the same options differ")
				}
				path := filepath.Join("testdata", ex.name+"."+string(f))
				if *update {
					if err := os.WriteFile(path, got, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				want, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("%v (run go test ./cloudformation -update)", err)
				}
				if diff := cmp.Diff(string(want), string(got)); diff != "" {
					t.Errorf("%s differs (-want +got); if intended, run go test ./cloudformation -update:\n%s", path, diff)
				}
			})
		}
	}
}

// TestYAMLAndJSONAgree checks that both formats carry the same template.
func TestYAMLAndJSONAgree(t *testing.T) {
	for _, ex := range examples(t) {
		tpl := generate(t, ex.opts())
		var fromJSON, fromYAML any
		if err := json.Unmarshal(render(t, tpl, JSON), &fromJSON); err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(render(t, tpl, YAML), &fromYAML); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(fromJSON, fromYAML); diff != "" {
			t.Errorf("%s: JSON and YAML differ (-json +yaml):\n%s", ex.name, diff)
		}
	}
}

func resource[P any](t *testing.T, tpl *Template, id, typ string) P {
	t.Helper()
	r, ok := tpl.Resources[id]
	if !ok {
		t.Fatalf("no resource %s", id)
	}
	if r.Type != typ {
		t.Fatalf("%s is a %s, want %s", id, r.Type, typ)
	}
	p, ok := r.Properties.(P)
	if !ok {
		t.Fatalf("%s properties are %T", id, r.Properties)
	}
	return p
}

// environment returns the container's environment variables by name.
func environment(c ContainerDefinition) map[string]any {
	env := map[string]any{}
	for _, kv := range c.Environment {
		env[kv.Name] = kv.Value
	}
	return env
}

func TestQueues(t *testing.T) {
	for _, ex := range examples(t) {
		t.Run(ex.name, func(t *testing.T) {
			o := ex.opts()
			tpl := generate(t, o)
			queue := resource[*Queue](t, tpl, ResQueue, "AWS::SQS::Queue")
			dlq := resource[*Queue](t, tpl, ResDeadLetterQueue, "AWS::SQS::Queue")

			want := o.MaxAttempts
			if o.Dedupe {
				want = 2 * o.MaxAttempts // the backstop for receives that run nothing
			}
			if queue.RedrivePolicy == nil || queue.RedrivePolicy.MaxReceiveCount != want {
				t.Errorf("redrive policy %+v, want maxReceiveCount %d", queue.RedrivePolicy, want)
			}
			if diff := cmp.Diff(GetAtt(ResDeadLetterQueue, "Arn"), queue.RedrivePolicy.DeadLetterTargetArn); diff != "" {
				t.Errorf("deadLetterTargetArn (-want +got):\n%s", diff)
			}
			if dlq.MessageRetentionPeriod <= queue.MessageRetentionPeriod {
				t.Errorf("DLQ retention %ds is not longer than the queue's %ds", dlq.MessageRetentionPeriod, queue.MessageRetentionPeriod)
			}
			if dlq.MessageRetentionPeriod != 14*24*3600 || queue.MessageRetentionPeriod != int(o.QueueRetention/time.Second) {
				t.Errorf("retentions %d/%d", queue.MessageRetentionPeriod, dlq.MessageRetentionPeriod)
			}
			if queue.VisibilityTimeout != int(o.VisibilityTimeout/time.Second) {
				t.Errorf("visibility %d, want %v", queue.VisibilityTimeout, o.VisibilityTimeout)
			}
			if !queue.SqsManagedSseEnabled || !dlq.SqsManagedSseEnabled {
				t.Error("SSE-SQS is not enabled on both queues")
			}
			if queue.FifoQueue != o.FIFO || dlq.FifoQueue != o.FIFO {
				t.Errorf("FifoQueue %v/%v, want %v", queue.FifoQueue, dlq.FifoQueue, o.FIFO)
			}
			if dlq.RedrivePolicy != nil || queue.RedriveAllowPolicy != nil {
				t.Error("the DLQ must not redrive and the work queue needs no redrive-allow policy")
			}
			// The redrive-allow policy names exactly the work queue, by the name it is given.
			allow := dlq.RedriveAllowPolicy
			if allow == nil || allow.RedrivePermission != "byQueue" || len(allow.SourceQueueArns) != 1 {
				t.Fatalf("redrive-allow policy %+v", allow)
			}
			wantArn := Sub("arn:${AWS::Partition}:sqs:${AWS::Region}:${AWS::AccountId}:" + subString(queue.QueueName))
			if diff := cmp.Diff(wantArn, allow.SourceQueueArns[0]); diff != "" {
				t.Errorf("sourceQueueArns (-want +got):\n%s", diff)
			}
			if o.FIFO {
				for _, q := range []*Queue{queue, dlq} {
					if !strings.HasSuffix(subString(q.QueueName), ".fifo") {
						t.Errorf("FIFO queue name %v does not end in .fifo", q.QueueName)
					}
				}
			}
		})
	}
}

func TestTaskRoleIsLeastPrivilege(t *testing.T) {
	for _, ex := range examples(t) {
		t.Run(ex.name, func(t *testing.T) {
			o := ex.opts()
			tpl := generate(t, o)
			role := resource[*Role](t, tpl, ResTaskRole, "AWS::IAM::Role")
			var own []Statement
			for _, p := range role.Policies {
				if p.PolicyName == "watchbot-listen" {
					own = p.PolicyDocument.Statement
				}
			}
			// Every work queue (Queue…) and dead-letter queue (DeadLetterQueue…) of the stack.
			kinds := map[string]string{} // queue ARN (as JSON) → "queue" or "dlq"
			for id, r := range tpl.Resources {
				if r.Type != "AWS::SQS::Queue" {
					continue
				}
				kind := "queue"
				if strings.HasPrefix(id, ResDeadLetterQueue) {
					kind = "dlq"
				}
				kinds[fmt.Sprint(GetAtt(id, "Arn"))] = kind
			}
			sqsActions := map[string][]string{} // resource kind → actions, once per queue of the kind
			seen := map[string]int{}
			for _, s := range own {
				if s.Effect != "Allow" || len(s.NotAction) > 0 || len(s.NotResource) > 0 {
					t.Errorf("statement %s: only plain Allow statements expected", s.Sid)
				}
				for _, a := range s.Action {
					if !strings.HasPrefix(a, "sqs:") {
						continue
					}
					var kind string
					for _, r := range s.Resource {
						k, ok := kinds[fmt.Sprint(r)]
						if !ok || kind != "" && k != kind {
							t.Fatalf("statement %s: SQS action %s on %v, not all of one kind of this stack's queues", s.Sid, a, s.Resource)
						}
						kind = k
						seen[fmt.Sprint(r)]++
					}
					sqsActions[kind] = append(sqsActions[kind], a)
				}
			}
			want := map[string][]string{
				"queue": {"sqs:ChangeMessageVisibility", "sqs:DeleteMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl", "sqs:ReceiveMessage"},
				"dlq":   {"sqs:GetQueueAttributes", "sqs:GetQueueUrl", "sqs:SendMessage"},
			}
			for k := range sqsActions {
				slices.Sort(sqsActions[k])
			}
			if diff := cmp.Diff(want, sqsActions); diff != "" {
				t.Errorf("task role SQS actions (-want +got):\n%s", diff)
			}
			for arn, kind := range kinds {
				if seen[arn] != len(want[kind]) {
					t.Errorf("%s gets %d SQS actions, want its %d", arn, seen[arn], len(want[kind]))
				}
			}

			var metrics []Statement
			for _, s := range own {
				if slices.Contains(s.Action, "cloudwatch:PutMetricData") {
					metrics = append(metrics, s)
				}
			}
			wantProtection := Statement{Sid: "TaskScaleInProtection", Effect: "Allow", Action: []string{"ecs:GetTaskProtection", "ecs:UpdateTaskProtection"},
				Resource: []any{Sub("arn:${AWS::Partition}:ecs:${AWS::Region}:${AWS::AccountId}:task/${Cluster}/*")}}
			if diff := cmp.Diff(wantProtection, own[2]); diff != "" {
				t.Errorf("task protection statement (-want +got):\n%s", diff)
			}
			if o.Metrics != MetricsCloudWatch {
				if len(metrics) > 0 || len(own) != 3 {
					t.Errorf("metrics %s needs only the SQS and task protection statements, got %+v", o.Metrics, own)
				}
			} else {
				wantMetrics := []Statement{{Sid: "PublishMetrics", Effect: "Allow", Action: []string{"cloudwatch:PutMetricData"}, Resource: []any{"*"},
					Condition: map[string]map[string]any{"StringEquals": {"cloudwatch:namespace": o.MetricsNamespace}}}}
				if diff := cmp.Diff(wantMetrics, metrics); diff != "" {
					t.Errorf("metrics statement (-want +got):\n%s", diff)
				}
			}

			var extra []Statement
			for _, p := range role.Policies {
				if p.PolicyName == "extra" {
					extra = p.PolicyDocument.Statement
				}
			}
			if diff := cmp.Diff(o.ExtraStatements, extra); diff != "" {
				t.Errorf("extra statements (-want +got):\n%s", diff)
			}
			exec := resource[*Role](t, tpl, ResExecutionRole, "AWS::IAM::Role")
			wantManaged := []any{Sub("arn:${AWS::Partition}:iam::aws:policy/service-role/AmazonECSTaskExecutionRolePolicy")}
			if diff := cmp.Diff(wantManaged, exec.ManagedPolicyArns); diff != "" || len(exec.Policies) > 0 {
				t.Errorf("execution role (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTaskDefinition(t *testing.T) {
	for _, ex := range examples(t) {
		t.Run(ex.name, func(t *testing.T) {
			o := ex.opts()
			tpl := generate(t, o)
			td := resource[*TaskDefinition](t, tpl, ResTaskDefinition, "AWS::ECS::TaskDefinition")
			if len(td.ContainerDefinitions) != 1 {
				t.Fatalf("%d containers", len(td.ContainerDefinitions))
			}
			c := td.ContainerDefinitions[0]
			if !slices.Equal(c.EntryPoint, []string{WatchbotPath}) {
				t.Errorf("entry point %v", c.EntryPoint)
			}
			// The command ends with "--" and exactly the worker command.
			tail := c.Command[len(c.Command)-len(o.Command)-1:]
			want := []any{"--"}
			for _, s := range o.Command {
				want = append(want, s)
			}
			if diff := cmp.Diff(want, tail); diff != "" {
				t.Errorf("command tail (-want +got):\n%s", diff)
			}
			if c.Command[0] != "listen" {
				t.Errorf("command starts with %v", c.Command[0])
			}
			flags, queueURLs := map[string]any{}, []any{}
			for i := 1; i+1 < len(c.Command)-len(o.Command)-1; i += 2 {
				flags[c.Command[i].(string)] = c.Command[i+1]
				if c.Command[i] == "--queue-url" {
					queueURLs = append(queueURLs, c.Command[i+1])
				}
			}
			// One --queue-url per queue, in priority order (TestSeveralQueues checks the rest).
			wantURLs := []any{Ref(ResQueue)}
			for _, q := range o.Queues[min(1, len(o.Queues)):] {
				wantURLs = append(wantURLs, Ref(ResQueue+idPart(q.Name)))
			}
			if diff := cmp.Diff(wantURLs, queueURLs); diff != "" {
				t.Errorf("--queue-url (-want +got):\n%s", diff)
			}
			flags["--queue-url"] = queueURLs[0]
			delete(flags, "--queue-weight")
			delete(flags, "--queue-policy")
			wantFlags := map[string]any{
				"--queue-url":           Ref(ResQueue),
				"--max-attempts":        strconv.Itoa(o.MaxAttempts),
				"--concurrency":         strconv.Itoa(o.Concurrency),
				"--visibility-timeout":  strconv.Itoa(int(o.VisibilityTimeout/time.Second)) + "s",
				"--shutdown-timeout":    strconv.Itoa(int(o.ShutdownTimeout/time.Second)) + "s",
				"--kill-grace":          strconv.Itoa(int(o.KillGrace/time.Second)) + "s",
				"--metrics":             string(o.Metrics),
				"--scale-in-protection": "on",
				"--http-addr":           o.HTTPAddr,
			}
			if o.Metrics != MetricsNone {
				wantFlags["--metrics-namespace"] = o.MetricsNamespace
			}
			if !o.Brake {
				wantFlags["--brake"] = "off"
			}
			if o.Dedupe {
				wantFlags["--dedupe-table"] = Ref(DedupeTable.LogicalID)
			}
			if o.Limits {
				wantFlags["--limits-table"] = Ref(LimitsTable.LogicalID)
			}
			for i := 0; i+1 < len(o.LimitArgs); i += 2 {
				wantFlags[o.LimitArgs[i]] = o.LimitArgs[i+1]
			}
			switch b := o.PayloadBucket; {
			case b.Existing:
				wantFlags["--payload-bucket"] = b.Name
			case b.Name != "":
				wantFlags["--payload-bucket"] = Ref(ResPayloadBucket)
			}
			if diff := cmp.Diff(wantFlags, flags); diff != "" {
				t.Errorf("listen flags (-want +got):\n%s", diff)
			}
			// The health check asks the address listen serves, within ECS's limits, and each
			// check ends before the next is due.
			hc := c.HealthCheck
			if hc == nil {
				t.Fatal("no health check")
			}
			if want := []string{"CMD", WatchbotPath, "health", "--http-addr", o.HTTPAddr}; !slices.Equal(hc.Command, want) {
				t.Errorf("health check command %q, want %q", hc.Command, want)
			}
			if hc.Interval < 5 || hc.Interval > 300 || hc.Timeout < 2 || hc.Timeout > 60 || hc.Retries < 1 || hc.Retries > 10 ||
				hc.StartPeriod < 0 || hc.StartPeriod > 300 || hc.Timeout >= hc.Interval {
				t.Errorf("health check %+v outside ECS's limits, or a check outlasting its interval", *hc)
			}
			// watchbot drains and escalates inside the stop timeout, with time left to release.
			if got, budget := time.Duration(c.StopTimeout)*time.Second, o.ShutdownTimeout+o.KillGrace; got < budget+StopMargin || got > MaxStopTimeout {
				t.Errorf("StopTimeout %v does not fit --shutdown-timeout + --kill-grace (%v) + margin", got, budget)
			}
			if !c.ReadonlyRootFilesystem {
				t.Error("root file system is writable")
			}
			if len(c.MountPoints) != 1 || c.MountPoints[0].ContainerPath != ScratchPath || c.MountPoints[0].ReadOnly ||
				len(td.Volumes) != 1 || td.Volumes[0].Name != c.MountPoints[0].SourceVolume {
				t.Errorf("scratch volume: %+v %+v", c.MountPoints, td.Volumes)
			}
			if c.LogConfiguration == nil || c.LogConfiguration.LogDriver != "awslogs" || c.LogConfiguration.Options["mode"] != "non-blocking" {
				t.Errorf("log configuration %+v", c.LogConfiguration)
			}
			env := environment(c)
			for k, v := range o.Environment {
				if env[k] != v {
					t.Errorf("environment %s = %v, want %q", k, env[k], v)
				}
			}
			if td.Cpu != strconv.Itoa(o.CPU) || td.Memory != strconv.Itoa(o.Memory) || !slices.Equal(td.RequiresCompatibilities, []string{"FARGATE"}) {
				t.Errorf("task size %s/%s %v", td.Cpu, td.Memory, td.RequiresCompatibilities)
			}
		})
	}
}

func TestServiceAndAutoscaling(t *testing.T) {
	for _, ex := range examples(t) {
		t.Run(ex.name, func(t *testing.T) {
			o := ex.opts()
			tpl := generate(t, o)
			raw, err := json.Marshal(tpl.Resources[ResService])
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(raw, []byte("DesiredCount")) {
				t.Errorf("the service sets DesiredCount: %s", raw)
			}
			target := resource[*ScalableTarget](t, tpl, ResScalableTarget, "AWS::ApplicationAutoScaling::ScalableTarget")
			if target.MinCapacity != o.MinTasks || target.MaxCapacity != o.MaxTasks {
				t.Errorf("capacity %d..%d, want %d..%d", target.MinCapacity, target.MaxCapacity, o.MinTasks, o.MaxTasks)
			}
			backlog := []string{ResBacklogPolicy, ResScaleFromZeroPolicy, ResScaleFromZeroAlarm, ResScaleOutStalledAlarm}
			visible := []string{ResScaleOutPolicy, ResScaleOutAlarm, ResScaleInPolicy, ResScaleInAlarm}
			want, unwanted := backlog, visible
			if o.Metrics == MetricsNone {
				want, unwanted = visible, backlog
			}
			for _, id := range unwanted {
				if _, ok := tpl.Resources[id]; ok {
					t.Errorf("metrics %s: resource %s rendered", o.Metrics, id)
				}
			}
			for _, id := range want {
				if _, ok := tpl.Resources[id]; !ok {
					t.Errorf("metrics %s: resource %s missing", o.Metrics, id)
				}
			}
			if o.Metrics == MetricsNone {
				checkVisibleScaling(t, tpl, o)
			} else {
				checkBacklogScaling(t, tpl, o)
			}
		})
	}
}

func checkVisibleScaling(t *testing.T, tpl *Template, o Options) {
	t.Helper()
	out := resource[*Alarm](t, tpl, ResScaleOutAlarm, "AWS::CloudWatch::Alarm")
	if len(workQueueIDs(o)) > 1 {
		// The queues' visible messages, added up.
		got := alarmQueries(t, "scale-out alarm", out, "visible")
		want := summed(o, "visible", func(q []Dimension) MetricStat {
			return MetricStat{Metric: Metric{Namespace: "AWS/SQS", MetricName: "ApproximateNumberOfMessagesVisible", Dimensions: q}, Period: 60, Stat: "Maximum"}
		})
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("scale-out alarm metrics (-want +got):\n%s", diff)
		}
	} else if out.MetricName != "ApproximateNumberOfMessagesVisible" {
		t.Errorf("scale-out alarm %+v", out)
	}
	if out.ComparisonOperator != "GreaterThanThreshold" || out.Threshold != 0 {
		t.Errorf("scale-out alarm %+v", out)
	}
	outPolicy := resource[*ScalingPolicy](t, tpl, ResScaleOutPolicy, "AWS::ApplicationAutoScaling::ScalingPolicy")
	if outPolicy.StepScalingPolicyConfiguration.AdjustmentType != "ChangeInCapacity" {
		t.Errorf("scale-out adjusts %s", outPolicy.StepScalingPolicyConfiguration.AdjustmentType)
	}
	in := resource[*Alarm](t, tpl, ResScaleInAlarm, "AWS::CloudWatch::Alarm")
	metrics := map[string]string{}
	var expr string
	for _, m := range in.Metrics {
		if m.MetricStat != nil {
			metrics[m.Id] = m.MetricStat.Metric.MetricName
		}
		if m.ReturnData {
			expr = m.Expression
		}
	}
	for id, name := range map[string]string{"visible": "ApproximateNumberOfMessagesVisible", "inflight": "ApproximateNumberOfMessagesNotVisible"} {
		for q := range summed(o, id, func([]Dimension) MetricStat { return MetricStat{} }) {
			if q != id || len(workQueueIDs(o)) == 1 {
				if metrics[q] != name {
					t.Errorf("scale-in alarm: %s is %q, want %s", q, metrics[q], name)
				}
			}
		}
	}
	if expr != "visible + inflight" || in.Threshold != 0 || in.ComparisonOperator != "LessThanOrEqualToThreshold" {
		t.Errorf("scale-in alarm %+v", in)
	}
	inPolicy := resource[*ScalingPolicy](t, tpl, ResScaleInPolicy, "AWS::ApplicationAutoScaling::ScalingPolicy")
	cfg := inPolicy.StepScalingPolicyConfiguration
	if cfg.AdjustmentType != "ExactCapacity" || len(cfg.StepAdjustments) != 1 || cfg.StepAdjustments[0].ScalingAdjustment != o.MinTasks {
		t.Errorf("scale-in policy %+v", cfg)
	}
}

// workQueueIDs are the logical ids of o's work queues, in priority order.
func workQueueIDs(o Options) []string {
	ids := []string{ResQueue}
	for _, q := range o.Queues[min(1, len(o.Queues)):] {
		ids = append(ids, ResQueue+idPart(q.Name))
	}
	return ids
}

// summed returns, for the metric of each work queue that stat makes, the queries a sum over
// the queues needs: the metric named id (one queue), or id1, id2, … and their sum named id.
func summed(o Options, id string, stat func(queue []Dimension) MetricStat) map[string]any {
	ids := workQueueIDs(o)
	dims := func(q string) []Dimension { return []Dimension{{Name: "QueueName", Value: GetAtt(q, "QueueName")}} }
	if len(ids) == 1 {
		return map[string]any{id: stat(dims(ids[0]))}
	}
	out := map[string]any{}
	var terms []string
	for i, q := range ids {
		n := id + strconv.Itoa(i+1)
		out[n], terms = stat(dims(q)), append(terms, n)
	}
	out[id] = strings.Join(terms, " + ")
	return out
}

func checkBacklogScaling(t *testing.T, tpl *Template, o Options) {
	t.Helper()
	k := o.BacklogPerSlot()
	first := []Dimension{{Name: "QueueName", Value: GetAtt(ResQueue, "QueueName")}}
	visibleQ := summed(o, "visible", func(q []Dimension) MetricStat {
		return MetricStat{Metric: Metric{Namespace: "AWS/SQS", MetricName: "ApproximateNumberOfMessagesVisible", Dimensions: q}, Period: 60, Stat: "Average"}
	})
	busyQ := summed(o, "busy", func(q []Dimension) MetricStat {
		return MetricStat{Metric: Metric{Namespace: o.MetricsNamespace, MetricName: string(alarms.BusySlots), Dimensions: q}, Period: 60, Stat: "Sum"}
	})
	slots := MetricStat{Metric: Metric{Namespace: o.MetricsNamespace, MetricName: string(alarms.WorkerSlots), Dimensions: first}, Period: 60, Stat: "Sum"}
	wantStats := map[string]MetricStat{"slots": slots}
	for id, q := range mapsJoin(visibleQ, busyQ) {
		if s, ok := q.(MetricStat); ok {
			wantStats[id] = s
		}
	}
	demand := "visible + " + strconv.FormatFloat(k, 'f', -1, 64) + " * busy"

	policy := resource[*ScalingPolicy](t, tpl, ResBacklogPolicy, "AWS::ApplicationAutoScaling::ScalingPolicy")
	tt := policy.TargetTrackingScalingPolicyConfiguration
	if policy.PolicyType != "TargetTrackingScaling" || policy.StepScalingPolicyConfiguration != nil || tt == nil {
		t.Fatalf("backlog policy %+v", policy)
	}
	if tt.TargetValue != k || tt.DisableScaleIn || tt.ScaleOutCooldown != 300 || tt.ScaleInCooldown != 300 {
		t.Errorf("target tracking %+v, want target %v with scale-in", tt, k)
	}
	var returned []string
	for _, q := range tt.CustomizedMetricSpecification.Metrics {
		if q.ReturnData {
			returned = append(returned, q.Expression)
		}
		switch {
		case q.MetricStat != nil:
			w := wantStats[q.Id]
			if diff := cmp.Diff(w.Metric, q.MetricStat.Metric); diff != "" || q.MetricStat.Stat != w.Stat {
				t.Errorf("target tracking metric %s %s (-want +got):\n%s", q.Id, q.MetricStat.Stat, diff)
			}
		case q.Id == "demand" && q.Expression != demand:
			t.Errorf("demand %q, want %q", q.Expression, demand)
		}
	}
	if !slices.Equal(returned, []string{"demand / slots"}) {
		t.Errorf("target tracking returns %q", returned)
	}

	for id, result := range map[string]string{
		ResScaleFromZeroAlarm:   "IF(FILL(slots, 0) == 0, visible, 0)",
		ResScaleOutStalledAlarm: "IF(demand > " + strconv.FormatFloat(StalledFactor*k, 'f', -1, 64) + " * slots, demand, 0)",
	} {
		a := resource[*Alarm](t, tpl, id, "AWS::CloudWatch::Alarm")
		got := alarmQueries(t, id, a, "result")
		want := mapsJoin(visibleQ, busyQ, map[string]any{"slots": slots, "demand": demand, "result": result})
		if id == ResScaleFromZeroAlarm {
			// Without tasks nothing is busy: the rule needs only the queues and the slots.
			want = mapsJoin(visibleQ, map[string]any{"slots": slots, "result": result})
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s metrics (-want +got):\n%s", id, diff)
		}
		if a.Threshold != 0 || a.ComparisonOperator != "GreaterThanThreshold" || a.TreatMissingData != "notBreaching" ||
			!cmp.Equal(a.AlarmActions, []any{Ref(ResScaleFromZeroPolicy)}) {
			t.Errorf("%s %+v", id, a)
		}
	}
	if a := tpl.Resources[ResScaleOutStalledAlarm].Properties.(*Alarm); a.EvaluationPeriods != StalledMinutes {
		t.Errorf("stalled alarm evaluates %d periods", a.EvaluationPeriods)
	}
	zero := resource[*ScalingPolicy](t, tpl, ResScaleFromZeroPolicy, "AWS::ApplicationAutoScaling::ScalingPolicy")
	cfg := zero.StepScalingPolicyConfiguration
	if cfg == nil || cfg.AdjustmentType != "ChangeInCapacity" || cfg.Cooldown != 300 || cfg.MetricAggregationType != "Maximum" ||
		!cmp.Equal(cfg.StepAdjustments, ScaleFromZeroSteps(float64(o.Concurrency)*k, o.MaxTasks)) {
		t.Errorf("scale-from-zero policy %+v", cfg)
	}
}

func TestScaleOutStepsCoverEveryBacklog(t *testing.T) {
	for _, c := range []struct{ concurrency, maxTasks int }{{1, 1}, {1, 10}, {4, 20}, {1000, 5000}} {
		checkSteps(t, fmt.Sprintf("ScaleOutSteps%+v", c), ScaleOutSteps(c.concurrency, c.maxTasks))
	}
}

func TestScaleFromZeroSteps(t *testing.T) {
	for _, c := range []struct {
		perTask  float64
		maxTasks int
		want     string // lower:tasks
	}{
		{40, 1, "0:1"},
		{40, 2, "0:1 40:2"},
		{40, 10, "0:1 40:2 80:3 120:5 200:8 320:10"},
		{5, 16, "0:1 5:2 10:3 15:5 25:8 40:12 60:16"},
		{0.5, 3, "0:1 0.5:2 1:3"},
		{1, 3000, "0:1 1:2 2:3 3:5 5:8 8:12 12:18 18:27 27:41 41:62 62:93 93:140 140:210 210:315 315:473 473:710 710:1065 1065:1598 1598:2397 2397:3000"},
		// Half as many again would need 21 steps: doubling.
		{1, 5000, "0:1 1:2 2:4 4:8 8:16 16:32 32:64 64:128 128:256 256:512 512:1024 1024:2048 2048:4096 4096:5000"},
	} {
		steps := ScaleFromZeroSteps(c.perTask, c.maxTasks)
		var got []string
		for _, s := range steps {
			got = append(got, fmt.Sprintf("%v:%d", *s.MetricIntervalLowerBound, s.ScalingAdjustment))
		}
		if strings.Join(got, " ") != c.want {
			t.Errorf("ScaleFromZeroSteps(%v, %d) = %s, want %s", c.perTask, c.maxTasks, strings.Join(got, " "), c.want)
		}
		checkSteps(t, fmt.Sprintf("ScaleFromZeroSteps(%v, %d)", c.perTask, c.maxTasks), steps)
	}
	// Application Auto Scaling allows 20 steps.
	for maxTasks := 1; maxTasks <= 5000; maxTasks++ {
		if n := len(ScaleFromZeroSteps(1, maxTasks)); n > 20 {
			t.Fatalf("%d steps for %d tasks", n, maxTasks)
		}
	}
}

// checkSteps checks that steps cover [0, ∞) without gap and that every step adds a task.
func checkSteps(t *testing.T, name string, steps []StepAdjustment) {
	t.Helper()
	if *steps[0].MetricIntervalLowerBound != 0 || steps[len(steps)-1].MetricIntervalUpperBound != nil {
		t.Errorf("%s: steps do not cover [0, ∞)", name)
	}
	for i, s := range steps {
		if s.ScalingAdjustment < 1 {
			t.Errorf("%s: step %d sets %d", name, i, s.ScalingAdjustment)
		}
		if i > 0 && *s.MetricIntervalLowerBound != *steps[i-1].MetricIntervalUpperBound {
			t.Errorf("%s: gap before step %d", name, i)
		}
	}
}

func TestAlarmsAreTheDefinitions(t *testing.T) {
	for _, ex := range examples(t) {
		t.Run(ex.name, func(t *testing.T) {
			o := ex.opts()
			tpl := generate(t, o)
			defs := alarms.Definitions(o.Alarms)
			rendered := 0
			for _, d := range defs {
				r, ok := tpl.Resources[AlarmLogicalID(d)]
				if d.Namespace == "" && o.Metrics == MetricsNone {
					if ok {
						t.Errorf("%s: rendered although --metrics none publishes nothing", d.Name)
					}
					continue
				}
				if d.Name == alarms.Braking && !o.Brake {
					if ok {
						t.Errorf("%s: rendered although listen runs with --brake off", d.Name)
					}
					continue
				}
				if !ok {
					t.Errorf("alarm %s is missing", d.Name)
					continue
				}
				rendered++
				a := r.Properties.(*Alarm)
				wantNamespace := d.Namespace
				if wantNamespace == "" {
					wantNamespace = o.MetricsNamespace
				}
				queue := map[alarms.Subject]string{alarms.WorkQueue: ResQueue, alarms.DeadLetterQueue: ResDeadLetterQueue}[d.Subject]
				want := Alarm{
					AlarmName:          a.AlarmName,
					AlarmDescription:   d.Description,
					Namespace:          wantNamespace,
					MetricName:         d.Metric,
					Dimensions:         []Dimension{{Name: "QueueName", Value: GetAtt(queue, "QueueName")}},
					Statistic:          d.Statistic,
					Period:             d.PeriodSeconds,
					EvaluationPeriods:  d.EvaluationPeriods,
					Threshold:          d.Threshold,
					ComparisonOperator: string(d.Comparison),
					TreatMissingData:   d.TreatMissingData,
					AlarmActions:       a.AlarmActions,
					OKActions:          a.OKActions,
				}
				if diff := cmp.Diff(want, *a); diff != "" {
					t.Errorf("alarm %s (-definition +template):\n%s", d.Name, diff)
				}
				if !strings.HasSuffix(subString(a.AlarmName), "-"+d.Name) {
					t.Errorf("alarm %s is named %v", d.Name, a.AlarmName)
				}
				actions := If(CondUseAlarmTopicArn, []any{Ref(ParamAlarmTopicArn)}, If(CondCreateAlarmTopic, []any{Ref(ResAlarmTopic)}, NoValue))
				if !cmp.Equal(actions, a.AlarmActions) {
					t.Errorf("alarm %s notifies %v", d.Name, a.AlarmActions)
				}
			}
			if rendered == 0 {
				t.Fatal("no alarm rendered")
			}
			// The thresholds come from the options: a changed threshold changes the alarm.
			if o.Metrics != MetricsNone {
				a := tpl.Resources["WorkerErrorsAlarm"].Properties.(*Alarm)
				if a.Threshold != float64(o.Alarms.WorkerErrorsPerMinute) {
					t.Errorf("WorkerErrors threshold %v, want %d", a.Threshold, o.Alarms.WorkerErrorsPerMinute)
				}
			}
		})
	}
}

// subString returns a literal string or the text of an Fn::Sub.
func subString(v any) string {
	if fn, ok := v.(Fn); ok {
		v = fn["Fn::Sub"]
	}
	s, _ := v.(string)
	return s
}

func TestAlarmTargetIsExactlyOne(t *testing.T) {
	tpl := generate(t, examples(t)[0].opts())
	// Evaluate the conditions for the four combinations of the two parameters.
	for _, c := range []struct {
		email, topic      string
		create, use, fail bool
	}{
		{"", "", false, false, true},
		{"ops@example.com", "", true, false, false},
		{"", "arn:aws:sns:eu-west-1:000000000000:alarms", false, true, false},
		{"ops@example.com", "arn:aws:sns:eu-west-1:000000000000:alarms", false, false, true},
	} {
		params := map[string]string{ParamAlarmEmail: c.email, ParamAlarmTopicArn: c.topic}
		eval := func(name string) bool { return evalCondition(t, tpl.Conditions, params, name) }
		if eval(CondCreateAlarmTopic) != c.create || eval(CondUseAlarmTopicArn) != c.use || eval(CondAlarmTargetInvalid) != c.fail {
			t.Errorf("email=%q topic=%q: create=%v use=%v fail=%v", c.email, c.topic, eval(CondCreateAlarmTopic), eval(CondUseAlarmTopicArn), eval(CondAlarmTargetInvalid))
		}
	}
	check := tpl.Resources[ResAlarmTargetCheck]
	if check.Condition != CondAlarmTargetInvalid {
		t.Errorf("check resource condition %q", check.Condition)
	}
	p := check.Properties.(*SSMParameter)
	if regexp.MustCompile(p.AllowedPattern).MatchString(p.Value) {
		t.Errorf("check value %q matches its pattern %q, so it would not fail", p.Value, p.AllowedPattern)
	}
	if topic := tpl.Resources[ResAlarmTopic]; topic.Condition != CondCreateAlarmTopic {
		t.Errorf("topic condition %q", topic.Condition)
	}
}

// evalCondition evaluates the named condition as CloudFormation would for these parameters.
func evalCondition(t *testing.T, conds map[string]any, params map[string]string, name string) bool {
	t.Helper()
	var value func(v any) any
	value = func(v any) any {
		fn, ok := v.(Fn)
		if !ok {
			return v
		}
		for k, arg := range fn {
			switch k {
			case "Ref":
				return params[arg.(string)]
			case "Condition":
				return evalCondition(t, conds, params, arg.(string))
			case "Fn::Equals":
				return value(arg.([]any)[0]) == value(arg.([]any)[1])
			case "Fn::Not":
				return !value(arg.([]any)[0]).(bool)
			case "Fn::Or":
				for _, a := range arg.([]any) {
					if value(a).(bool) {
						return true
					}
				}
				return false
			}
		}
		t.Fatalf("cannot evaluate %v", v)
		return nil
	}
	return value(conds[name]).(bool)
}

func TestOutputs(t *testing.T) {
	tpl := generate(t, examples(t)[0].opts())
	want := map[string]any{
		"QueueUrl":           Ref(ResQueue),
		"QueueArn":           GetAtt(ResQueue, "Arn"),
		"DeadLetterQueueUrl": Ref(ResDeadLetterQueue),
		"DeadLetterQueueArn": GetAtt(ResDeadLetterQueue, "Arn"),
		"LogGroupName":       Ref(ResLogGroup),
		"AlarmTopicArn":      If(CondUseAlarmTopicArn, Ref(ParamAlarmTopicArn), Ref(ResAlarmTopic)),
	}
	for name, v := range want {
		if diff := cmp.Diff(v, tpl.Outputs[name].Value); diff != "" {
			t.Errorf("output %s (-want +got):\n%s", name, diff)
		}
	}
}

func TestParameters(t *testing.T) {
	tpl := generate(t, examples(t)[0].opts())
	want := map[string]string{
		ParamContainerImage: "String",
		ParamCluster:        "String",
		ParamSubnets:        "List<AWS::EC2::Subnet::Id>",
		ParamSecurityGroups: "List<AWS::EC2::SecurityGroup::Id>",
		ParamAlarmEmail:     "String",
		ParamAlarmTopicArn:  "String",
		ParamAssignPublicIP: "String",
	}
	got := map[string]string{}
	for name, p := range tpl.Parameters {
		got[name] = p.Type
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parameters (-want +got):\n%s", diff)
	}
	if ip := tpl.Parameters[ParamAssignPublicIP]; !slices.Equal(ip.AllowedValues, []string{"DISABLED", "ENABLED"}) {
		t.Errorf("AssignPublicIp allows %v", ip.AllowedValues)
	}
	for _, c := range []struct {
		param, value string
		ok           bool
	}{
		{ParamAlarmEmail, "", true},
		{ParamAlarmEmail, "ops@example.com", true},
		{ParamAlarmEmail, "not an address", false},
		{ParamAlarmTopicArn, "", true},
		{ParamAlarmTopicArn, "arn:aws:sns:eu-west-1:000000000000:alarms", true},
		{ParamAlarmTopicArn, "arn:aws-cn:sns:cn-north-1:000000000000:alarms", true},
		{ParamAlarmTopicArn, "alarms", false},
		{ParamCluster, "workers", true},
		{ParamCluster, "arn:aws:ecs:eu-west-1:000000000000:cluster/workers", false},
	} {
		if got := regexp.MustCompile(tpl.Parameters[c.param].AllowedPattern).MatchString(c.value); got != c.ok {
			t.Errorf("%s %q accepted=%v, want %v", c.param, c.value, got, c.ok)
		}
	}
}

// TestPortable checks that no account id, region or image is baked into any output.
func TestPortable(t *testing.T) {
	accountID := regexp.MustCompile(`\b\d{12}\b`)
	region := regexp.MustCompile(`\b(us|eu|ap|sa|ca|me|af|il|mx|cn)(-gov)?-(north|south|east|west|central|northeast|southeast|northwest|southwest)-\d\b`)
	for _, ex := range examples(t) {
		tpl := generate(t, ex.opts())
		for _, f := range []Format{JSON, YAML} {
			out := render(t, tpl, f)
			if m := accountID.Find(out); m != nil {
				t.Errorf("%s.%s: account id %s", ex.name, f, m)
			}
			if m := region.Find(out); m != nil {
				t.Errorf("%s.%s: region %s", ex.name, f, m)
			}
			for _, s := range []string{"dkr.ecr", "vpc-", "subnet-", "sg-"} {
				if bytes.Contains(out, []byte(s)) && !(s == "dkr.ecr" && bytes.Contains(out, []byte("ACCOUNT.dkr.ecr.REGION"))) {
					t.Errorf("%s.%s: contains %q", ex.name, f, s)
				}
			}
			for _, pseudo := range []string{"AWS::Region", "AWS::AccountId", "AWS::Partition"} {
				if !bytes.Contains(out, []byte(pseudo)) {
					t.Errorf("%s.%s: does not use %s", ex.name, f, pseudo)
				}
			}
		}
	}
}

func TestRenderUnknownFormat(t *testing.T) {
	tpl := generate(t, examples(t)[0].opts())
	if _, err := tpl.Render("toml"); err == nil {
		t.Error("rendered toml")
	}
	for _, s := range []string{"yaml", "json"} {
		if _, err := ParseFormat(s); err != nil {
			t.Error(err)
		}
	}
	if _, err := ParseFormat("yml"); err == nil || !strings.Contains(err.Error(), "--format") {
		t.Errorf("ParseFormat(yml) = %v", err)
	}
}

func TestGenerateRefusesInvalidOptions(t *testing.T) {
	o := examples(t)[0].opts()
	o.MaxAttempts = 0
	if tpl, err := Generate(o); err == nil || tpl != nil {
		t.Fatalf("Generate with --max-attempts 0 = %v, %v", tpl, err)
	}
}

// mapsJoin returns the union of ms.
func mapsJoin(ms ...map[string]any) map[string]any {
	out := map[string]any{}
	for _, m := range ms {
		maps.Copy(out, m)
	}
	return out
}

// alarmQueries returns the metric math of alarm a by id: a MetricStat or an expression. Only
// the query named returned may return data.
func alarmQueries(t *testing.T, name string, a *Alarm, returned string) map[string]any {
	t.Helper()
	got := map[string]any{}
	for _, q := range a.Metrics {
		if q.MetricStat != nil {
			got[q.Id] = *q.MetricStat
		} else {
			got[q.Id] = q.Expression
		}
		if q.ReturnData != (q.Id == returned) {
			t.Errorf("%s: %s returns data %v", name, q.Id, q.ReturnData)
		}
	}
	return got
}
