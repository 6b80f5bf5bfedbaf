package cloudformation

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/watchbot/watchbot/backoff"
	"github.com/watchbot/watchbot/internal/listenspec"
)

// logs adds the log group of the workers and of watchbot.
func (g *generator) logs() {
	g.add(ResLogGroup, Resource{Type: "AWS::Logs::LogGroup", Properties: &LogGroup{RetentionInDays: g.o.LogRetentionDays}})
}

// ListenArgs returns the arguments after the entry point: `listen`, its flags, `--` and the
// worker command. queueURL is the queue's URL (an intrinsic in the template).
func ListenArgs(o Options, queueURL any) []any {
	args := []any{
		"listen",
		"--queue-url", queueURL,
		"--max-attempts", strconv.Itoa(o.MaxAttempts),
		"--concurrency", strconv.Itoa(o.Concurrency),
		"--visibility-timeout", flagSeconds(o.VisibilityTimeout),
		"--shutdown-timeout", flagSeconds(o.ShutdownTimeout),
		"--kill-grace", flagSeconds(o.KillGrace),
		"--metrics", string(o.Metrics),
		// The stack's scale-in stops only unprotected tasks, and the task role allows the
		// agent's calls: on, rather than listen's auto, refuses to run without the agent.
		"--scale-in-protection", "on",
		// Where the container's health check asks /healthz.
		"--http-addr", o.HTTPAddr,
	}
	if o.Metrics != MetricsNone {
		args = append(args, "--metrics-namespace", o.MetricsNamespace)
	}
	if !o.Brake {
		args = append(args, "--brake", "off")
	}
	for _, t := range Tables(o) {
		if t.ListenFlag != "" {
			args = append(args, t.ListenFlag, Ref(t.LogicalID))
		}
	}
	args = append(args, payloadListenArgs(o)...)
	// The rest only when they differ from listen's defaults, so a template says what it chose.
	// Listen's zero heartbeat is half the lease, its zero job duration no limit and its zero
	// batch window none.
	if o.HeartbeatInterval != 0 {
		args = append(args, "--heartbeat-interval", o.HeartbeatInterval.String())
	}
	if o.MaxJobDuration != 0 {
		args = append(args, "--max-job-duration", o.MaxJobDuration.String())
	}
	if o.BatchSize != listenspec.DefaultBatchSize {
		args = append(args, "--batch-size", strconv.Itoa(o.BatchSize))
	}
	if o.BatchWindow != 0 {
		args = append(args, "--batch-window", o.BatchWindow.String())
	}
	b, d := o.Backoff, backoff.Default()
	if b.Base != d.Base {
		args = append(args, "--backoff-base", b.Base.String())
	}
	if b.Min != d.Min {
		args = append(args, "--backoff-min", b.Min.String())
	}
	if b.Max != d.Max {
		args = append(args, "--backoff-max", b.Max.String())
	}
	if b.Jitter != d.Jitter {
		args = append(args, "--backoff-jitter", string(b.Jitter))
	}
	for _, a := range o.LimitArgs {
		args = append(args, a)
	}
	args = append(args, "--")
	for _, c := range o.Command {
		args = append(args, c)
	}
	return args
}

// listenArgs is ListenArgs for the stack's queues: the first as --queue-url, then each other
// queue as --queue-url again, in priority order, with its --queue-weight when not 1, and
// --queue-policy when strict.
func (g *generator) listenArgs() []any {
	qs := g.workQueues()
	args := ListenArgs(g.o, Ref(qs[0].id))
	if len(qs) == 1 {
		return args
	}
	var more []any
	for _, q := range qs[1:] {
		more = append(more, "--queue-url", Ref(q.id))
	}
	for _, q := range qs {
		if q.weight != 1 {
			more = append(more, "--queue-weight", sub(q.name+"="+strconv.Itoa(q.weight)))
		}
	}
	if g.o.QueuePolicy == QueuePolicyStrict {
		more = append(more, "--queue-policy", QueuePolicyStrict)
	}
	at := slices.Index(args, any("--queue-url")) + 2
	return slices.Concat(args[:at], more, args[at:])
}

