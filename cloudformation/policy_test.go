package cloudformation

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseStatements(t *testing.T) {
	s3 := Statement{Effect: "Allow", Action: []string{"s3:GetObject"}, Resource: []any{"arn:aws:s3:::bucket/*"}}
	for _, c := range []struct {
		name string
		in   string
		want []Statement
	}{
		{"document", `{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::bucket/*"}]}`, []Statement{s3}},
		{"document with one statement", `{"Version": "2012-10-17", "Id": "x", "Statement": {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": ["arn:aws:s3:::bucket/*"]}}`, []Statement{s3}},
		{"array", `[{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::bucket/*"}]`, []Statement{s3}},
		{"statement", `{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::bucket/*"}`, []Statement{s3}},
		{"not action, not resource, condition", `{"Sid": "Deny1", "Effect": "Deny", "NotAction": ["s3:*", "kms:Decrypt"], "NotResource": "*",
			"Condition": {"StringNotEquals": {"aws:RequestedRegion": ["eu-west-1"]}, "NumericLessThan": {"s3:max-keys": 10}, "Bool": {"aws:SecureTransport": false}}}`,
			[]Statement{{Sid: "Deny1", Effect: "Deny", NotAction: []string{"s3:*", "kms:Decrypt"}, NotResource: []any{"*"},
				Condition: map[string]map[string]any{
					"StringNotEquals": {"aws:RequestedRegion": []any{"eu-west-1"}},
					"NumericLessThan": {"s3:max-keys": json.Number("10")},
					"Bool":            {"aws:SecureTransport": false},
				}}}},
		{"wildcards", `{"Effect": "Allow", "Action": ["dynamodb:Get*", "s3:?etObject", "*"], "Resource": "*"}`,
			[]Statement{{Effect: "Allow", Action: []string{"dynamodb:Get*", "s3:?etObject", "*"}, Resource: []any{"*"}}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseStatements([]byte(c.in))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseStatementsRefuses(t *testing.T) {
	for _, c := range []struct{ name, in, want string }{
		{"empty", ``, "empty file"},
		{"not json", `Effect: Allow`, "expected a policy document"},
		{"truncated", `{"Effect": "Allow"`, "not a JSON object"},
		{"trailing data", `{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*"} {}`, "unexpected data after the JSON value"},
		{"empty array", `[]`, "no statements"},
		{"old version", `{"Version": "2008-10-17", "Statement": []}`, `Version must be "2012-10-17"`},
		{"no version", `{"Statement": []}`, `Version must be "2012-10-17"`},
		{"unknown document key", `{"Version": "2012-10-17", "Statement": [], "Extra": 1}`, `unknown key "Extra"`},
		{"statement not object", `["s3:GetObject"]`, "statement 1: not a JSON object"},
		{"lower-case effect", `{"Effect": "allow", "Action": "s3:GetObject", "Resource": "*"}`, `statement 1: Effect ("allow") must be "Allow" or "Deny"`},
		{"no effect", `{"Action": "s3:GetObject", "Resource": "*"}`, `Effect ("") must be`},
		{"no action", `{"Effect": "Allow", "Resource": "*"}`, "one of Action and NotAction is required"},
		{"both actions", `{"Effect": "Allow", "Action": "s3:GetObject", "NotAction": "s3:PutObject", "Resource": "*"}`, "Action and NotAction must not both be set"},
		{"bad action", `{"Effect": "Allow", "Action": "GetObject", "Resource": "*"}`, `action "GetObject" must look like "service:Action"`},
		{"empty action list", `{"Effect": "Allow", "Action": [], "Resource": "*"}`, "Action must not be empty"},
		{"action number", `{"Effect": "Allow", "Action": 3, "Resource": "*"}`, "Action must be a string or an array of strings"},
		{"no resource", `{"Effect": "Allow", "Action": "s3:GetObject"}`, "one of Resource and NotResource is required"},
		{"both resources", `{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*", "NotResource": "*"}`, "must not both be set"},
		{"resource not arn", `{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "my-bucket"}`, `resource "my-bucket" must be an ARN`},
		{"principal", `{"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "*"}`, "Principal is not allowed"},
		{"not principal", `{"Effect": "Allow", "NotPrincipal": {"AWS": "x"}, "Action": "s3:GetObject", "Resource": "*"}`, "NotPrincipal is not allowed"},
		{"unknown key", `{"Effect": "Allow", "Actions": "s3:GetObject", "Resource": "*"}`, `unknown key "Actions"`},
		{"bad sid", `{"Sid": "read inputs", "Effect": "Allow", "Action": "s3:GetObject", "Resource": "*"}`, `Sid ("read inputs") may contain only letters and digits`},
		{"condition shape", `{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*", "Condition": {"StringEquals": "x"}}`, "Condition must map operators"},
		{"condition value", `{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*", "Condition": {"StringEquals": {"k": {"a": 1}}}}`, `Condition StringEquals "k": value must be`},
		{"condition empty", `{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*", "Condition": {"StringEquals": {}}}`, "must have at least one condition key"},
		{"second statement", `[{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*"}, {"Effect": "Maybe", "Action": "s3:GetObject", "Resource": "*"}]`, "statement 2: Effect"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseStatements([]byte(c.in))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("ParseStatements = %v, %v; want error %q", got, err, c.want)
			}
		})
	}
}

func FuzzParseStatements(f *testing.F) {
	f.Add([]byte(`{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*"}]}`))
	f.Add([]byte(`[{"Effect": "Deny", "NotAction": ["s3:*"], "NotResource": "*", "Condition": {"Bool": {"aws:SecureTransport": false}}}]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		statements, err := ParseStatements(data)
		if err != nil {
			return
		}
		// Whatever is accepted is a valid statement that renders as JSON.
		for _, s := range statements {
			if err := s.validate(); err != nil {
				t.Fatalf("accepted an invalid statement: %v", err)
			}
		}
		if _, err := json.Marshal(statements); err != nil {
			t.Fatal(err)
		}
	})
}
