package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
	"sigs.k8s.io/yaml"

	"github.com/watchbot/watchbot/cloudformation"
	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// Kubernetes objects of docs/kubernetes.md, as much of them as the test reads. Fields it does
// not declare are ignored; a misspelled field it reads is missing and fails a check.
type (
	k8sObject struct {
		Kind     string          `json:"kind"`
		Metadata k8sMeta         `json:"metadata"`
		Spec     json.RawMessage `json:"spec"`
	}
	k8sMeta struct {
		Name        string            `json:"name"`
		Namespace   string            `json:"namespace"`
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	}
	deploymentSpec struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		Template struct {
			Metadata k8sMeta `json:"metadata"`
			Spec     struct {
				ServiceAccountName            string         `json:"serviceAccountName"`
				TerminationGracePeriodSeconds *int           `json:"terminationGracePeriodSeconds"`
				Containers                    []k8sContainer `json:"containers"`
			} `json:"spec"`
		} `json:"template"`
	}
	k8sContainer struct {
		Name    string   `json:"name"`
		Command []string `json:"command"`
		Args    []string `json:"args"`
		Env     []struct {
			Name      string `json:"name"`
			Value     string `json:"value"`
			ValueFrom any    `json:"valueFrom"`
		} `json:"env"`
		Ports []struct {
			Name          string `json:"name"`
			ContainerPort int    `json:"containerPort"`
		} `json:"ports"`
		LivenessProbe  *k8sProbe `json:"livenessProbe"`
		ReadinessProbe *k8sProbe `json:"readinessProbe"`
	}
	k8sProbe struct {
		HTTPGet *struct {
			Path string `json:"path"`
			Port any    `json:"port"` // a number or a port's name
		} `json:"httpGet"`
		PeriodSeconds    int `json:"periodSeconds"`
		FailureThreshold int `json:"failureThreshold"`
	}
	scaledObjectSpec struct {
		ScaleTargetRef struct {
			Kind string `json:"kind"`
			Name string `json:"name"`
		} `json:"scaleTargetRef"`
		Triggers []struct {
			Type              string `json:"type"`
			AuthenticationRef *struct {
				Name string `json:"name"`
			} `json:"authenticationRef"`
			Metadata map[string]string `json:"metadata"` // KEDA takes strings only
		} `json:"triggers"`
	}
	triggerAuthenticationSpec struct {
		PodIdentity *struct {
			Provider string `json:"provider"`
		} `json:"podIdentity"`
	}
	podMonitorSpec struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		PodMetricsEndpoints []struct {
			Port string `json:"port"`
			Path string `json:"path"`
		} `json:"podMetricsEndpoints"`
	}
)

// sqsScalerKeys are the metadata keys of KEDA's aws-sqs-queue trigger ("AWS SQS Queue",
// KEDA documentation); identityOwner is deprecated there in favour of a TriggerAuthentication.
var sqsScalerKeys = []string{"queueURL", "queueURLFromEnv", "queueLength", "activationQueueLength", "awsRegion",
	"awsEndpoint", "scaleOnInFlight", "scaleOnDelayed"}

// Kubernetes' defaults for what a manifest leaves out.
const (
	k8sTerminationGracePeriod = 30 * time.Second
	k8sProbePeriod            = 10
	k8sProbeFailureThreshold  = 3
)

