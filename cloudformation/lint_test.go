package cloudformation

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
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
// reads JSON or YAML, works offline, prints "N infos", "N warn", "N crit" with one block per
// finding, and exits 1 when there is a critical finding or the file cannot be parsed, 0
// otherwise. Parameters without a value or default are guessed from their type.
//
// The resource specification it bundles is from 2019 (2.29.0) and lacks properties the
// template uses. The tests replace it whole, as users do with scripts/lint-template: Node
// preloads scripts/cfn-lint-current-spec.js (--require), which reads the current
// CloudFormation resource specification from the npm package @aws-cdk/aws-service-spec (pinned beside cfn-lint, 0.1.216), writes it
// in the old format the linter reads (ResourceTypes, PropertyTypes) and makes it the linter's
// awsData.awsResources before the linter starts. So every property of every resource is
// checked against today's types; that file lists where the old format cannot say what the
// current specification says, and keeps the document it writes in
// node_modules/.cache/watchbot-cfn-lint. TestCurrentSpecification fails when the loaded
// specification is not the pinned one or lacks a property the template needs; the "bundled
// specification" case of TestLinterCatchesBrokenTemplates shows that the 2019 one refuses
// exactly the template's newer properties. A lint through the CLI takes about 0.55 s (0.27 s
// with the bundled specification, 1.1 s when the document has to be written first), nearly
// all of it starting Node and loading the linter and the specification; so the tests lint
// their templates in one Node process each, through testdata/cfn-lint-batch.js (the
// function the CLI calls, with its defaults), and run the CLI itself once, as a user does:
// through scripts/lint-template.
//
// The linter cannot evaluate Fn::And nor read a Rules section, which is why the template has
// neither (see conditions and alarmTargetCheck). No warning is accepted: lint requires
// "0 warn" as well as "0 crit".

var (
	linterOnce sync.Once
	linterBin  string
	linterErr  error
)

