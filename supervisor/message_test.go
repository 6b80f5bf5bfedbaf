package supervisor

import (
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
	t.Parallel()
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

// FuzzParseMessage checks that no body or attribute breaks parsing: no panic, and the body
// reaches the worker unchanged unless it is an SNS envelope. The worker package's
// FuzzBuildEnv checks the environment built from whatever parsing gives.
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
	})
}