// TestKubernetesDoc checks the manifests of docs/kubernetes.md against listen: the container
// runs listen with its own flags, which pass its validation; the probes ask /healthz and
// /readyz on the port of --http-addr, reachable from the kubelet, and tolerate a long poll;
// the grace period covers the drain; Prometheus scrapes that port; the KEDA scaler reads
// the queue listen reads, counting messages in flight, a pod per --concurrency of them; and
// the IAM policy holds the actions listen calls.
func TestKubernetesDoc(t *testing.T) {
	root, err := testenv.Root()
	if err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(root, "docs", "kubernetes.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := fencedBlocks(string(page))
	objects := map[string][]k8sObject{}
	for _, block := range blocks["yaml"] {
		for _, doc := range strings.Split("\n"+block, "\n---\n") {
			// As kubectl sends it: YAML to JSON with no target type, so that an unquoted
			// number or yes where Kubernetes wants a string fails as the API server fails it.
			raw, err := yaml.YAMLToJSON([]byte(doc))
			var o k8sObject
			if err == nil {
				err = json.Unmarshal(raw, &o)
			}
			if err != nil || o.Kind == "" {
				t.Fatalf("a YAML document of docs/kubernetes.md: %v\n%s", err, doc)
			}
			objects[o.Kind] = append(objects[o.Kind], o)
		}
	}
	one := func(kind string, spec any) k8sObject {
		t.Helper()
		if len(objects[kind]) != 1 {
			t.Fatalf("%d %ss in docs/kubernetes.md, want 1", len(objects[kind]), kind)
		}
		o := objects[kind][0]
		if err := json.Unmarshal(o.Spec, spec); err != nil {
			t.Fatalf("%s %s: %v", kind, o.Metadata.Name, err)
		}
		return o
	}

	var deployment deploymentSpec
	d := one("Deployment", &deployment)
	pod := deployment.Template
	for k, v := range deployment.Selector.MatchLabels {
		if pod.Metadata.Labels[k] != v {
			t.Errorf("the Deployment's selector %s=%s does not select its pods (labels %v)", k, v, pod.Metadata.Labels)
		}
	}
	if sa := objects["ServiceAccount"]; pod.Spec.ServiceAccountName == "" || len(sa) != 1 || sa[0].Metadata.Name != pod.Spec.ServiceAccountName {
		t.Errorf("the pods' service account %q is not the page's ServiceAccount", pod.Spec.ServiceAccountName)
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]

	// The container runs listen with its own flags, which its parsing and validation accept.
	command := append(slices.Clone(c.Command), c.Args...)
	if len(command) < 2 || command[0] != cloudformation.WatchbotPath || command[1] != "listen" {
		t.Fatalf("the container runs %q, want %s listen", command, cloudformation.WatchbotPath)
	}
	flags := listenFlags(t, command[1:])
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env[e.Name] = e.Value
			t.Setenv(e.Name, e.Value)
		}
	}
	cfg, err := parseListenCommand(command[1:])
	if err != nil {
		t.Fatalf("listen would not start: %q (env %v): %v", command, env, err)
	}

	// The probes and Prometheus reach --http-addr on the pod's IP.
	addr, ok := flags["http-addr"]
	if !ok {
		addr = env["WATCHBOT_HTTP_ADDR"]
	}
	host, port, err := cloudformation.SplitHTTPAddr(addr)
	if err != nil {
		t.Fatalf("listen's --http-addr: %v", err)
	}
	if ip, err := netip.ParseAddr(host); host != "" && (err != nil || !ip.IsUnspecified()) {
		t.Errorf("--http-addr %s: the kubelet probes the pod's IP, so listen must serve every interface (:%s)", addr, port)
	}
	portNames := map[string]string{}
	for _, p := range c.Ports {
		portNames[p.Name] = strconv.Itoa(p.ContainerPort)
	}
	for _, p := range []struct {
		name, path string
		probe      *k8sProbe
	}{{"liveness", "/healthz", c.LivenessProbe}, {"readiness", "/readyz", c.ReadinessProbe}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("no HTTP %s probe", p.name)
			continue
		}
		got := fmt.Sprint(p.probe.HTTPGet.Port)
		if named, ok := portNames[got]; ok {
			got = named
		}
		if p.probe.HTTPGet.Path != p.path || got != port {
			t.Errorf("%s probe asks %s on port %v, want %s on %s (--http-addr %s)", p.name, p.probe.HTTPGet.Path, p.probe.HTTPGet.Port, p.path, port, addr)
		}
	}
	if live := c.LivenessProbe; live != nil {
		period, failures := cmp.Or(live.PeriodSeconds, k8sProbePeriod), cmp.Or(live.FailureThreshold, k8sProbeFailureThreshold)
		if window := time.Duration(period*failures) * time.Second; failures < 2 || window < cfg.WaitTime {
			t.Errorf("the liveness probe restarts after %d failures %ds apart: want at least 2, over at least a long poll (%v)", failures, period, cfg.WaitTime)
		}
	}
	if a := pod.Metadata.Annotations; a["prometheus.io/scrape"] == "true" && (a["prometheus.io/port"] != port || a["prometheus.io/path"] != "/metrics") {
		t.Errorf("prometheus.io annotations %v: want port %s, path /metrics", a, port)
	}
	var monitor podMonitorSpec
	one("PodMonitor", &monitor)
	if !maps.Equal(monitor.Selector.MatchLabels, deployment.Selector.MatchLabels) || len(monitor.PodMetricsEndpoints) != 1 ||
		portNames[monitor.PodMetricsEndpoints[0].Port] != port || monitor.PodMetricsEndpoints[0].Path != "/metrics" {
		t.Errorf("the PodMonitor %+v does not scrape /metrics on port %s of the Deployment's pods", monitor, port)
	}

	// The grace period covers the drain, with listen's margin to release messages.
	grace := k8sTerminationGracePeriod
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	if drain := cfg.ShutdownTimeout + cfg.KillGrace + cloudformation.StopMargin; grace < drain {
		t.Errorf("terminationGracePeriodSeconds %v is shorter than --shutdown-timeout (%v) + --kill-grace (%v) + %v to release messages",
			grace, cfg.ShutdownTimeout, cfg.KillGrace, cloudformation.StopMargin)
	}

	// KEDA reads listen's queue, counts what runs, and wants a pod per --concurrency messages.
	var scaled scaledObjectSpec
	so := one("ScaledObject", &scaled)
	if so.Metadata.Namespace != d.Metadata.Namespace || scaled.ScaleTargetRef.Name != d.Metadata.Name ||
		scaled.ScaleTargetRef.Kind != "" && scaled.ScaleTargetRef.Kind != "Deployment" {
		t.Errorf("the ScaledObject %s/%s scales %+v, not the Deployment %s/%s", so.Metadata.Namespace, so.Metadata.Name,
			scaled.ScaleTargetRef, d.Metadata.Namespace, d.Metadata.Name)
	}
	if len(scaled.Triggers) != 1 || scaled.Triggers[0].Type != "aws-sqs-queue" {
		t.Fatalf("triggers %+v, want one aws-sqs-queue", scaled.Triggers)
	}
	trigger := scaled.Triggers[0]
	m := trigger.Metadata
	for key := range m {
		if !slices.Contains(sqsScalerKeys, key) {
			t.Errorf("aws-sqs-queue metadata %q is not one of %v", key, sqsScalerKeys)
		}
	}
	queueURL := m["queueURL"]
	if name := m["queueURLFromEnv"]; name != "" {
		queueURL = env[name]
		if m["queueURL"] != "" {
			t.Error("both queueURL and queueURLFromEnv: KEDA uses queueURL")
		}
	}
	if queueURL != cfg.QueueURL {
		t.Errorf("the scaler reads the queue %q, listen %q", queueURL, cfg.QueueURL)
	}
	if region := queueattr.RegionFromURL(cfg.QueueURL); m["awsRegion"] != region {
		t.Errorf("awsRegion %q, want the queue's region %q", m["awsRegion"], region)
	}
	if m["scaleOnInFlight"] != "true" {
		t.Errorf(`scaleOnInFlight %q, want "true": the messages listen runs are in flight`, m["scaleOnInFlight"])
	}
	if want := strconv.Itoa(cfg.Concurrency * cfg.BatchSize); m["queueLength"] != want {
		t.Errorf("queueLength %q, want %s: --concurrency (%d) × --batch-size (%d), the messages one pod holds", m["queueLength"], want, cfg.Concurrency, cfg.BatchSize)
	}
	var auth triggerAuthenticationSpec
	ta := one("TriggerAuthentication", &auth)
	if trigger.AuthenticationRef == nil || trigger.AuthenticationRef.Name != ta.Metadata.Name || ta.Metadata.Namespace != so.Metadata.Namespace ||
		auth.PodIdentity == nil || auth.PodIdentity.Provider != "aws" {
		t.Errorf("the trigger's authenticationRef %+v is not the TriggerAuthentication %s with podIdentity provider aws", trigger.AuthenticationRef, ta.Metadata.Name)
	}

	// The role's policy holds exactly the actions listen calls, on the queue and its DLQ.
	if len(blocks["json"]) != 1 {
		t.Fatalf("%d JSON blocks, want the IAM policy", len(blocks["json"]))
	}
	statements, err := cloudformation.ParseStatements([]byte(blocks["json"][0]))
	if err != nil {
		t.Fatalf("the IAM policy: %v", err)
	}
	arn := func(name string) string {
		account := strings.Split(strings.TrimPrefix(strings.TrimPrefix(cfg.QueueURL, "https://"), "http://"), "/")[1]
		return "arn:aws:sqs:" + queueattr.RegionFromURL(cfg.QueueURL) + ":" + account + ":" + name
	}
	queue := queueattr.NameFromURL(cfg.QueueURL)
	want := []cloudformation.Statement{
		{Sid: "WorkQueue", Effect: "Allow", Action: cloudformation.WorkQueueActions, Resource: []any{arn(queue)}},
		{Sid: "DeadLetterQueue", Effect: "Allow", Action: cloudformation.DeadLetterQueueActions, Resource: []any{arn(queue + "-dead-letter")}},
	}
	if !slices.EqualFunc(statements, want, func(a, b cloudformation.Statement) bool { return fmt.Sprint(a) == fmt.Sprint(b) }) {
		t.Errorf("IAM policy\n%+v\nwant\n%+v", statements, want)
	}
}