// linter returns the cfn-lint executable, installing the pinned npm packages on first use
// (when it or the package of the current specification is missing). It fails the test under CI=true and
// skips it elsewhere when the linter is unavailable.
func linter(t *testing.T) string {
	t.Helper()
	linterOnce.Do(func() {
		root, err := testenv.Root()
		if err != nil {
			linterErr = err
			return
		}
		bin := filepath.Join(root, "node_modules", ".bin", "cfn-lint")
		missing := func() error {
			for _, f := range []string{bin, filepath.Join(root, "node_modules", "@aws-cdk", "aws-service-spec", "package.json")} {
				if _, err := os.Stat(f); err != nil {
					return err
				}
			}
			return nil
		}
		if missing() != nil {
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
		if err := missing(); err != nil {
			linterErr = fmt.Errorf("the pinned linter is not installed: %w", err)
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

// A specification is the resource specification a lint checks against.
type specification int

const (
	currentSpec specification = iota // the current one, see scripts/cfn-lint-current-spec.js
	bundledSpec                      // the one cfn-lint ships, from 2019
)

// nodeEnv returns the environment of a Node process that checks against spec.
func nodeEnv(t *testing.T, spec specification) []string {
	t.Helper()
	if spec == currentSpec {
		root, err := testenv.Root()
		if err != nil {
			t.Fatal(err)
		}
		return testenv.CleanEnv(t, "NODE_OPTIONS=--require "+filepath.Join(root, "scripts", "cfn-lint-current-spec.js"))
	}
	return testenv.CleanEnv(t)
}

// runLinter lints the file at path as users do, with scripts/lint-template: the CLI against
// the current specification, failing on a warning too.
func runLinter(t *testing.T, path string, params ...string) lintResult {
	t.Helper()
	root, err := testenv.Root()
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	if len(params) > 0 {
		args = append(args, "--parameters", strings.Join(params, ","))
	}
	cmd := exec.CommandContext(t.Context(), filepath.Join(root, "scripts", "lint-template"), append(args, path)...)
	cmd.Env = testenv.CleanEnv(t)
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

// lintJob is a template to lint and its parameters ("Name=value").
type lintJob struct {
	path   string
	params []string
}

// finding is one finding of the linter.
type finding struct {
	Resource string `json:"resource"`
	Message  string `json:"message"`
}

// lintReport is what the linter's API reports of one template: its findings, or the error
// that stopped it reading the file.
type lintReport struct {
	Valid            bool
	Info, Warn, Crit []finding
	Error            string
}

// clean says whether the template passed with no warning, as a clean run of the CLI does.
func (r lintReport) clean() bool {
	return r.Error == "" && r.Valid && len(r.Warn) == 0 && len(r.Crit) == 0
}

// messages returns the message of every finding.
func (r lintReport) messages() []string {
	var out []string
	for _, f := range slices.Concat(r.Crit, r.Warn, r.Info) {
		out = append(out, f.Message)
	}
	return out
}

func (r lintReport) String() string {
	if r.Error != "" {
		return "cannot read the template: " + r.Error
	}
	var b strings.Builder
	fmt.Fprintf(&b, "valid %v", r.Valid)
	for _, l := range []struct {
		level string
		found []finding
	}{{"crit", r.Crit}, {"warn", r.Warn}, {"info", r.Info}} {
		for _, f := range l.found {
			fmt.Fprintf(&b, "\n%s %s: %s", l.level, f.Resource, f.Message)
		}
	}
	return b.String()
}

// lintAll lints every job against spec in one Node process and returns the reports in order.
func lintAll(t *testing.T, spec specification, jobs []lintJob) []lintReport {
	t.Helper()
	linter(t)
	root, err := testenv.Root()
	if err != nil {
		t.Fatal(err)
	}
	type input struct {
		Path       string            `json:"path"`
		Parameters map[string]string `json:"parameters"`
	}
	var in []input
	for _, j := range jobs {
		params := map[string]string{}
		for _, p := range j.params {
			k, v, _ := strings.Cut(p, "=")
			params[k] = v
		}
		in = append(in, input{j.path, params})
	}
	dir := t.TempDir()
	jobsFile, resultsFile := filepath.Join(dir, "jobs.json"), filepath.Join(dir, "results.json")
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(jobsFile, data, 0o644); err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs(filepath.Join("testdata", "cfn-lint-batch.js"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), "node", script, jobsFile, resultsFile)
	cmd.Dir = root
	cmd.Env = nodeEnv(t, spec)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("node cfn-lint-batch.js: %v\n%s", err, out)
	}
	var reports []lintReport
	data, err = os.ReadFile(resultsFile)
	if err == nil {
		err = json.Unmarshal(data, &reports)
	}
	if err != nil || len(reports) != len(jobs) {
		t.Fatalf("cfn-lint-batch.js wrote %d reports for %d templates: %v\n%s", len(reports), len(jobs), err, data)
	}
	return reports
}

func TestTemplatesPassTheLinter(t *testing.T) {
	linter(t)
	var names []string
	var jobs []lintJob
	for _, ex := range examples(t) {
		tpl := generate(t, ex.opts())
		for _, f := range []Format{JSON, YAML} {
			path := writeTemplate(t, tpl, f)
			// Each alarm destination: the guessed defaults (neither: the failing check
			// resource), a new topic for an e-mail address, an existing topic. The
			// parameters choose among the conditions, which both formats render alike, so
			// YAML is linted with the defaults alone: it checks the rendering, JSON the
			// conditions.
			sets := [][]string{
				nil,
				{"AlarmEmail=ops@example.com"},
				{"AlarmTopicArn=arn:aws:sns:eu-west-1:000000000000:alarms", "AssignPublicIp=ENABLED"},
			}
			if f == YAML {
				sets = sets[:1]
			}
			for _, params := range sets {
				names = append(names, fmt.Sprintf("%s.%s%v", ex.name, f, params))
				jobs = append(jobs, lintJob{path, params})
			}
		}
	}
	reports := lintAll(t, currentSpec, jobs)
	for i, name := range names {
		t.Run(name, func(t *testing.T) {
			if r := reports[i]; !r.clean() {
				t.Errorf("cfn-lint: %s", r)
			}
		})
	}
	// The CLI, as a user runs it, passes a template with parameters too.
	t.Run("command line", func(t *testing.T) {
		last := jobs[len(jobs)-1]
		if r := runLinter(t, last.path, last.params...); !r.clean() {
			t.Errorf("cfn-lint exit %d:%s", r.exitCode, r.output)
		}
	})
}

// TestLinterCatchesBrokenTemplates proves the lint test can fail: templates broken in the
// ways a generator bug would break them are refused, with the finding named.
func TestLinterCatchesBrokenTemplates(t *testing.T) {
	linter(t)
	base := func() *Template { return generate(t, examples(t)[0].opts()) }
	type broken struct {
		name string
		want string
	}
	var cases []broken
	var jobs []lintJob
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
		}, "Expecting a Boolean, got [ 'yes' ]"},
		{"misspelled property of metric math", func(tpl *Template) {
			tpl.Resources["MetricMathPolicy"] = Resource{Type: "AWS::ApplicationAutoScaling::ScalingPolicy", Properties: map[string]any{
				"PolicyName": "metric-math", "PolicyType": "TargetTrackingScaling", "ScalingTargetId": Ref(ResScalableTarget),
				"TargetTrackingScalingPolicyConfiguration": map[string]any{"TargetValue": 1, "CustomizedMetricSpecification": map[string]any{
					"Metrics": []any{map[string]any{"Id": "backlog", "Expresion": "visible / tasks", "ReturnData": true}},
				}},
			}}
		}, "Expresion is not a valid property of AWS::ApplicationAutoScaling::ScalingPolicy.TargetTrackingMetricDataQuery"},
	} {
		for _, f := range []Format{JSON, YAML} {
			tpl := base()
			c.breakIt(tpl)
			cases = append(cases, broken{c.name + "." + string(f), c.want})
			jobs = append(jobs, lintJob{path: writeTemplate(t, tpl, f)})
		}
	}
	truncated := filepath.Join(t.TempDir(), "template.json")
	if err := os.WriteFile(truncated, []byte(`{"Resources": `), 0o644); err != nil {
		t.Fatal(err)
	}
	reports := lintAll(t, currentSpec, append(jobs, lintJob{path: truncated}))
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if r := reports[i]; r.Valid || r.Error != "" || !slices.ContainsFunc(r.messages(), func(m string) bool { return strings.Contains(m, c.want) }) {
				t.Errorf("cfn-lint, want the template refused with %q: %s", c.want, r)
			}
		})
	}
	t.Run("unparsable file", func(t *testing.T) {
		if r := reports[len(cases)]; r.Error == "" {
			t.Errorf("cfn-lint read a truncated file: %s", r)
		}
	})
	// The CLI, as a user runs it, refuses a broken template too, with exit 1.
	t.Run("command line", func(t *testing.T) {
		r := runLinter(t, jobs[0].path)
		if r.exitCode != 1 || !strings.Contains(r.output, "Template invalid!") || !strings.Contains(r.output, cases[0].want) {
			t.Errorf("cfn-lint exit %d, want 1 with %q:%s", r.exitCode, cases[0].want, r.output)
		}
	})

	// The bundled 2019 specification refuses the template for exactly the properties that are
	// newer than it: each finding must name a property the bundled specification lacks and
	// the current one has, or one the bundled requires and the current does not (MetricName of
	// a CustomizedMetricSpecification, now that Metrics may stand instead), and the three it
	// has refused since the template first used them must be among them. The lints above, which the template passes, check those properties
	// against a specification that knows them: a typo there would be caught.
	t.Run("bundled specification", func(t *testing.T) {
		r := lintAll(t, bundledSpec, []lintJob{{path: writeTemplate(t, base(), JSON)}})[0]
		found := r.messages()
		if r.Valid || r.Error != "" {
			t.Errorf("cfn-lint with its bundled specification, want the template refused: %s", r)
		}
		for _, want := range []string{
			"RedriveAllowPolicy is not a valid property of AWS::SQS::Queue",
			"SqsManagedSseEnabled is not a valid property of AWS::SQS::Queue",
			"StopTimeout is not a valid property of AWS::ECS::TaskDefinition.ContainerDefinition",
		} {
			if !slices.Contains(found, want) {
				t.Errorf("cfn-lint with its bundled specification did not report %q; findings:\n%s", want, strings.Join(found, "\n"))
			}
		}

		var newer, names []string
		var requires []bool // the finding is of a missing required property
		for _, msg := range found {
			m := newerProperty.FindStringSubmatch(msg)
			if m == nil {
				t.Errorf("finding %q is not about a property newer than the bundled specification", msg)
				continue
			}
			newer = append(newer, msg)
			names = append(names, m[2]+m[4]+" "+m[1]+m[3])
			requires = append(requires, m[3] != "")
		}
		_, bundled := lookUp(t, bundledSpec, names)
		_, current := lookUp(t, currentSpec, names)
		for i, msg := range newer {
			b, c := bundled[i], current[i]
			unknown := b.Type == "" && c.Type != ""
			noLongerRequired := b.Required && !c.Required
			if requires[i] && !noLongerRequired || !requires[i] && !unknown {
				t.Errorf("finding %q: the bundled specification gives %+v, the current one %+v; the current one would report it too", msg, b, c)
			}
		}
	})
}

