// Package scalesim simulates the autoscaling of the stack `watchbot template` generates, on
// paper, to compare scaling policies before anyone pays for them: the queue, the Fargate
// tasks and their worker slots, the metrics CloudWatch aggregates, the alarms, Application
// Auto Scaling's step and target tracking arithmetic, and ECS starting and stopping tasks
// with or without scale-in protection. It reads every policy value from a template generated
// by the cloudformation package (limits, targets, cooldowns, steps, alarms, and the metric
// math, which it evaluates), so the simulation follows the template; what AWS does with
// those values is written here, with the AWS documentation it follows.
//
// The model is deterministic: simulated seconds, a seeded random choice of which task's
// receive gets a message, no wall clock. Its results are the table and charts in
// docs/template.md, which `go test ./internal/testing/scalesim -update` (make scalesim)
// rewrites and the tests check.
package scalesim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/cloudformation"
	"github.com/watchbot/watchbot/supervisor"
)

// The world around the template, as the model assumes it.
const (
	// period is CloudWatch's period, the one the template's metrics use.
	period = 60
	// metricDelay is how long after its period ends a datapoint can be read by an alarm
	// (SQS metrics and embedded-metric-format log lines both arrive within about a minute).
	metricDelay = 60
	// sqsSample is the second of each period at which SQS samples the queue's depth.
	sqsSample = 30
	// taskStart is the time from ECS starting a Fargate task to listen's first receive:
	// provisioning, the image pull and the start, about a minute.
	taskStart = 60
	// seed makes the choice of the task whose receive gets each message repeatable. SQS hands
	// a message to one of the waiting long polls; the model picks one at random.
	seed = 20240501
)

// Listen's settings the template leaves at their defaults.
var (
	// ProtectionIdle is how long listen keeps its task protected after its last job
	// (--scale-in-protection-idle).
	ProtectionIdle = supervisor.DefaultConfig().ProtectionIdle
	// gaugeInterval is how often a task publishes its gauges, from its start: the metrics
	// interval, at whose end the slots and busy slots of the window are sampled.
	gaugeInterval = seconds(alarms.DefaultPublisherConfig().Interval)
)

// Load is the work sent to the queue.
type Load struct {
	Name string
	// Summary says what the load is, for the table.
	Summary string
	// Job is how long every message's job runs.
	Job time.Duration
	// Burst messages are sent at once at the start.
	Burst int
	// Rate is the messages sent per second at second t, until Duration.
	Rate     func(t int) float64
	Duration time.Duration
	// Horizon is how long the simulation runs: long enough to drain and scale in.
	Horizon time.Duration
}

// Policy is one way of scaling: the template generated with Metrics (backlog scaling with
// watchbot's metrics, visible scaling with --metrics none) and listen with or without
// scale-in protection, which it keeps for ProtectionIdle after a task's last job.
type Policy struct {
	Name           string
	Metrics        cloudformation.MetricsMode
	Protection     bool
	ProtectionIdle time.Duration
}

// Result is what a simulation measured.
type Result struct {
	Load, Policy string
	// Tasks is the number of tasks ECS runs or starts or is stopping, each minute.
	Tasks []int
	// TaskSeconds is the time tasks ran or started, which Fargate bills.
	TaskSeconds int
	Peak        int
	// Cut counts jobs stopped by a scale-in before they finished (their messages go back to
	// the queue and run again).
	Cut int
	// Drained is how long after the last message was sent the queue was first empty with
	// nothing in flight; -1 if it never was.
	Drained int
	// MaxWait is the longest a message waited from its send to the start of its job.
	MaxWait    int
	Sent, Done int
	// Activity lists the changes of the desired count.
	Activity []Activity
}

// Run simulates load under policy, with the stack generated from o (Metrics set by policy).
func Run(load Load, policy Policy, o cloudformation.Options) (Result, error) {
	o = withMetrics(o, policy.Metrics)
	tpl, err := cloudformation.Generate(o)
	if err != nil {
		return Result{}, err
	}
	w, err := newWorld(load, policy, o, tpl)
	if err != nil {
		return Result{}, err
	}
	return w.run()
}

