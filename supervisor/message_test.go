package supervisor

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/google/go-cmp/cmp"
)

func sqsMessage(body string, sys map[string]string, attrs map[string]types.MessageAttributeValue) types.Message {
	return types.Message{MessageId: aws.String("m-1"), ReceiptHandle: aws.String("rh"), Body: aws.String(body),
		Attributes: sys, MessageAttributes: attrs}
}

func str(v string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
}

func TestParseMessage(t *testing.T) {
	sys := map[string]string{"ApproximateReceiveCount": "3", "SentTimestamp": "1700000000000",
		"ApproximateFirstReceiveTimestamp": "1700000001000", "MessageGroupId": "g1"}
	tests := []struct {
		name        string
		body        string
		attrs       map[string]types.MessageAttributeValue
		wantBody    string
		wantSubject string
		wantAttrs   map[string]string
	}{
		{"plain body", "hello", nil, "hello", "", map[string]string{}},
		{"attributes", "x", map[string]types.MessageAttributeValue{
			"color": str("red"),
			"n":     {DataType: aws.String("Number"), StringValue: aws.String("42")},
			"bin":   {DataType: aws.String("Binary"), BinaryValue: []byte{1, 2}},
		}, "x", "", map[string]string{"color": "red", "n": "42"}},
		{"sns envelope", `{"Type":"Notification","TopicArn":"arn:aws:sns:us-east-1:1:t","Subject":"s","Message":"inner","MessageAttributes":{"k":{"Type":"String","Value":"v"},"b":{"Type":"Binary","Value":"AQI="}}}`,
			nil, "inner", "s", map[string]string{"k": "v"}},
		{"sns envelope with JSON message", `{"Type":"Notification","TopicArn":"arn","Message":"{\"a\":1}"}`, nil, `{"a":1}`, "", map[string]string{}},
		{"malformed envelope passes through", `{"Type":"Notification","TopicArn":"arn","Message":`, nil,
			`{"Type":"Notification","TopicArn":"arn","Message":`, "", map[string]string{}},
		{"envelope without TopicArn passes through", `{"Type":"Notification","Message":"m"}`, nil,
			`{"Type":"Notification","Message":"m"}`, "", map[string]string{}},
		{"envelope with non-string Message passes through", `{"Type":"Notification","TopicArn":"a","Message":{"x":1}}`, nil,
			`{"Type":"Notification","TopicArn":"a","Message":{"x":1}}`, "", map[string]string{}},
		{"other JSON passes through", `{"Type":"Other"}`, nil, `{"Type":"Other"}`, "", map[string]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := parseMessage(sqsMessage(tt.body, sys, tt.attrs))
			if m.Body != tt.wantBody || m.Subject != tt.wantSubject || m.Raw != tt.body {
				t.Fatalf("body %q subject %q raw %q; want %q %q %q", m.Body, m.Subject, m.Raw, tt.wantBody, tt.wantSubject, tt.body)
			}
			if diff := cmp.Diff(tt.wantAttrs, m.Attributes); diff != "" {
				t.Errorf("attributes (-want +got):\n%s", diff)
			}
			if m.Attempt != 3 || m.GroupID != "g1" || !m.SentAt.Equal(time.UnixMilli(1700000000000)) {
				t.Errorf("system attributes not parsed: %+v", m)
			}
		})
	}
	if m := parseMessage(sqsMessage("x", nil, nil)); m.Attempt != 1 || !m.SentAt.IsZero() {
		t.Errorf("missing system attributes: attempt %d sent %v, want 1 and zero", m.Attempt, m.SentAt)
	}
}

func TestBuildEnv(t *testing.T) {
	m := message{ID: "id-1", Body: "body", Subject: "subj", Attempt: 2,
		SentAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), FirstReceive: time.Date(2026, 1, 2, 3, 4, 6, 0, time.UTC),
		GroupID: "grp", Attributes: map[string]string{"my-attr.name": "v1", "Count": "7"}}
	deadline := time.Date(2026, 1, 2, 4, 0, 0, 0, time.UTC)
	// Received twice, and run once more in place (FIFO): SQS's count and watchbot's attempt differ.
	env := buildEnv(m, jobEnv{Attempt: 3, QueueURL: "https://sqs.us-east-1.amazonaws.com/123456789012/urgent", MaxAttempts: 5, MessageFile: "/tmp/m", ResultFile: "/tmp/r", Deadline: deadline})
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

// FuzzParseMessage checks that no body or attribute breaks parsing or environment building:
// no panic, every variable a NAME=value with a shell-free name, no NUL, and the body reaches
// the worker unchanged unless it is an SNS envelope.
func FuzzParseMessage(f *testing.F) {
	f.Add(`hello`, "attr", "value")
	f.Add(`{"Type":"Notification","TopicArn":"arn","Message":"inner","Subject":"s"}`, "k", "v")
	f.Add(`{"Type":"Notification","TopicArn":"arn","Message":"x","MessageAttributes":{"a b":{"Type":"String","Value":"c"}}}`, "ü-ñ", "日本")
	f.Add(`$(rm -rf /); echo "\x00"`, "weird name!", "a\nb")
	f.Fuzz(func(t *testing.T, body, attrName, attrValue string) {
		m := parseMessage(sqsMessage(body, map[string]string{"ApproximateReceiveCount": "x"},
			map[string]types.MessageAttributeValue{attrName: str(attrValue)}))
		if m.Raw != body {
			t.Fatalf("raw body changed")
		}
		if _, sns := parseSNS(body); !sns && m.Body != body {
			t.Fatalf("non-envelope body changed: %q -> %q", body, m.Body)
		}
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
