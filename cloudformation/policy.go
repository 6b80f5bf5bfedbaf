package cloudformation

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
)

// PolicyDocument is an IAM policy document.
type PolicyDocument struct {
	Version   string      `json:"Version"`
	Statement []Statement `json:"Statement"`
}

// Statement is one IAM policy statement. Resource values are strings or intrinsic functions;
// exactly one of Action and NotAction, and one of Resource and NotResource, is set.
type Statement struct {
	Sid         string                    `json:"Sid,omitempty"`
	Effect      string                    `json:"Effect"`
	Principal   map[string]any            `json:"Principal,omitempty"`
	Action      []string                  `json:"Action,omitempty"`
	NotAction   []string                  `json:"NotAction,omitempty"`
	Resource    []any                     `json:"Resource,omitempty"`
	NotResource []any                     `json:"NotResource,omitempty"`
	Condition   map[string]map[string]any `json:"Condition,omitempty"`
}

// policyVersion is the only policy language version accepted: the older one lacks policy
// variables.
const policyVersion = "2012-10-17"

var (
	sidPattern    = regexp.MustCompile(`^[A-Za-z0-9]*$`)
	actionPattern = regexp.MustCompile(`^(\*|[A-Za-z0-9-]+:[A-Za-z0-9*?]+)$`)
)

// statementKeys are the keys an identity-policy statement may have.
var statementKeys = []string{"Sid", "Effect", "Action", "NotAction", "Resource", "NotResource", "Condition"}

// ParseStatements reads IAM policy statements from JSON: a policy document
// ({"Version": "2012-10-17", "Statement": [...]}), an array of statements, or one statement.
// Every statement is checked as an identity-policy statement, since it is attached to the task
// role: Effect Allow or Deny, Action or NotAction, Resource or NotResource, no Principal.
func ParseStatements(data []byte) ([]Statement, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, errors.New("empty file: expected a policy document, an array of statements or a statement")
	}
	var raws []json.RawMessage
	switch data[0] {
	case '[':
		if err := strictUnmarshal(data, &raws); err != nil {
			return nil, fmt.Errorf("not a JSON array of statements: %w", err)
		}
	case '{':
		var fields map[string]json.RawMessage
		if err := strictUnmarshal(data, &fields); err != nil {
			return nil, fmt.Errorf("not a JSON object: %w", err)
		}
		st, isDocument := fields["Statement"]
		if !isDocument {
			raws = []json.RawMessage{data}
			break
		}
		for key := range fields {
			if key != "Version" && key != "Statement" && key != "Id" {
				return nil, fmt.Errorf("policy document: unknown key %q (expected Version, Id and Statement)", key)
			}
		}
		var version string
		if v, ok := fields["Version"]; !ok || json.Unmarshal(v, &version) != nil || version != policyVersion {
			return nil, fmt.Errorf("policy document: Version must be %q", policyVersion)
		}
		st = bytes.TrimSpace(st)
		if len(st) > 0 && st[0] == '{' {
			raws = []json.RawMessage{st}
		} else if err := strictUnmarshal(st, &raws); err != nil {
			return nil, fmt.Errorf("policy document: Statement must be a statement or an array of statements: %w", err)
		}
	default:
		return nil, errors.New("expected a policy document, an array of statements or a statement (JSON)")
	}
	if len(raws) == 0 {
		return nil, errors.New("no statements")
	}
	statements := make([]Statement, 0, len(raws))
	for i, raw := range raws {
		s, err := parseStatement(raw)
		if err != nil {
			return nil, fmt.Errorf("statement %d: %w", i+1, err)
		}
		statements = append(statements, s)
	}
	return statements, nil
}

