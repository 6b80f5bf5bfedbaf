package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/watchbot/watchbot/alarms"
)

func TestAlarmsListTable(t *testing.T) {
	code, out, errOut := runCLI(t, nil, "alarms", "list", "--worker-errors-threshold", "25", "--oldest-message-age", "15m", "--braking-threshold", "30m")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	table, descriptions, ok := strings.Cut(out, "\n\n")
	if !ok {
		t.Fatalf("no blank line between the table and the descriptions:\n%s", out)
	}
	rows := strings.Split(table, "\n")
	want := []string{
		"NAME                  NAMESPACE  METRIC                         DIMENSION          STATISTIC  PERIOD  EVALUATIONS  CONDITION  MISSING DATA",
		"WorkerErrors          Watchbot   WorkerErrors                   QueueName=<queue>  Sum        60s     1            > 25       notBreaching",
		"DeadLetter            Watchbot   DeadLetter                     QueueName=<queue>  Sum        60s     1            >= 1       notBreaching",
		"DeadLetterQueueDepth  Watchbot   DeadLetterQueueDepth           QueueName=<queue>  Maximum    60s     1            >= 1       notBreaching",
		"OldestMessageAge      AWS/SQS    ApproximateAgeOfOldestMessage  QueueName=<queue>  Maximum    60s     5            > 900      notBreaching",
		"Braking               Watchbot   BrakingSeconds                 QueueName=<queue>  Maximum    60s     30           > 0        notBreaching",
	}
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
	defs := alarms.Definitions(alarms.Thresholds{WorkerErrorsPerMinute: 25, OldestMessageAgeSeconds: 900, BrakingMinutes: 30})
	lines := strings.Split(strings.TrimSuffix(descriptions, "\n"), "\n")
	if len(lines) != len(defs) {
		t.Fatalf("%d description lines, want %d:\n%s", len(lines), len(defs), descriptions)
	}
	for i, d := range defs {
		if lines[i] != d.Name+": "+d.Description {
			t.Errorf("description line %q, want %q", lines[i], d.Name+": "+d.Description)
		}
	}
}

func TestAlarmsListJSON(t *testing.T) {
	code, out, errOut := runCLI(t, nil, "alarms", "list", "--json", "--metrics-namespace", "Team/Jobs")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	var got []alarms.Definition
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	want := alarms.Definitions(alarms.DefaultThresholds())
	for i := range want {
		if want[i].Namespace == "" {
			want[i].Namespace = "Team/Jobs"
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("definitions (-want +got):\n%s", diff)
	}
}

func TestAlarmsListWithoutMetrics(t *testing.T) {
	code, out, errOut := runCLI(t, nil, "alarms", "list", "--json", "--metrics", "none")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	var got []alarms.Definition
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if len(got) != 1 || got[0].Name != "OldestMessageAge" || got[0].Namespace != alarms.SQSNamespace {
		t.Errorf("with --metrics none, got %+v; want only the AWS/SQS alarm", got)
	}
}

func TestAlarmsListBadInput(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"negative threshold", []string{"--worker-errors-threshold", "-1"}, "--oldest-message-age-threshold, --braking-threshold): worker-errors threshold (-1) must not be negative"},
		{"braking in fractions of a minute", []string{"--braking-threshold", "90s"}, "--braking-threshold (1m30s) must be a whole number of minutes"},
		{"braking over a day", []string{"--braking-threshold", "25h"}, "braking threshold (1500 minutes) must be between 1 minute and 1 day"},
		{"age too short", []string{"--oldest-message-age", "10s"}, "oldest-message-age threshold (10s) must be between 60s and 14 days"},
		{"age in fractions", []string{"--oldest-message-age-threshold", "90.5s"}, "--oldest-message-age-threshold (1m30.5s) must be a whole number of seconds"},
		{"age not a duration", []string{"--oldest-message-age", "soon"}, `"soon" is not a duration`},
		{"AWS namespace", []string{"--metrics-namespace", "AWS/SQS"}, "--metrics-namespace (\"AWS/SQS\") must not start with AWS/"},
		{"unknown mode", []string{"--metrics", "statsd"}, `--metrics ("statsd") must be cloudwatch, emf or none`},
		{"argument", []string{"extra"}, `alarms list takes no arguments, but got "extra"`},
		{"unknown flag", []string{"--wide"}, "has no flag --wide"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, nil, append([]string{"alarms", "list"}, tt.args...)...)
			if code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			if !strings.Contains(errOut, tt.wantErr) || strings.Count(errOut, "watchbot:") != 1 {
				t.Errorf("stderr %q, want one error containing %q", errOut, tt.wantErr)
			}
			if out != "" {
				t.Errorf("stdout %q, want nothing", out)
			}
		})
	}
}
