package cloudformation

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// The linter is the npm package cfn-lint 1.9.7 (martysweet/cfn-lint), pinned in the
// repository's package-lock.json and installed into node_modules by `scripts/local-sqs
// --install` (npm ci). Its CLI, as checked on these machines:
//
//	cfn-lint validate FILE [--parameters K=V,K2=V2]
//
// reads JSON or YAML, works offline (the resource specification is bundled), prints
// "N infos", "N warn", "N crit" with one block per finding, and exits 1 when there is a
// critical finding or the file cannot be parsed, 0 otherwise. Parameters without a value or
// default are guessed from their type.
//
// Its bundled resource specification (2019) lacks three properties the template uses, so it
// runs with testdata/cfn-lint-spec.js preloaded, which adds exactly those; see that file. It
// also cannot evaluate Fn::And nor read a Rules section, which is why the template has
// neither (see conditions and alarmTargetCheck). No warning is accepted: lint requires
// "0 warn" as well as "0 crit".

var (
	linterOnce sync.Once
	linterBin  string
	linterErr  error
)

// linter returns the cfn-lint executable, installing the pinned npm packages on first use.
// It fails the test under CI=true and skips it elsewhere when the linter is unavailable.
func linter(t *testing.T) string {
	t.Helper()
	linterOnce.Do(func() {
		root, err := testenv.Root()
		if err != nil {
			linterErr = err
			return
		}
		bin := filepath.Join(root, "node_modules", ".bin", "cfn-lint")
		if _, err := os.Stat(bin); err != nil {
			install := exec.Command(filepath.Join(root, "scripts", "local-sqs"), "--install")
			install.Dir = root
			if out, err := install.CombinedOutput(); err != nil {
				linterErr = fmt.Errorf("install the pinned npm packages: %w\n%s", err, out)
				return
			}
		}
		if _, err := exec.LookPath("node"); err != nil {
			linterErr = fmt.Errorf("node is not installed: %w", err)
			return
		}
		if _, err := os.Stat(bin); err != nil {
			linterErr = fmt.Errorf("cfn-lint is not installed: %w", err)
			return
		}
		linterBin = bin
	})
	testenv.Require(t, "cfn-lint unavailable", linterErr)
	return linterBin
}

var ansi = regexp.MustCompile(`\x1b\[[0-9;]*m`)

// lintResult is what one cfn-lint run reported.
type lintResult struct {
	exitCode int
	output   string
}

func (r lintResult) clean() bool {
	return r.exitCode == 0 && strings.Contains(r.output, "\n0 warn\n") && strings.Contains(r.output, "\n0 crit\n") &&
		strings.Contains(r.output, "Template valid!")
}

// runLinter lints the file at path; preload adds the specification patch.
func runLinter(t *testing.T, path string, preload bool, params ...string) lintResult {
	t.Helper()
	args := []string{"validate", path}
	if len(params) > 0 {
		args = append(args, "--parameters", strings.Join(params, ","))
	}
	cmd := exec.CommandContext(t.Context(), linter(t), args...)
	cmd.Env = os.Environ()
	if preload {
		spec, err := filepath.Abs(filepath.Join("testdata", "cfn-lint-spec.js"))
		if err != nil {
			t.Fatal(err)
		}
		cmd.Env = append(cmd.Env, "NODE_OPTIONS=--require "+spec+" "+os.Getenv("NODE_OPTIONS"))
	}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	code := 0
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("run cfn-lint: %v", err)
	}
	return lintResult{exitCode: code, output: "\n" + ansi.ReplaceAllString(string(out), "")}
}