func parseStatement(raw json.RawMessage) (Statement, error) {
	var fields map[string]json.RawMessage
	if err := strictUnmarshal(raw, &fields); err != nil {
		return Statement{}, fmt.Errorf("not a JSON object: %w", err)
	}
	for key := range fields {
		switch {
		case key == "Principal" || key == "NotPrincipal":
			return Statement{}, fmt.Errorf("%s is not allowed: these statements are attached to the task role (an identity policy)", key)
		case !slices.Contains(statementKeys, key):
			return Statement{}, fmt.Errorf("unknown key %q (expected %s)", key, strings.Join(statementKeys, ", "))
		}
	}
	var s Statement
	if v, ok := fields["Sid"]; ok {
		if err := json.Unmarshal(v, &s.Sid); err != nil {
			return Statement{}, errors.New("Sid must be a string")
		}
	}
	if v, ok := fields["Effect"]; ok {
		if err := json.Unmarshal(v, &s.Effect); err != nil {
			return Statement{}, errors.New(`Effect must be "Allow" or "Deny"`)
		}
	}
	var err error
	if s.Action, err = stringList(fields, "Action"); err != nil {
		return Statement{}, err
	}
	if s.NotAction, err = stringList(fields, "NotAction"); err != nil {
		return Statement{}, err
	}
	resource, err := stringList(fields, "Resource")
	if err != nil {
		return Statement{}, err
	}
	notResource, err := stringList(fields, "NotResource")
	if err != nil {
		return Statement{}, err
	}
	s.Resource, s.NotResource = anyList(resource), anyList(notResource)
	if v, ok := fields["Condition"]; ok {
		if err := strictUnmarshal(v, &s.Condition); err != nil {
			return Statement{}, errors.New(`Condition must map operators to objects of keys and values, e.g. {"StringEquals": {"aws:RequestedRegion": "eu-west-1"}}`)
		}
	}
	return s, s.validate()
}

// validate checks s as a statement of an identity policy.
func (s Statement) validate() error {
	if !sidPattern.MatchString(s.Sid) {
		return fmt.Errorf("Sid (%q) may contain only letters and digits", s.Sid)
	}
	if s.Effect != "Allow" && s.Effect != "Deny" {
		return fmt.Errorf(`Effect (%q) must be "Allow" or "Deny"`, s.Effect)
	}
	if len(s.Principal) > 0 {
		return errors.New("Principal is not allowed: these statements are attached to the task role (an identity policy)")
	}
	if err := exactlyOne("Action", len(s.Action), "NotAction", len(s.NotAction)); err != nil {
		return err
	}
	for _, a := range append(slices.Clone(s.Action), s.NotAction...) {
		if !actionPattern.MatchString(a) {
			return fmt.Errorf(`action %q must look like "service:Action" (wildcards * and ? allowed) or be "*"`, a)
		}
	}
	if err := exactlyOne("Resource", len(s.Resource), "NotResource", len(s.NotResource)); err != nil {
		return err
	}
	for _, r := range append(slices.Clone(s.Resource), s.NotResource...) {
		str, isString := r.(string)
		if isString && str != "*" && !strings.HasPrefix(str, "arn:") {
			return fmt.Errorf(`resource %q must be an ARN ("arn:…") or "*"`, str)
		}
	}
	for op, keys := range s.Condition {
		if op == "" || len(keys) == 0 {
			return fmt.Errorf("Condition operator %q must have at least one condition key", op)
		}
		for key, v := range keys {
			if !conditionValue(v) {
				return fmt.Errorf("Condition %s %q: value must be a string, number, boolean or an array of them", op, key)
			}
		}
	}
	return nil
}

func exactlyOne(a string, na int, b string, nb int) error {
	switch {
	case na == 0 && nb == 0:
		return fmt.Errorf("one of %s and %s is required", a, b)
	case na > 0 && nb > 0:
		return fmt.Errorf("%s and %s must not both be set", a, b)
	}
	return nil
}

func conditionValue(v any) bool {
	switch v := v.(type) {
	case string, float64, bool, json.Number:
		return true
	case []any:
		if len(v) == 0 {
			return false
		}
		for _, e := range v {
			switch e.(type) {
			case string, float64, bool, json.Number:
			default:
				return false
			}
		}
		return true
	}
	return false
}

// stringList reads key as a string or a non-empty array of non-empty strings; absent is nil.
func stringList(fields map[string]json.RawMessage, key string) ([]string, error) {
	raw, ok := fields[key]
	if !ok {
		return nil, nil
	}
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		if one == "" {
			return nil, fmt.Errorf("%s must not be empty", key)
		}
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, fmt.Errorf("%s must be a string or an array of strings", key)
	}
	if len(many) == 0 || slices.Contains(many, "") {
		return nil, fmt.Errorf("%s must not be empty or contain empty strings", key)
	}
	return many, nil
}

func anyList(ss []string) []any {
	if ss == nil {
		return nil
	}
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// strictUnmarshal decodes data into v and refuses trailing data.
func strictUnmarshal(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("unexpected data after the JSON value")
	}
	return nil
}
