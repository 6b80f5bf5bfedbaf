package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/internal/awsenv"
	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/internal/setting"
	"github.com/watchbot/watchbot/internal/tracing"
	"github.com/watchbot/watchbot/limits"
)

// sqsAPI is the part of the SQS client the supervisor calls.
type sqsAPI interface {
	queueattr.API
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
	DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
	ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
	ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

var _ sqsAPI = (*sqs.Client)(nil)

// Deps are what Run needs from outside: the SQS client, the logger, the metrics recorder,
// and the channel that says "stop now".
type Deps struct {
	// SQS is the client, usually *sqs.Client.
	SQS sqsAPI
	// Logger receives every log line; nil discards them.
	Logger *slog.Logger
	// Metrics receives measurements; nil is alarms.Discard.
	Metrics alarms.Recorder
	// Abort, when closed, ends a drain at once: workers are killed, their messages released.
	Abort <-chan struct{}
	// Random returns numbers in [0, 1) for jitter; nil uses math/rand/v2.
	Random func() float64
	// Load, when set, is kept up to date with the supervisor's slots and busy slots, for the
	// metrics gauges; nil keeps a private one.
	Load *Load
	// Health, when set, is kept up to date with whether the supervisor makes progress and
	// takes work, for health and readiness endpoints; nil keeps a private one.
	Health *Health
	// Protection, when set, is the ECS agent's task scale-in protection endpoint: the task
	// is protected while watchbot holds messages and for cfg.ProtectionIdle after, and the
	// protection is dropped once a stop's drain has finished.
	Protection ProtectionAPI
	// Dedupe, when set, is the table of duplicate suppression (cfg.Dedupe): each message's
	// key is claimed there before it runs. It goes with cfg.Dedupe.Table; nil is off.
	Dedupe DedupeAPI
	// Tenants, when set, counts each tenant's runs and waits (its MessageGroupId), for
	// /metrics and status (docs/queues.md); nil counts none.
	Tenants *Tenants
	// S3 fetches and deletes the payloads of pointer messages (cfg.Payload). It goes with
	// cfg.Payload.Buckets; nil is off.
	S3 PayloadAPI
	// Tracer, when enabled, records a span per run (docs/tracing.md); nil records none. The
	// worker receives the message's trace context either way.
	Tracer *tracing.Provider

	// Limiter, when set, is the limiter built from cfg.Limits.Fleet, which Run runs until its
	// drain is over (the caller may read its Snapshot meanwhile); nil builds one that holds
	// the limits per task.
	Limiter *limits.Limiter
	// PerQueue, when listen serves several queues (Config.Queues), gives queues by name their
	// own gauges and recorder: Load and Health above then go unused. A queue missing from it
	// keeps private ones and records to Metrics.
	PerQueue map[string]QueueDeps

	// spawn stands in for runWorker in tests; nil runs real processes.
	spawn func(context.Context, workerSpec, *slog.Logger) workerRun
}

// Supervisor runs one listen loop: it wires the receive loop, the scheduler (owned by the
// loop goroutine), the leaser and the runner together, and stops them in one bounded order.
// Build it with Run.
type Supervisor struct {
	cfg     Config
	api     sqsAPI
	log     *slog.Logger
	metrics alarms.Recorder
	random  func() float64
	fifo    bool

	acks *acker
	// cut is the stop's last moment, which every call to SQS and DynamoDB obeys.
	cut       *cutoff
	leaser    *leaser
	runner    *runner
	load      *Load
	health    *Health
	brake     *brake
	protector *protector // nil without Deps.Protection
	// limiter holds the limits and pauses; gate is the loop's use of it. stopLimits ends the
	// limiter's Run once no run or hand-back is under way.
	limiter    *limits.Limiter
	gate       *startGate
	stopLimits context.CancelFunc
	// limiterShared: the queues of a listen on several share the limiter, which runQueues
	// runs; this supervisor only uses it. limitsChanged receives when a start the limiter
	// refused may now succeed: the limiter's Changed, or with several queues this queue's
	// copy of it (the limiter's channel wakes one receiver only).
	limiterShared bool
	limitsChanged <-chan struct{}
	// shared, with several queues, is this queue's place in the slots they share; nil when
	// it has the slots to itself.
	shared *sharedSlots

	// pollCtx carries the calls a receive makes while stopping; it ends when the drain gives
	// up. recvCtx carries the receives themselves: cancelReceive ends it once a stop finds
	// nothing held, so an idle watchbot does not wait out its long poll.
	pollCtx, recvCtx context.Context
	cancelReceive    context.CancelFunc
	// events carries what runs report to the loop; lost the held jobs the heartbeat gives up
	// on, as a mailbox, since the heartbeat must never wait for the loop; loopDone is closed
	// when the loop has returned.
	events   chan runEvent
	lost     *mailbox[*job]
	loopDone chan struct{}
	// runs owns the run goroutines, handBacks the goroutines handing messages back to SQS.
	runs      runPool
	handBacks sync.WaitGroup
	stopOnce  sync.Once
}

// runEvent is a run's report to the loop: its worker ended after took (its slot is free), or
// it has finished, each message settled as disps says.
type runEvent struct {
	run      []*job
	took     time.Duration
	disps    []disposition
	finished bool
}

// Run checks the queue and the command, then receives and supervises until ctx is done, and
// drains: running workers may finish within cfg.ShutdownTimeout, then they are stopped and
// their messages released. It returns nil after a clean drain, a setting.Error when a startup
// check fails (before any message is received), and ErrAborted when deps.Abort closed.
func Run(ctx context.Context, cfg Config, deps Deps) error {
	if err := PlatformError("listen", runtime.GOOS); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if deps.SQS == nil {
		return errors.New("supervisor: no SQS client")
	}
	if (cfg.Dedupe.Table != "") != (deps.Dedupe != nil) {
		return errors.New("supervisor: Config.Dedupe.Table and Deps.Dedupe go together")
	}
	if cfg.Limits.Fleet.Table != "" && deps.Limiter == nil {
		return errors.New("supervisor: Config.Limits.Fleet.Table needs Deps.Limiter, built on the table")
	}
	if cfg.Payload.enabled() != (deps.S3 != nil) {
		return errors.New("supervisor: Config.Payload.Buckets and Deps.S3 go together")
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.Metrics == nil {
		deps.Metrics = alarms.Discard
	}
	if deps.Random == nil {
		deps.Random = rand.Float64
	}
	if deps.spawn == nil {
		deps.spawn = runWorker
	}
	if len(cfg.Queues.More) > 0 {
		return runQueues(ctx, cfg, deps)
	}
	s, err := prepare(ctx, cfg, deps)
	if s != nil {
		defer s.runner.removeWorkDirs()
	}
	if err != nil {
		return err
	}
	if deps.Protection != nil {
		s.protector = newProtector(cfg, deps, s.load, func() bool { ok, _ := s.health.Check(time.Now()); return ok }, s.cut)
	}
	return s.start(ctx, deps.Abort)
}

// newProtector returns the protector of the task's scale-in protection, following load.
func newProtector(cfg Config, deps Deps, load activity, healthy func() bool, cut *cutoff) *protector {
	return &protector{api: deps.Protection, load: load, policy: newProtectionPolicy(cfg),
		metrics: deps.Metrics, log: deps.Logger.With("component", "scale-in-protection"), random: deps.Random,
		healthy: healthy, cut: cut}
}

// prepare builds the supervisor of cfg's queue (cfg.QueueURL) and runs its startup checks.
// A supervisor it returns, with an error or not, has work directories to remove.
func prepare(ctx context.Context, cfg Config, deps Deps) (*Supervisor, error) {
	if deps.Load == nil {
		deps.Load = NewLoad()
	}
	if deps.Health == nil {
		deps.Health = NewHealth()
	}
	s := &Supervisor{cfg: cfg, api: deps.SQS, log: deps.Logger, metrics: deps.Metrics, random: deps.Random, load: deps.Load, health: deps.Health,
		events: make(chan runEvent), lost: newMailbox[*job](), loopDone: make(chan struct{}), cut: newCutoff()}
	if deps.Limiter == nil {
		lim, err := limits.New(cfg.Limits.Fleet, nil, time.Now, s.log.With("component", "limits"))
		if err != nil {
			return nil, err
		}
		deps.Limiter = lim
	}
	s.limiter = deps.Limiter
	s.limitsChanged = s.limiter.Changed()
	s.gate = newStartGate(s.limiter, cfg.Limits, deps.Metrics)
	s.acks = newAcker(s.api, cfg.QueueURL, cfg.AckLinger, cfg.AckTimeout)
	s.acks.health, s.acks.cut = s.health, s.cut
	slots := cfg.Concurrency
	if cfg.Once {
		slots = 1
	}
	s.brake = newBrake(cfg.Brake, slots, s.log.With("component", "brake"))
	s.runner = &runner{cfg: cfg, api: s.api, acks: s.acks, brake: s.brake, limiter: s.limiter, metrics: deps.Metrics, log: s.log, random: deps.Random, spawn: deps.spawn, cut: s.cut,
		tracer: deps.Tracer, queueName: queueattr.NameFromURL(cfg.QueueURL), tenants: deps.Tenants, s3: deps.S3}
	if cfg.HTTP.URL != "" {
		s.runner.http = newHTTPWorker(cfg.HTTP, cfg.QueueURL, slots)
	}
	s.leaser = newLeaser(cfg, s.acks, s.log, s.giveUp)
	s.leaser.health = s.health
	s.runner.dedupe = newDeduper(cfg, deps.Dedupe, deps.Metrics, s.log, deps.Random)
	if s.runner.dedupe != nil {
		s.runner.dedupe.cut = s.cut
	}
	s.leaser.dedupe = s.runner.dedupe
	if err := s.runner.makeWorkDirs(); err != nil {
		return nil, err
	}
	if err := s.check(ctx); err != nil {
		return s, err
	}
	s.runner.baseEnv = inheritedEnv(os.Environ())
	return s, nil
}

// start logs what the supervisor serves, and runs it until the drain is over.
func (s *Supervisor) start(ctx context.Context, abort <-chan struct{}) error {
	cfg := s.cfg
	s.log.Info("watchbot listening", "queue_url", cfg.QueueURL, "fifo", s.fifo, "concurrency", cfg.Concurrency,
		"max_attempts", s.runner.maxAttempts, "dead_letter_queue", s.runner.dlqURL, worker(cfg, s.runner.command))
	if s.fifo {
		s.log.Info("FIFO queue: messages of one group run one at a time, in order; groups run side by side; failed messages are retried in place")
	}
	if s.protector != nil {
		s.log.Info("ECS task scale-in protection: on while messages are held", "idle_hold", cfg.ProtectionIdle.String(),
			"expires_in", s.protector.policy.expiry.String())
	}
	s.health.start(cfg, s.leaser.interval)
	return s.run(ctx, abort)
}

// worker is the log attribute naming the worker: its command, or its URL.
func worker(cfg Config, command []string) slog.Attr {
	if cfg.HTTP.URL != "" {
		return slog.String("http_worker", cfg.HTTP.URL)
	}
	return slog.Any("command", command)
}

// check runs the startup checks, before anything is received: the command, the directories,
// the queue and its redrive policy. It fills in what the runner learns from them.
func (s *Supervisor) check(ctx context.Context) error {
	r := s.runner
	if s.cfg.HTTP.URL == "" {
		command, err := resolveCommand(s.cfg.Command)
		if err != nil {
			return err
		}
		r.command = command
	}
	for _, v := range s.cfg.Volumes {
		if fi, err := os.Stat(v); err != nil || !fi.IsDir() {
			return setting.Refuse(listenspec.SettingVolumes, v, "is not a directory")
		}
	}
	info, err := queueattr.Describe(ctx, s.api, s.cfg.QueueURL)
	if err := queueRefusal(err, s.cfg.QueueURL); err != nil {
		return err
	}
	if err != nil {
		return setting.Error{Setting: setting.QueueURL, Reason: "queue not reachable", Err: err}
	}
	s.fifo, r.fifo = info.FIFO, info.FIFO
	switch {
	case info.Redrive != nil:
		if arn, err := queueattr.ParseARN(info.Redrive.DeadLetterTargetARN); err == nil && info.FIFO && !strings.HasSuffix(arn.Resource, ".fifo") {
			return setting.Refuse(setting.QueueURL, nil, fmt.Sprintf("FIFO queue %s has a dead-letter queue that is not FIFO (%s); a FIFO queue needs a FIFO dead-letter queue",
				queueattr.NameFromURL(s.cfg.QueueURL), arn.Resource))
		}
		r.maxReceiveCount = info.Redrive.MaxReceiveCount
		r.dlqURL, err = queueattr.DeadLetterQueue(ctx, s.api, info)
		if noSuchQueue(err) {
			return setting.Refuse(setting.QueueURL, nil, fmt.Sprintf("the dead-letter queue that the queue's redrive policy names (%s) %s",
				info.Redrive.DeadLetterTargetARN, noSuchQueueReason))
		}
		if err != nil {
			return setting.Error{Setting: setting.QueueURL, Err: err}
		}
		r.maxAttempts = s.cfg.MaxAttempts
		if r.maxAttempts == 0 {
			r.maxAttempts = r.maxReceiveCount
		}
		if r.maxAttempts > r.maxReceiveCount {
			return setting.Refuse(listenspec.SettingMaxAttempts, r.maxAttempts, fmt.Sprintf("is above the queue's maxReceiveCount (%d): the redrive policy would move messages to the DLQ first", r.maxReceiveCount))
		}
	case s.cfg.AllowNoDLQ:
		r.maxAttempts = s.cfg.MaxAttempts
		if r.maxAttempts == 0 {
			r.maxAttempts = 10
		}
		s.log.Warn("the queue has no redrive policy: dead-lettered messages will be deleted and recorded only in this log")
	default:
		return setting.Refuse(setting.QueueURL, nil, "the queue has no redrive policy (no dead-letter queue): poison messages would retry forever; add one, or pass --allow-no-dlq")
	}
	if err := r.dedupe.check(ctx, s.cfg.Dedupe, info); err != nil {
		return err
	}
	if r.http != nil {
		// Last: the application may come up while the queue was checked.
		return r.http.waitReady(ctx, s.log)
	}
	return nil
}

// queueRefusal is listen's answer to a failed first call about queueURL, explained as the
// operator commands explain theirs: a failure that only changing the configuration mends (no
// such queue, a permission the role lacks, credentials) stops the start as a refused setting;
// an endpoint that does not answer is a failed call. nil when err is not one of these.
func queueRefusal(err error, queueURL string) error {
	qe := awsenv.ExplainSQS(err, queueURL, "docs/listen.md#iam-permissions")
	switch {
	case qe == nil:
		return nil
	case qe.Cause == awsenv.CauseUnreachable:
		return setting.Error{Err: qe}
	}
	return setting.Refuse("", nil, qe.Error())
}

// noSuchQueueReason is why a queue that SQS does not know is refused: the setting is wrong,
// not the service down.
const noSuchQueueReason = "does not exist in this account and region"

// noSuchQueue reports whether err says the queue does not exist, whichever name SQS gave the
// error (QueueDoesNotExist, AWS.SimpleQueueService.NonExistentQueue): the SDK's type holds both.
func noSuchQueue(err error) bool {
	var missing *types.QueueDoesNotExist
	return errors.As(err, &missing)
}

// run starts the acknowledger, the heartbeat, the receive loop and the loop, waits for a
// stop (or for --once to finish), drains, and stops everything in one order: the loop ends
// once no run or receive is under way; then the heartbeat, then the hand-backs, then the
// acknowledger, which sends what is pending before it returns.
func (s *Supervisor) run(ctx context.Context, abort <-chan struct{}) error {
	// Work outlives ctx (the stop request): jobs and acks run on base, which ends only when
	// the drain is over.
	base := context.WithoutCancel(ctx)
	jobsCtx, stopJobs := context.WithCancelCause(base)
	defer stopJobs(nil)
	pollCtx, stopPolls := context.WithCancel(base)
	defer stopPolls()
	s.pollCtx = pollCtx
	recvCtx, stopReceives := context.WithCancel(pollCtx)
	defer stopReceives()
	s.recvCtx, s.cancelReceive = recvCtx, stopReceives

	var owned sync.WaitGroup
	owned.Go(func() { s.acks.run(base) })
	limitsCtx, stopLimits := context.WithCancel(base)
	defer stopLimits()
	s.stopLimits = stopLimits
	if !s.limiterShared {
		owned.Go(func() {
			if err := s.limiter.Run(limitsCtx); err != nil {
				s.log.Error("limits stopped", "error", err)
			}
		})
	}
	protectCtx, stopProtection := context.WithCancel(base)
	defer stopProtection()
	if s.protector != nil {
		owned.Go(func() { s.protector.run(protectCtx) })
	}
	hbCtx, stopHeartbeat := context.WithCancel(base)
	var heartbeat sync.WaitGroup
	heartbeat.Go(func() { s.leaser.run(hbCtx) })
	asks := make(chan receiveAsk)
	answers := make(chan []types.Message)
	owned.Go(func() { s.receiveLoop(ctx, asks, answers) })
	var received int
	owned.Go(func() {
		defer close(s.loopDone)
		received = s.loop(ctx, jobsCtx, asks, answers)
	})

	// --once: the one job runs to its end unless a stop is requested.
	select {
	case <-s.loopDone:
	case <-ctx.Done():
	}
	if n := len(s.leaser.list()); n > 0 && ctx.Err() != nil {
		s.log.Info("stop requested: draining running jobs", "held", n, "shutdown_timeout", s.cfg.ShutdownTimeout.String())
	}
	aborted := false
	if ctx.Err() != nil {
		s.cut.set(time.Now().Add(s.cfg.ShutdownTimeout + s.cfg.KillGrace + releaseSlack))
	}
	window := time.NewTimer(s.cfg.ShutdownTimeout)
	defer window.Stop()
	select {
	case <-s.loopDone:
	case <-window.C:
		s.log.Warn("shutdown window closed: stopping running jobs; their messages will be released", "held", len(s.leaser.list()))
		stopJobs(errShutdown)
		stopPolls()
		select {
		case <-s.loopDone:
		case <-abort:
			aborted = true
		}
	case <-abort:
		aborted = true
	}
	if aborted {
		s.log.Warn("second stop request: killing running jobs now; their messages will be released")
		s.cut.set(time.Now().Add(releaseSlack))
		stopJobs(errSecond)
		stopPolls()
		for _, j := range s.leaser.list() {
			if pgid := j.processGroup(); pgid != 0 {
				_ = signalGroup(pgid, syscall.SIGKILL)
			}
		}
		<-s.loopDone
	}
	stopProtection() // the drain has finished: nothing is held any more
	s.shutdown(stopHeartbeat, &heartbeat, &owned)
	s.log.Info("watchbot stopped", "received", received)
	if aborted {
		return ErrAborted
	}
	return nil
}

// releaseSlack is how long after its drain window and --kill-grace a stop waits for SQS to
// take the releases of the messages it held: every call to SQS and DynamoDB ends by then
// (cutoff), so a stop ends within --shutdown-timeout + --kill-grace + 2 s whatever SQS and DynamoDB do.
const releaseSlack = 1500 * time.Millisecond

// shutdown stops what outlives the loop, in order: the heartbeat (so no renewal follows a
// message's release), the runs' and hand-backs' goroutines, then the acknowledger, which
// sends what is pending and waits for its calls. Each step is bounded: the heartbeat and the
// goroutines end with their current SQS call, which the acknowledger bounds by AckTimeout.
// It runs once, however often it is called.
func (s *Supervisor) shutdown(stopHeartbeat context.CancelFunc, heartbeat, owned *sync.WaitGroup) {
	s.stopOnce.Do(func() {
		<-s.loopDone
		stopHeartbeat()
		heartbeat.Wait()
		s.runs.Wait()
		s.handBacks.Wait()
		s.stopLimits() // no run holds a permit any more: the limiter gives its slots back
		s.acks.close()
		owned.Wait()
		s.cut.release()
	})
}

// runPool runs each task in a goroutine of its own, which then waits for the next: a run, or
// an acknowledger's batch call, grows its goroutine's stack (the SDK's calls and the process
// start are deep), and a new goroutine for each would grow one again each time. A task goes to a goroutine that
// waits, or else to a new one; the goroutines wait until close.
type runPool struct {
	wg              sync.WaitGroup
	tasks           chan func()
	done            chan struct{}
	once, closeOnce sync.Once
	started         atomic.Int64 // goroutines started
}

func (p *runPool) init() {
	p.once.Do(func() { p.tasks, p.done = make(chan func()), make(chan struct{}) })
}

// Go runs task. It must not be called once Wait has been.
func (p *runPool) Go(task func()) {
	p.init()
	select {
	case p.tasks <- task:
		return
	default:
	}
	p.started.Add(1)
	p.wg.Go(func() {
		for ; task != nil; task = p.next() {
			task()
		}
	})
}

// next waits for a task, or returns nil when the pool closes.
func (p *runPool) next() func() {
	select {
	case t := <-p.tasks:
		return t
	case <-p.done:
		return nil
	}
}

// Wait waits for the tasks under way to end, and for the goroutines to return.
func (p *runPool) Wait() {
	p.init()
	p.closeOnce.Do(func() { close(p.done) })
	p.wg.Wait()
}