// newWorld returns the simulation of load under policy with the stack tpl generated from o,
// at its start: no task, the desired count at the minimum.
func newWorld(load Load, policy Policy, o cloudformation.Options, tpl *cloudformation.Template) (*world, error) {
	s, err := newScaler(tpl, o)
	if err != nil {
		return nil, err
	}
	s.desired = s.min
	return &world{
		load: load, policy: policy, scaler: s, rng: rand.New(rand.NewPCG(seed, seed)),
		concurrency: o.Concurrency, job: seconds(load.Job), shutdown: seconds(o.ShutdownTimeout), idle: seconds(policy.ProtectionIdle),
		result: Result{Load: load.Name, Policy: policy.Name, Drained: -1},
	}, nil
}

func seconds(d time.Duration) int { return int(d / time.Second) }

func (w *world) run() (Result, error) {
	for t := range seconds(w.load.Horizon) {
		if err := w.step(t); err != nil {
			return Result{}, err
		}
	}
	w.result.Activity = w.scaler.activity
	return w.result, nil
}

// task is one ECS task running listen with concurrency worker slots.
type task struct {
	started int
	ready   int // listen receives from here
	// stopping is set when ECS stopped the task (SIGTERM), at stopAt.
	stopping bool
	stopAt   int
	gone     bool
	// jobs holds each busy slot's message (its send time) and end.
	jobs []job
	// lastBusy is the last second the task held a message.
	lastBusy int
	// busySeconds adds the busy slots of each second of the current gauge interval.
	busySeconds int
	nextGauges  int
}

type job struct{ sent, end int }

func (k *task) running(t int) bool { return !k.gone && t >= k.ready }

// protected reports whether listen has the task protected from scale-in: while it holds a
// message and idle seconds after.
func (k *task) protected(t, idle int) bool {
	return k.running(t) && !k.stopping && (len(k.jobs) > 0 || t-k.lastBusy < idle)
}

type world struct {
	load        Load
	policy      Policy
	scaler      *scaler
	cw          cloudWatch
	rng         *rand.Rand
	concurrency int
	job         int
	shutdown    int
	idle        int

	tasks   []*task
	open    []*task // the tasks with a free slot, reused each second
	visible queue
	arrived float64
	result  Result
}

// queue holds the send times of the visible messages, oldest first.
type queue struct {
	sent []int
	head int
}

func (q *queue) len() int      { return len(q.sent) - q.head }
func (q *queue) push(sent int) { q.sent = append(q.sent, sent) }

func (q *queue) pop() int {
	sent := q.sent[q.head]
	q.head++
	if q.head > 1024 && q.head > len(q.sent)/2 {
		q.sent = append(q.sent[:0], q.sent[q.head:]...)
		q.head = 0
	}
	return sent
}

func (w *world) inFlight() int {
	n := 0
	for _, k := range w.tasks {
		n += len(k.jobs)
	}
	return n
}

func (w *world) step(t int) error {
	w.arrive(t)
	w.work(t)
	w.receive(t)
	w.publish(t)
	if t%period == 0 {
		// The newest period whose datapoint an alarm can read.
		last := (t-metricDelay)/period - 1
		for _, a := range w.scaler.alarms {
			if err := a.evaluate(&w.cw, t, last); err != nil {
				return err
			}
		}
	}
	w.reconcile(t)
	w.account(t)
	return nil
}

func (w *world) arrive(t int) {
	n := 0
	if t == 0 {
		n = w.load.Burst
	}
	if w.load.Rate != nil && t < int(w.load.Duration/time.Second) {
		w.arrived += w.load.Rate(t)
		whole := math.Floor(w.arrived + 1e-9)
		w.arrived -= whole
		n += int(whole)
	}
	for range n {
		w.visible.push(t)
	}
	w.result.Sent += n
}

// work ends the jobs due now, and the jobs of a stopped task that outlived listen's
// --shutdown-timeout: cut, their messages visible again.
func (w *world) work(t int) {
	for _, k := range w.tasks {
		if k.gone {
			continue
		}
		if !k.stopping && !slices.ContainsFunc(k.jobs, func(j job) bool { return j.end <= t }) {
			continue
		}
		kept := k.jobs[:0]
		for _, j := range k.jobs {
			switch {
			case j.end <= t:
				w.result.Done++
			case k.stopping && t >= k.stopAt+w.shutdown:
				w.result.Cut++
				w.visible.push(j.sent)
			default:
				kept = append(kept, j)
			}
		}
		k.jobs = kept
		if k.stopping && len(k.jobs) == 0 {
			k.gone = true
		}
	}
}

