// Package cloudformation generates the CloudFormation template behind `watchbot template`: the
// work queue and its dead-letter queue, the Fargate service that runs `watchbot listen`,
// backlog-based autoscaling, least-privilege IAM and the alarms of package alarms, as one
// portable stack. The template is built from typed Go values and rendered with encoding/json
// (or as YAML from the same values), so tests can inspect what they check and the output is
// byte-for-byte deterministic.
package cloudformation

import (
	"bytes"
	"encoding/json"
	"fmt"

	"sigs.k8s.io/yaml"
)

// Template is a CloudFormation template.
type Template struct {
	AWSTemplateFormatVersion string               `json:"AWSTemplateFormatVersion"`
	Description              string               `json:"Description,omitempty"`
	Parameters               map[string]Parameter `json:"Parameters,omitempty"`
	Conditions               map[string]any       `json:"Conditions,omitempty"`
	Resources                map[string]Resource  `json:"Resources"`
	Outputs                  map[string]Output    `json:"Outputs,omitempty"`
}

// Parameter is a deploy-time input of the template.
type Parameter struct {
	Type                  string   `json:"Type"`
	Description           string   `json:"Description,omitempty"`
	Default               *string  `json:"Default,omitempty"`
	AllowedValues         []string `json:"AllowedValues,omitempty"`
	AllowedPattern        string   `json:"AllowedPattern,omitempty"`
	ConstraintDescription string   `json:"ConstraintDescription,omitempty"`
}

// Resource is one resource of the template. Properties holds one of this package's property
// structs (*Queue, *TaskDefinition, …).
type Resource struct {
	Type      string   `json:"Type"`
	Condition string   `json:"Condition,omitempty"`
	DependsOn []string `json:"DependsOn,omitempty"`
	// DeletionPolicy and UpdateReplacePolicy say what becomes of the resource when the
	// stack deletes or replaces it: Delete, Retain or Snapshot. Empty is CloudFormation's
	// default, Delete for every type the template uses.
	DeletionPolicy      string `json:"DeletionPolicy,omitempty"`
	UpdateReplacePolicy string `json:"UpdateReplacePolicy,omitempty"`
	Properties          any    `json:"Properties"`
}

// Output is one of the stack's outputs.
type Output struct {
	Description string `json:"Description,omitempty"`
	Condition   string `json:"Condition,omitempty"`
	Value       any    `json:"Value"`
}

// Fn is an intrinsic function or condition call, rendered as a one-key object.
type Fn map[string]any

// Ref returns {"Ref": name}: a parameter's value, a pseudo parameter or a resource's
// reference value.
func Ref(name string) Fn { return Fn{"Ref": name} }

// GetAtt returns {"Fn::GetAtt": [resource, attribute]}.
func GetAtt(resource, attribute string) Fn {
	return Fn{"Fn::GetAtt": []string{resource, attribute}}
}

// Sub returns {"Fn::Sub": s}: ${Name} in s is replaced by Ref or GetAtt of Name.
func Sub(s string) Fn { return Fn{"Fn::Sub": s} }

// Join returns {"Fn::Join": [sep, parts]}.
func Join(sep string, parts ...any) Fn { return Fn{"Fn::Join": []any{sep, parts}} }

// If returns {"Fn::If": [condition, whenTrue, whenFalse]}.
func If(condition string, whenTrue, whenFalse any) Fn {
	return Fn{"Fn::If": []any{condition, whenTrue, whenFalse}}
}

// Equals returns {"Fn::Equals": [a, b]}.
func Equals(a, b any) Fn { return Fn{"Fn::Equals": []any{a, b}} }

// Not returns {"Fn::Not": [condition]}.
func Not(condition any) Fn { return Fn{"Fn::Not": []any{condition}} }

// Or returns {"Fn::Or": conditions}.
func Or(conditions ...any) Fn { return Fn{"Fn::Or": conditions} }

// Condition returns {"Condition": name}, a reference to a named condition inside a condition
// function.
func Condition(name string) Fn { return Fn{"Condition": name} }

// NoValue removes the property it is the value of (AWS::NoValue).
var NoValue = Ref("AWS::NoValue")

// Format is an output format of a template.
type Format string

// The formats a template renders to.
const (
	YAML Format = "yaml"
	JSON Format = "json"
)

// ParseFormat checks a --format value.
func ParseFormat(s string) (Format, error) {
	switch f := Format(s); f {
	case YAML, JSON:
		return f, nil
	}
	return "", fmt.Errorf("--format (%q) must be yaml or json", s)
}

// Render returns the template in format f, with every object's keys sorted so that the same
// options always give the same bytes.
func (t *Template) Render(f Format) ([]byte, error) {
	raw, err := json.Marshal(t)
	if err != nil {
		return nil, fmt.Errorf("render template: %w", err)
	}
	switch f {
	case JSON:
		// A round trip through generic values sorts struct fields like map keys.
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("render template: %w", err)
		}
		var out bytes.Buffer
		enc := json.NewEncoder(&out)
		enc.SetEscapeHTML(false) // keep List<AWS::EC2::Subnet::Id> readable
		enc.SetIndent("", "  ")
		if err := enc.Encode(v); err != nil {
			return nil, fmt.Errorf("render template: %w", err)
		}
		return out.Bytes(), nil
	case YAML:
		// sigs.k8s.io/yaml converts the JSON into YAML with sorted keys.
		out, err := yaml.JSONToYAML(raw)
		if err != nil {
			return nil, fmt.Errorf("render template: %w", err)
		}
		return out, nil
	}
	return nil, fmt.Errorf("render template: unknown format %q", f)
}