// newerProperty matches the two findings of a property the bundled specification does not
// know as the current one does: (1) property and (2) type, or (3) property and (4) type.
var newerProperty = regexp.MustCompile(`^(?:(\S+) is not a valid property of (\S+)|Required property (\S+) missing for type (\S+))$`)

// property is one property as a specification gives it, its type written as the old format
// writes it ("Boolean", "List<MetricDataQuery>"); Type is "" when there is no such property.
type property struct {
	Type     string
	Required bool
}

// lookUp returns the version of spec and its properties named by names, each "Type Property"
// ("AWS::SQS::Queue SqsManagedSseEnabled"), as cfn-lint holds them.
func lookUp(t *testing.T, spec specification, names []string) (version string, props []property) {
	t.Helper()
	root, err := testenv.Root()
	if err != nil {
		t.Fatal(err)
	}
	script := `
		const spec = require('cfn-lint/lib/awsData').awsResources;
		const properties = process.argv.slice(1).map((name) => {
			const [type, property] = name.split(' ');
			const p = ((spec.ResourceTypes[type] || spec.PropertyTypes[type] || {}).Properties || {})[property];
			if (!p) return { Type: '', Required: false };
			const collection = p.Type === 'List' || p.Type === 'Map';
			return {
				Type: collection ? p.Type + '<' + (p.PrimitiveItemType || p.ItemType) + '>' : p.PrimitiveType || p.Type,
				Required: p.Required === true,
			};
		});
		console.log(JSON.stringify({ version: spec.ResourceSpecificationVersion, properties }));`
	cmd := exec.CommandContext(t.Context(), "node", append([]string{"-e", script}, names...)...)
	cmd.Dir = root
	cmd.Env = nodeEnv(t, spec)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	var got struct {
		Version    string
		Properties []property
	}
	if err := json.Unmarshal(out, &got); err != nil || len(got.Properties) != len(names) {
		t.Fatalf("node printed %q for %d properties: %v", out, len(names), err)
	}
	return got.Version, got.Properties
}