// receive hands the visible messages, oldest first, to the receives of tasks with a free
// slot, a task chosen at random for each.
func (w *world) receive(t int) {
	if w.visible.len() == 0 {
		return
	}
	open := w.open[:0]
	for _, k := range w.tasks {
		if k.running(t) && !k.stopping && len(k.jobs) < w.concurrency {
			open = append(open, k)
		}
	}
	defer func() { w.open = open[:0] }()
	for w.visible.len() > 0 && len(open) > 0 {
		i := w.rng.IntN(len(open))
		k := open[i]
		sent := w.visible.pop()
		k.jobs = append(k.jobs, job{sent: sent, end: t + w.job})
		w.result.MaxWait = max(w.result.MaxWait, t-sent)
		if len(k.jobs) == w.concurrency {
			open[i] = open[len(open)-1]
			open = open[:len(open)-1]
		}
	}
}

// publish records the metrics: each task's gauges once a minute from its start, the
// queue's depth once a minute.
func (w *world) publish(t int) {
	for _, k := range w.tasks {
		if !k.running(t) {
			continue
		}
		if len(k.jobs) > 0 {
			k.lastBusy = t
		}
		k.busySeconds += len(k.jobs)
		if t == k.nextGauges {
			w.cw.put(srcSlots, t, float64(w.concurrency))
			w.cw.put(srcBusy, t, float64(k.busySeconds)/float64(gaugeInterval))
			k.busySeconds = 0
			k.nextGauges += gaugeInterval
		}
	}
	if t%period == sqsSample {
		w.cw.put(srcVisible, t, float64(w.visible.len()))
		w.cw.put(srcNotVisible, t, float64(w.inFlight()))
	}
}

// reconcile is the ECS service scheduler: it starts tasks up to the desired count, and stops
// tasks above it: those still starting first, then running ones, newest first, skipping
// protected tasks (ECS knows nothing of their jobs; only protection keeps a busy task).
func (w *world) reconcile(t int) {
	n := 0
	for _, k := range w.tasks {
		if !k.gone && !k.stopping {
			n++
		}
	}
	if n == w.scaler.desired {
		return
	}
	active := make([]*task, 0, n)
	for _, k := range w.tasks {
		if !k.gone && !k.stopping {
			active = append(active, k)
		}
	}
	for ; n < w.scaler.desired; n++ {
		w.tasks = append(w.tasks, &task{started: t, ready: t + taskStart, lastBusy: math.MinInt32, nextGauges: t + taskStart + gaugeInterval})
	}
	excess := len(active) - w.scaler.desired
	for pass := 0; pass < 2 && excess > 0; pass++ {
		for i := len(active) - 1; i >= 0 && excess > 0; i-- {
			k := active[i]
			starting := !k.running(t)
			if k.stopping || starting != (pass == 0) || (w.policy.Protection && k.protected(t, w.idle)) {
				continue
			}
			k.stopping, k.stopAt = true, t
			if starting || len(k.jobs) == 0 {
				k.gone = true
			}
			excess--
		}
	}
}

func (w *world) account(t int) {
	live := 0
	for _, k := range w.tasks {
		if !k.gone {
			live++
		}
	}
	if live < len(w.tasks) {
		w.tasks = slices.DeleteFunc(w.tasks, func(k *task) bool { return k.gone })
	}
	w.result.TaskSeconds += live
	w.result.Peak = max(w.result.Peak, live)
	if t%period == 0 {
		w.result.Tasks = append(w.result.Tasks, live)
	}
	arrivalsEnd := seconds(w.load.Duration)
	if w.result.Drained < 0 && t >= arrivalsEnd && w.visible.len() == 0 && w.inFlight() == 0 {
		w.result.Drained = t - arrivalsEnd
	}
}

func (r Result) String() string {
	return fmt.Sprintf("%s/%s: peak %d, %.0f task-min, drained %ds, max wait %ds, cut %d, %d/%d done",
		r.Load, r.Policy, r.Peak, float64(r.TaskSeconds)/60, r.Drained, r.MaxWait, r.Cut, r.Done, r.Sent)
}

// withMetrics returns o with metrics. Without watchbot's metrics the stack scales on the
// visible messages alone: the backlog's settings do not apply, and the generator refuses
// them, so they go back to their defaults.
func withMetrics(o cloudformation.Options, metrics cloudformation.MetricsMode) cloudformation.Options {
	o.Metrics = metrics
	if metrics == cloudformation.MetricsNone {
		def := cloudformation.DefaultOptions()
		o.ExpectedJobDuration, o.TargetLatency = def.ExpectedJobDuration, def.TargetLatency
	}
	return o
}