// fencedBlocks returns the fenced code blocks of a Markdown page by their language.
func fencedBlocks(page string) map[string][]string {
	blocks := map[string][]string{}
	var lang string
	var block []string
	inside := false
	for _, line := range strings.Split(page, "\n") {
		switch fence, ok := strings.CutPrefix(line, "```"); {
		case ok && !inside:
			lang, block, inside = strings.TrimSpace(fence), nil, true
		case ok && inside:
			blocks[lang] = append(blocks[lang], strings.Join(block, "\n"))
			inside = false
		case inside:
			block = append(block, line)
		}
	}
	return blocks
}

// listenFlags returns the flags in args (starting with "listen", up to "--") by name, with
// their values, failing the test for a flag listen does not have.
func listenFlags(t *testing.T, args []string) map[string]string {
	t.Helper()
	known := map[string]cli.Flag{}
	for _, f := range listenCommand(nil).Flags {
		for _, name := range f.Names() {
			known[name] = f
		}
	}
	flags := map[string]string{}
	for i := 1; i < len(args) && args[i] != "--"; i++ {
		name, value, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		f, ok := known[name]
		if !strings.HasPrefix(args[i], "-") || !ok {
			t.Errorf("%q is not a flag of listen", args[i])
			continue
		}
		if _, isBool := f.(*cli.BoolFlag); !hasValue && !isBool && i+1 < len(args) {
			i++
			value = args[i]
		}
		flags[f.Names()[0]] = value
	}
	return flags
}
