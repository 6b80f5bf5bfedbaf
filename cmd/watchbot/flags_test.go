package main

import (
	"strings"
	"testing"
)

// TestQueueURLFromEnvironment checks that every command taking a queue reads it from
// WATCHBOT_QUEUE_URL, then QueueUrl, when no flag gives it. The URL given is no queue URL, so
// the command stops at its check, before any call, and names the value it read.
func TestQueueURLFromEnvironment(t *testing.T) {
	for _, tc := range []struct {
		name, watchbot, legacy, want string
	}{
		{"WATCHBOT_QUEUE_URL", "from-watchbot", "", `"from-watchbot" is not a queue URL`},
		{"QueueUrl", "", "from-legacy", `"from-legacy" is not a queue URL`},
		{"WATCHBOT_QUEUE_URL first", "from-watchbot", "from-legacy", `"from-watchbot" is not a queue URL`},
	} {
		for _, args := range [][]string{{"dead-letter", "count"}, {"send", "--body", "x"}} {
			t.Run(tc.name+"/"+args[0], func(t *testing.T) {
				t.Setenv("WATCHBOT_QUEUE_URL", tc.watchbot)
				t.Setenv("QueueUrl", tc.legacy)
				code, _, stderr := runCLI(t, nil, args...)
				if code != 2 || !strings.Contains(stderr, tc.want) {
					t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr, tc.want)
				}
			})
		}
	}
}

// TestListenQueueURLFromLegacyVariable checks that QueueUrl gives listen its queue when
// WATCHBOT_QUEUE_URL is set but empty.
func TestListenQueueURLFromLegacyVariable(t *testing.T) {
	t.Setenv("WATCHBOT_QUEUE_URL", "")
	t.Setenv("QueueUrl", "https://sqs.us-east-1.amazonaws.com/123456789012/legacy")
	cfg, _, err := parseListen(t, "--", "./worker.sh")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.QueueURL != "https://sqs.us-east-1.amazonaws.com/123456789012/legacy" {
		t.Errorf("QueueURL = %q, want QueueUrl's", cfg.QueueURL)
	}
}