func writeTemplate(t *testing.T, tpl *Template, f Format) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "template."+string(f))
	if err := os.WriteFile(path, render(t, tpl, f), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestTemplatesPassTheLinter(t *testing.T) {
	linter(t)
	for _, ex := range examples(t) {
		tpl := generate(t, ex.opts())
		for _, f := range []Format{JSON, YAML} {
			path := writeTemplate(t, tpl, f)
			// Each alarm destination: the guessed defaults (neither: the failing check
			// resource), a new topic for an e-mail address, an existing topic.
			for _, params := range [][]string{
				nil,
				{"AlarmEmail=ops@example.com"},
				{"AlarmTopicArn=arn:aws:sns:eu-west-1:000000000000:alarms", "AssignPublicIp=ENABLED"},
			} {
				t.Run(fmt.Sprintf("%s.%s%v", ex.name, f, params), func(t *testing.T) {
					if r := runLinter(t, path, true, params...); !r.clean() {
						t.Errorf("cfn-lint exit %d:%s", r.exitCode, r.output)
					}
				})
			}
		}
	}
}

// TestLinterCatchesBrokenTemplates proves the lint test can fail: templates broken in the
// ways a generator bug would break them are refused, with the finding named.
func TestLinterCatchesBrokenTemplates(t *testing.T) {
	linter(t)
	base := func() *Template { return generate(t, examples(t)[0].opts()) }
	for _, c := range []struct {
		name    string
		breakIt func(*Template)
		want    string
	}{
		{"unknown resource type", func(tpl *Template) {
			tpl.Resources["Bogus"] = Resource{Type: "AWS::SQS::Queueue", Properties: map[string]any{}}
		}, "Resource Bogus has an invalid Type of AWS::SQS::Queueue"},
		{"Ref to nothing", func(tpl *Template) {
			tpl.Outputs["Broken"] = Output{Value: Ref("WorkQueue")}
		}, "Referenced value WorkQueue does not exist"},
		{"GetAtt of an unknown attribute", func(tpl *Template) {
			tpl.Outputs["Broken"] = Output{Value: GetAtt(ResQueue, "Url")}
		}, "No such attribute Url on AWS::SQS::Queue"},
		{"misspelled property", func(tpl *Template) {
			tpl.Resources[ResLogGroup] = Resource{Type: "AWS::Logs::LogGroup", Properties: map[string]any{"RetentionDays": 30}}
		}, "RetentionDays is not a valid property of AWS::Logs::LogGroup"},
		{"missing required property", func(tpl *Template) {
			r := tpl.Resources[ResScalableTarget]
			p := *r.Properties.(*ScalableTarget)
			r.Properties = map[string]any{"ServiceNamespace": p.ServiceNamespace, "ScalableDimension": p.ScalableDimension,
				"ResourceId": p.ResourceId, "RoleARN": p.RoleARN, "MinCapacity": p.MinCapacity}
			tpl.Resources[ResScalableTarget] = r
		}, "Required property MaxCapacity missing"},
		{"wrong property type", func(tpl *Template) {
			r := tpl.Resources[ResDeadLetterQueue]
			p := *r.Properties.(*Queue)
			r.Properties = map[string]any{"QueueName": p.QueueName, "SqsManagedSseEnabled": []string{"yes"}}
			tpl.Resources[ResDeadLetterQueue] = r
		}, "SqsManagedSseEnabled"},
	} {
		for _, f := range []Format{JSON, YAML} {
			t.Run(c.name+"."+string(f), func(t *testing.T) {
				tpl := base()
				c.breakIt(tpl)
				r := runLinter(t, writeTemplate(t, tpl, f), true)
				if r.exitCode != 1 || !strings.Contains(r.output, "Template invalid!") || !strings.Contains(r.output, c.want) {
					t.Errorf("cfn-lint exit %d, want 1 with %q:%s", r.exitCode, c.want, r.output)
				}
			})
		}
	}

	t.Run("unparsable file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "template.json")
		if err := os.WriteFile(path, []byte(`{"Resources": `), 0o644); err != nil {
			t.Fatal(err)
		}
		if r := runLinter(t, path, true); r.exitCode != 1 {
			t.Errorf("cfn-lint exit %d on a truncated file:%s", r.exitCode, r.output)
		}
	})

	// Without the preload the bundled 2019 specification refuses exactly the three newer
	// properties, which shows the linter checks them (a typo there would be caught).
	t.Run("specification without the preload", func(t *testing.T) {
		r := runLinter(t, writeTemplate(t, base(), JSON), false)
		var found []string
		for _, line := range strings.Split(r.output, "\n") {
			if msg, ok := strings.CutPrefix(line, "Message: "); ok {
				found = append(found, msg)
			}
		}
		want := []string{
			"RedriveAllowPolicy is not a valid property of AWS::SQS::Queue",
			"SqsManagedSseEnabled is not a valid property of AWS::SQS::Queue",
			"SqsManagedSseEnabled is not a valid property of AWS::SQS::Queue",
			"StopTimeout is not a valid property of AWS::ECS::TaskDefinition.ContainerDefinition",
		}
		if r.exitCode != 1 || strings.Join(found, "\n") != strings.Join(want, "\n") {
			t.Errorf("cfn-lint without the preload: exit %d, findings:\n%s\nwant:\n%s", r.exitCode, strings.Join(found, "\n"), strings.Join(want, "\n"))
		}
	})
}
