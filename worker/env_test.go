package worker

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestBuildEnv(t *testing.T) {
	// Received twice, and run once more in place (FIFO): SQS's count and watchbot's attempt differ.
	m := Message{ID: "id-1", Body: "body", Subject: "subj", Receives: 2, Attempt: 3,
		SentAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), FirstReceive: time.Date(2026, 1, 2, 3, 4, 6, 0, time.UTC),
		GroupID: "grp", Attributes: map[string]string{"my-attr.name": "v1", "Count": "7"}}
	deadline := time.Date(2026, 1, 2, 4, 0, 0, 0, time.UTC)
	env := buildEnv(m, jobEnv{QueueURL: "https://sqs.us-east-1.amazonaws.com/123456789012/urgent", MaxAttempts: 5, MessageFile: "/tmp/m", ResultFile: "/tmp/r", Deadline: deadline})
	want := []string{
		"MessageId=id-1", "Message=body", "Subject=subj",
		"SentTimestamp=2026-01-02T03:04:05Z", "ApproximateFirstReceiveTimestamp=2026-01-02T03:04:06Z",
		"ApproximateReceiveCount=2", "WATCHBOT_MESSAGE_FILE=/tmp/m", "WATCHBOT_RESULT_FILE=/tmp/r",
		"WATCHBOT_ATTEMPT=3", "WATCHBOT_MAX_ATTEMPTS=5",
		"WATCHBOT_QUEUE_URL=https://sqs.us-east-1.amazonaws.com/123456789012/urgent", "WATCHBOT_QUEUE_NAME=urgent",
		"WATCHBOT_DEADLINE=2026-01-02T04:00:00Z", "WATCHBOT_GROUP_ID=grp",
		"WATCHBOT_ATTR_MY_ATTR_NAME=v1", "WATCHBOT_ATTR_COUNT=7",
	}
	slices.Sort(env)
	slices.Sort(want)
	if diff := cmp.Diff(want, env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}

	clash := m
	clash.Attributes = map[string]string{"T-id": "1", "t_ID": "2", "T_ID": "3", "t.id": "4"}
	for range 20 {
		var got []string
		for _, kv := range buildEnv(clash, jobEnv{}) {
			if strings.HasPrefix(kv, "WATCHBOT_ATTR_") {
				got = append(got, kv)
			}
		}
		// Byte order: "T-id" < "T_ID" < "t.id" < "t_ID": the first wins, every time.
		if !slices.Equal(got, []string{"WATCHBOT_ATTR_T_ID=1"}) {
			t.Fatalf("colliding attribute names gave %q, want only the first in byte order", got)
		}
	}

	big := m
	big.Body = strings.Repeat("x", maxEnvMessage+1)
	for _, kv := range buildEnv(big, jobEnv{}) {
		if strings.HasPrefix(kv, "Message=") {
			t.Fatal("Message set for a body above 64 KiB")
		}
	}
	exact := m
	exact.Body = strings.Repeat("x", maxEnvMessage)
	if !slices.Contains(buildEnv(exact, jobEnv{}), "Message="+exact.Body) {
		t.Fatal("Message omitted for a body of exactly 64 KiB")
	}
}

// FuzzBuildEnv checks that no body, subject, group or attribute breaks environment building:
// no panic, every variable a NAME=value with a shell-free name, and no NUL.
func FuzzBuildEnv(f *testing.F) {
	f.Add("hello", "", "", "attr", "value")
	f.Add(`$(rm -rf /); echo "\x00"`, "s\x00", "g", "weird name!", "a\nb")
	f.Add("x", "subject", "grp", "ü-ñ", "日本")
	f.Fuzz(func(t *testing.T, body, subject, group, attrName, attrValue string) {
		m := Message{ID: "m-1", Body: body, Subject: subject, GroupID: group, Receives: 1, Attempt: 1,
			Attributes: map[string]string{attrName: attrValue}}
		for _, kv := range buildEnv(m, jobEnv{QueueURL: "q", MessageFile: "f", ResultFile: "r"}) {
			name, value, ok := strings.Cut(kv, "=")
			if !ok || name == "" {
				t.Fatalf("bad env entry %q", kv)
			}
			for _, c := range name {
				if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
					t.Fatalf("env name %q has %q", name, c)
				}
			}
			if strings.ContainsRune(value, 0) {
				t.Fatalf("env value with NUL: %q", kv)
			}
		}
	})
}

// A worker inherits watchbot's environment but not its trace context: its TRACEPARENT,
// TRACESTATE and BAGGAGE are its message's alone.
func TestInheritedEnvLeavesOutTheTraceContext(t *testing.T) {
	environ := []string{"PATH=/usr/bin:/bin", "TRACEPARENT=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"TRACESTATE=congo=t61rcWkgMzE", "BAGGAGE=user=alice", "HOME=/home/u", "TRACEPARENT_NOTE=kept", "EMPTY="}
	before := slices.Clone(environ)
	got := inheritedEnv(environ)
	want := []string{"PATH=/usr/bin:/bin", "HOME=/home/u", "TRACEPARENT_NOTE=kept", "EMPTY="}
	if !slices.Equal(got, want) {
		t.Errorf("inheritedEnv = %q, want %q", got, want)
	}
	if !slices.Equal(environ, before) {
		t.Errorf("inheritedEnv changed its argument: %q", environ)
	}
}
