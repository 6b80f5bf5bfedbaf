package cloudformation

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/watchbot/watchbot/alarms"
)

func TestParseQueueSpec(t *testing.T) {
	tests := []struct {
		in   string
		want QueueSpec
		err  string
	}{
		{"urgent", QueueSpec{Name: "urgent", Weight: 1}, ""},
		{"urgent:3", QueueSpec{Name: "urgent", Weight: 3}, ""},
		{"urgent:x", QueueSpec{}, "NAME:WEIGHT, WEIGHT a whole number"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseQueueSpec(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("ParseQueueSpec(%q) = %v, want %q", tt.in, err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseQueueSpec(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestQueuesValidate(t *testing.T) {
	q := func(specs ...string) []QueueSpec {
		var out []QueueSpec
		for _, s := range specs {
			spec, _ := ParseQueueSpec(s)
			out = append(out, spec)
		}
		return out
	}
	tests := []struct {
		name string
		edit func(o *Options)
		want string
	}{
		{"several", func(o *Options) { o.Queues = q("urgent:3", "bulk") }, ""},
		{"strict", func(o *Options) { o.Queues, o.QueuePolicy = q("a", "b"), QueuePolicyStrict }, ""},
		{"bad policy", func(o *Options) { o.Queues, o.QueuePolicy = q("a", "b"), "fair" }, `--queue-policy ("fair") must be weighted or strict`},
		{"with --queue-name", func(o *Options) { o.Queues, o.QueueName = q("a"), "jobs" }, "give Queues for each queue"},
		{"too many", func(o *Options) { o.Queues = q("a", "b", "c", "d", "e") }, "at most 4 queues"},
		{"one container per job", func(o *Options) {
			o.Queues, o.Environment = q("a", "b"), map[string]string{"writableFilesystem": "true"}
		}, "makes listen --once, which serves one queue"},
		{"one queue, one container per job", func(o *Options) {
			o.Queues, o.Environment = q("a"), map[string]string{"writableFilesystem": "true"}
		}, ""},
		{"twice", func(o *Options) { o.Queues = q("a", "a") }, "given twice"},
		{"same ids", func(o *Options) { o.Queues = q("bulk-jobs", "bulk_jobs") }, "same logical ids (BulkJobs)"},
		{"weight 0", func(o *Options) { o.Queues = q("a:0", "b") }, "weight outside 1..1000"},
		{"bad name", func(o *Options) { o.Queues = q("a.b") }, "NAME of letters, digits"},
		{"too long", func(o *Options) { o.NamePrefix, o.Queues = strings.Repeat("p", 40), q(strings.Repeat("q", 30)) }, "longer than 63 characters"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := DefaultOptions()
			o.Command = []string{"/app/worker"}
			tt.edit(&o)
			err := o.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v, want %q", err, tt.want)
			}
		})
	}
}

// TestSeveralQueues: each --queue gets its queue and DLQ with its own redrive policy and
// alarms; one listen serves them in the order given, with the weights that are not 1; the
// task role reaches every queue.
func TestSeveralQueues(t *testing.T) {
	o := DefaultOptions()
	o.NamePrefix = "media"
	o.Queues = []QueueSpec{{Name: "urgent", Weight: 3}, {Name: "bulk-jobs", Weight: 1}}
	o.QueuePolicy = QueuePolicyStrict
	o.Command = []string{"/app/worker"}
	tpl := generate(t, o)
	ids := map[string][2]string{"media-urgent": {ResQueue, ResDeadLetterQueue}, "media-bulk-jobs": {"QueueBulkJobs", "DeadLetterQueueBulkJobs"}}
	for name, id := range ids {
		queue := resource[*Queue](t, tpl, id[0], "AWS::SQS::Queue")
		dlq := resource[*Queue](t, tpl, id[1], "AWS::SQS::Queue")
		if queue.QueueName != name || dlq.QueueName != name+"-dead-letter" {
			t.Errorf("queues %v and %v, want %s and its dead-letter queue", queue.QueueName, dlq.QueueName, name)
		}
		if diff := cmp.Diff(GetAtt(id[1], "Arn"), queue.RedrivePolicy.DeadLetterTargetArn); diff != "" {
			t.Errorf("%s redrives elsewhere: %s", name, diff)
		}
		for _, d := range RenderedAlarms(o) {
			if d.Subject != alarms.DeadLetterQueue {
				continue
			}
			suffix := strings.TrimPrefix(id[0], ResQueue)
			a := resource[*Alarm](t, tpl, AlarmLogicalID(d)+suffix, "AWS::CloudWatch::Alarm")
			if diff := cmp.Diff([]Dimension{{Name: "QueueName", Value: GetAtt(id[1], "QueueName")}}, a.Dimensions); diff != "" {
				t.Errorf("%s's %s alarm watches another queue: %s", name, d.Name, diff)
			}
		}
	}
	td := resource[*TaskDefinition](t, tpl, ResTaskDefinition, "AWS::ECS::TaskDefinition")
	want := []any{"listen", "--queue-url", Ref(ResQueue), "--queue-url", Ref("QueueBulkJobs"), "--queue-weight", "media-urgent=3", "--queue-policy", "strict", "--max-attempts"}
	if diff := cmp.Diff(want, td.ContainerDefinitions[0].Command[:len(want)]); diff != "" {
		t.Errorf("listen's arguments (-want +got):\n%s", diff)
	}
	role := resource[*Role](t, tpl, ResTaskRole, "AWS::IAM::Role")
	st := role.Policies[0].PolicyDocument.Statement
	if diff := cmp.Diff([]any{GetAtt(ResQueue, "Arn"), GetAtt("QueueBulkJobs", "Arn")}, st[0].Resource); diff != "" {
		t.Errorf("work queue statement: %s", diff)
	}
	if diff := cmp.Diff([]any{GetAtt(ResDeadLetterQueue, "Arn"), GetAtt("DeadLetterQueueBulkJobs", "Arn")}, st[1].Resource); diff != "" {
		t.Errorf("dead-letter queue statement: %s", diff)
	}
}

// TestOneQueueFlagIsASingleQueueStack: one --queue makes the stack --queue-name would, named
// under the prefix, with nothing about weights or policy for listen.
func TestOneQueueFlagIsASingleQueueStack(t *testing.T) {
	one := DefaultOptions()
	one.NamePrefix, one.Command = "media", []string{"/app/worker"}
	one.Queues, one.QueuePolicy = []QueueSpec{{Name: "jobs", Weight: 3}}, QueuePolicyStrict
	named := DefaultOptions()
	named.NamePrefix, named.Command = "media", []string{"/app/worker"}
	named.QueueName = "media-jobs"
	if diff := cmp.Diff(render(t, generate(t, named), JSON), render(t, generate(t, one), JSON)); diff != "" {
		t.Errorf("one --queue differs from --queue-name (-want +got):\n%s", diff)
	}
}

// TestDedupeDoublesMaxReceiveCount: with --dedupe, listen counts attempts in runs, and the
// redrive policy is the backstop for receives that run nothing: twice --max-attempts, at
// most SQS's 1000.
func TestDedupeDoublesMaxReceiveCount(t *testing.T) {
	for _, tt := range []struct {
		maxAttempts int
		dedupe      bool
		job         time.Duration // --max-job-duration: past 12 h, a receive for each relay
		want        int
	}{
		{5, false, 0, 5},
		{5, true, 0, 10},
		{1000, false, 0, 1000},
		{700, true, 0, 1000},
		{5, true, 12 * time.Hour, 10},
		{5, true, 12*time.Hour + time.Second, 11},
		{5, true, 48 * time.Hour, 13},
		{5, false, 48 * time.Hour, 5},
	} {
		if got := (Options{MaxAttempts: tt.maxAttempts, Dedupe: tt.dedupe, MaxJobDuration: tt.job}).maxReceiveCount(); got != tt.want {
			t.Errorf("--max-attempts %d, dedupe %v: maxReceiveCount %d, want %d", tt.maxAttempts, tt.dedupe, got, tt.want)
		}
	}
}