// TestCurrentSpecification reads the specification the lints check against, as the linter
// holds it after the preload: it must come from the pinned @aws-cdk/aws-service-spec and
// give the newer properties the template uses the types CloudFormation gives them, so that
// a downgrade, or a preload that stops working, fails here by name.
func TestCurrentSpecification(t *testing.T) {
	linter(t)
	root, err := testenv.Root()
	if err != nil {
		t.Fatal(err)
	}
	pkg, err := os.ReadFile(filepath.Join(root, "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	var manifest struct {
		DevDependencies map[string]string `json:"devDependencies"`
	}
	if err := json.Unmarshal(pkg, &manifest); err != nil {
		t.Fatal(err)
	}
	pinned := manifest.DevDependencies["@aws-cdk/aws-service-spec"]

	rows := []struct {
		name string // "Type Property"
		want string
	}{
		{"AWS::SQS::Queue SqsManagedSseEnabled", "Boolean"},
		{"AWS::SQS::Queue RedriveAllowPolicy", "Json"},
		{"AWS::ECS::TaskDefinition.ContainerDefinition StopTimeout", "Integer"},
		{"AWS::ApplicationAutoScaling::ScalingPolicy.TargetTrackingScalingPolicyConfiguration CustomizedMetricSpecification", "CustomizedMetricSpecification"},
		{"AWS::ApplicationAutoScaling::ScalingPolicy.CustomizedMetricSpecification Metrics", "List<TargetTrackingMetricDataQuery>"},
		{"AWS::ApplicationAutoScaling::ScalingPolicy.TargetTrackingMetricDataQuery Expression", "String"},
		{"AWS::ApplicationAutoScaling::ScalingPolicy.TargetTrackingMetricDataQuery MetricStat", "TargetTrackingMetricStat"},
		{"AWS::ApplicationAutoScaling::ScalingPolicy.TargetTrackingMetricStat Metric", "TargetTrackingMetric"},
		{"AWS::CloudWatch::Alarm Metrics", "List<MetricDataQuery>"},
	}
	var names []string
	for _, r := range rows {
		names = append(names, r.name)
	}
	version, props := lookUp(t, currentSpec, names)

	if want := "@aws-cdk/aws-service-spec " + pinned; pinned == "" || version != want {
		t.Errorf("specification %q, want %q (package.json pins %q)", version, want, pinned)
	}
	for i, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			if props[i].Type != r.want {
				t.Errorf("type %q, want %q", props[i].Type, r.want)
			}
		})
	}
}