// task adds the task definition: one read-only container that runs watchbot listen and the
// worker command, with a scratch volume for their files.
func (g *generator) task() {
	env := []KeyValuePair{{Name: "AWS_REGION", Value: Ref("AWS::Region")}}
	for _, name := range slices.Sorted(maps.Keys(g.o.Environment)) {
		env = append(env, KeyValuePair{Name: name, Value: g.o.Environment[name]})
	}
	if _, set := g.o.Environment["TMPDIR"]; !set {
		env = append(env, KeyValuePair{Name: "TMPDIR", Value: ScratchPath})
	}
	env = append(env, g.o.otelEnvironment(sub(g.name("")))...)
	for _, t := range Tables(g.o) {
		if t.Env != "" {
			env = append(env, KeyValuePair{Name: t.Env, Value: GetAtt(t.LogicalID, "Arn")})
		}
	}
	slices.SortFunc(env, func(a, b KeyValuePair) int { return strings.Compare(a.Name, b.Name) })
	g.add(ResTaskDefinition, Resource{Type: "AWS::ECS::TaskDefinition", Properties: &TaskDefinition{
		Family:                  sub(g.name("")),
		Cpu:                     strconv.Itoa(g.o.CPU),
		Memory:                  strconv.Itoa(g.o.Memory),
		NetworkMode:             "awsvpc",
		RequiresCompatibilities: []string{"FARGATE"},
		ExecutionRoleArn:        GetAtt(ResExecutionRole, "Arn"),
		TaskRoleArn:             GetAtt(ResTaskRole, "Arn"),
		Volumes:                 []Volume{{Name: scratchVolume}},
		ContainerDefinitions: []ContainerDefinition{{
			Name:                   ContainerName,
			Image:                  Ref(ParamContainerImage),
			Essential:              true,
			EntryPoint:             []string{WatchbotPath},
			Command:                g.listenArgs(),
			Environment:            env,
			ReadonlyRootFilesystem: true,
			MountPoints:            []MountPoint{{SourceVolume: scratchVolume, ContainerPath: ScratchPath, ReadOnly: false}},
			StopTimeout:            seconds(g.o.StopTimeout()),
			HealthCheck:            healthCheck(g.o.HTTPAddr),
			LogConfiguration: &LogConfiguration{LogDriver: "awslogs", Options: map[string]any{
				"awslogs-group":         Ref(ResLogGroup),
				"awslogs-region":        Ref("AWS::Region"),
				"awslogs-stream-prefix": "watchbot",
				// A slow log service must never block the worker's stdout.
				"mode":            "non-blocking",
				"max-buffer-size": "25m",
			}},
		}},
	}})
}

// The container's health check runs `watchbot health`, which asks listen's /healthz. ECS
// allows an interval of 5 to 300 s, a timeout of 2 to 60 s, 1 to 10 retries and a start
// period of 0 to 300 s, and stops and replaces a service's task whose essential container
// turns unhealthy (Amazon ECS API Reference, "HealthCheck"; AWS CloudFormation User Guide,
// "AWS::ECS::TaskDefinition HealthCheck"). A replaced task drains, and cuts the jobs that
// outlast --shutdown-timeout, so a false alarm costs work: listen's /healthz answers 200
// during the startup checks and through the 20 s long poll, and reports unhealthy only when
// watchbot has been stuck for tens of seconds (a receive 30 s past its long poll, receives
// failing for --health-grace, a stalled ack or heartbeat). These values only keep a hiccup
// of the check itself from counting.
const (
	// HealthCheckInterval: a deployment counts a new task toward the minimum healthy percent
	// once its health check has passed (Amazon ECS API Reference, "DeploymentConfiguration",
	// minimumHealthyPercent), and the first check runs one interval after the container
	// starts; 15 s keeps that wait short, for one short-lived process every 15 s.
	HealthCheckInterval = 15 * time.Second
	// HealthCheckTimeout leaves `watchbot health` its own 3 s to give up and say why, plus
	// 2 s to start on a task whose workers hold the CPU.
	HealthCheckTimeout = 5 * time.Second
	// HealthCheckRetries: three failures in a row, 45 s on top of listen's own judgement,
	// before ECS replaces the task; one slow check never does.
	HealthCheckRetries = 3
	// HealthCheckStartPeriod covers the container's start until listen binds --http-addr:
	// failures before then do not count. listen binds before its startup checks, which
	// answer 200 (alive, not ready), so a long start period is not needed.
	HealthCheckStartPeriod = 30 * time.Second
)

// healthCheck is the container's health check, asking the listen that serves addr.
func healthCheck(addr string) *HealthCheck {
	return &HealthCheck{
		Command:     []string{"CMD", WatchbotPath, "health", "--http-addr", addr},
		Interval:    seconds(HealthCheckInterval),
		Timeout:     seconds(HealthCheckTimeout),
		Retries:     HealthCheckRetries,
		StartPeriod: seconds(HealthCheckStartPeriod),
	}
}

// service adds the Fargate service that runs the task.
func (g *generator) service() {
	g.add(ResService, Resource{Type: "AWS::ECS::Service", Properties: &Service{
		Cluster:        Ref(ParamCluster),
		LaunchType:     "FARGATE",
		TaskDefinition: Ref(ResTaskDefinition),
		NetworkConfiguration: NetworkConfiguration{AwsvpcConfiguration: AwsvpcConfiguration{
			AssignPublicIp: Ref(ParamAssignPublicIP),
			Subnets:        Ref(ParamSubnets),
			SecurityGroups: Ref(ParamSecurityGroups),
		}},
		DeploymentConfiguration: DeploymentConfiguration{MaximumPercent: 200, MinimumHealthyPercent: 100},
	}})
}
