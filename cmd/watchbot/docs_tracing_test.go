package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestDocsTracingExamples runs the template command of docs/tracing.md through the CLI and
// checks the container gets the variables the page says, and that the collector example is
// YAML whose receivers listen where the page's --otel-endpoint values point.
func TestDocsTracingExamples(t *testing.T) {
	b, err := os.ReadFile("../../docs/tracing.md")
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	_, rest, ok := strings.Cut(page, "```sh\nwatchbot template ")
	if !ok {
		t.Fatal("docs/tracing.md has no watchbot template example")
	}
	example, _, _ := strings.Cut(rest, "```")
	example, _, _ = strings.Cut(strings.ReplaceAll(example, "\\\n", " "), ">")
	code, stdout, stderr := runTemplate(t, append([]string{"--format", "json"}, strings.Fields(example)...)...)
	if code != 0 {
		t.Fatalf("the page's template command: exit %d: %s", code, stderr)
	}
	var tpl struct {
		Resources map[string]struct {
			Type       string
			Properties struct {
				ContainerDefinitions []struct {
					Environment []struct {
						Name  string
						Value any
					}
				}
			}
		}
	}
	if err := json.Unmarshal([]byte(stdout), &tpl); err != nil {
		t.Fatal(err)
	}
	env := map[string]any{}
	for _, r := range tpl.Resources {
		if r.Type == "AWS::ECS::TaskDefinition" {
			for _, kv := range r.Properties.ContainerDefinitions[0].Environment {
				env[kv.Name] = kv.Value
			}
		}
	}
	for name, want := range map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://localhost:4318",
		"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
		"OTEL_SERVICE_NAME":           "thumbs",
		"OTEL_RESOURCE_ATTRIBUTES":    "deployment.environment=production",
	} {
		if env[name] != want {
			t.Errorf("container %s = %v, want %q", name, env[name], want)
		}
	}

	_, rest, ok = strings.Cut(page, "```yaml\n")
	if !ok {
		t.Fatal("docs/tracing.md has no collector example")
	}
	collector, _, _ := strings.Cut(rest, "```")
	var cfg struct {
		Receivers struct {
			OTLP struct {
				Protocols map[string]struct{ Endpoint string } `json:"protocols"`
			} `json:"otlp"`
		} `json:"receivers"`
		Service struct {
			Pipelines map[string]struct{ Receivers []string } `json:"pipelines"`
		} `json:"service"`
	}
	if err := yaml.Unmarshal([]byte(collector), &cfg); err != nil {
		t.Fatalf("the collector example is not YAML: %v", err)
	}
	for proto, port := range map[string]string{"http": ":4318", "grpc": ":4317"} {
		if ep := cfg.Receivers.OTLP.Protocols[proto].Endpoint; !strings.HasSuffix(ep, port) {
			t.Errorf("collector's %s receiver listens on %q, want port %s as the page's endpoints say", proto, ep, port)
		}
	}
	if r := cfg.Service.Pipelines["traces"].Receivers; len(r) != 1 || r[0] != "otlp" {
		t.Errorf("the traces pipeline receives from %v, want [otlp]", r)
	}
}
