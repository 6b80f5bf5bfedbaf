package supervisor

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/internal/queueattr"
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

// Supervisor runs the listen loop of one queue: it wires the receive loop, the scheduler
// (owned by the loop goroutine), the leaser and the runner together, and stops them in one
// bounded order. A listen builds one per queue with newSupervisor.
type Supervisor struct {
	cfg     Config
	api     sqsAPI
	log     *slog.Logger
	metrics alarms.Recorder
	random  func() float64
	fifo    bool

	acks *acker
	// cut is the stop's last moment, which every call to SQS and DynamoDB obeys.
	cut    *cutoff
	leaser *leaser
	runner *runner
	load   *Load
	health *Health
	brake  *brake
	// limiter holds the limits and pauses; gate is the loop's use of it. limitsChanged
	// receives when a start the limiter refused may now succeed.
	limiter       *limits.Limiter
	gate          *startGate
	limitsChanged <-chan struct{}
	// slots is the queue's seat in the slots the listen's queues share (alone, all of them).
	slots *slotSeat

	// events carries what runs report to the loop; heldStops the held jobs the heartbeat
	// stops, as a mailbox, since the heartbeat must never wait for the loop; loopDone is
	// closed when the loop has returned.
	events    chan runEvent
	heldStops *mailbox[*job]
	loopDone  chan struct{}
	// runs owns the run goroutines, handBacks the goroutines handing messages back to SQS.
	runs      runPool
	handBacks sync.WaitGroup
	// pollEnds is by when each poller's receive under way must answer, in Unix nanoseconds
	// (0: none): written by the poller, read by a stop, which waits for those answers.
	pollEnds [maxPolls]atomic.Int64
	// tries is what the pollers keep of failing receives.
	tries receiveTries
}

// runEvent is a run's report to the loop: its worker ended after took (its slot is free), or
// it has finished, each message settled as disps says.
type runEvent struct {
	run      []*job
	took     time.Duration
	disps    []disposition
	finished bool
}

// newSupervisor runs the startup checks of cfg's queue (cfg.QueueURL), then builds its
// supervisor from what they learned, deps (the queue's, Deps.forQueue) and what the listen's
// queues share.
func newSupervisor(ctx context.Context, cfg Config, deps queueDeps, sh shares) (*Supervisor, error) {
	slots := runSlots(cfg)
	info, err := checkQueue(ctx, cfg, deps.SQS, deps.Logger, deps.Dedupe)
	if err != nil {
		return nil, err
	}
	dedupe := newDeduper(cfg, deps.Dedupe, info, deps.Metrics, deps.Logger, deps.Random, sh.cut)
	s := &Supervisor{cfg: cfg, api: deps.SQS, log: deps.Logger, metrics: deps.Metrics, random: deps.Random, fifo: info.fifo,
		acks: newAcker(deps.SQS, cfg.QueueURL, cfg.AckLinger, cfg.AckTimeout, deps.health, sh.cut), cut: sh.cut,
		load: deps.load, health: deps.health, brake: newBrake(cfg.Brake, slots, deps.Logger.With("component", "brake")),
		limiter: sh.limiter, gate: newStartGate(sh.limiter, cfg.Limits, queueattr.NameFromURL(cfg.QueueURL), deps.Metrics), limitsChanged: sh.limitsChanged, slots: sh.slots,
		events: make(chan runEvent), heldStops: newMailbox[*job](), loopDone: make(chan struct{})}
	s.leaser = newLeaser(cfg, s.acks, s.log, s.heldStopped, s.health, dedupe)
	s.runner = newRunner(cfg, info, runnerParts{api: deps.SQS, acks: s.acks, cut: sh.cut, brake: s.brake, limiter: sh.limiter,
		metrics: deps.Metrics, log: deps.Logger, random: deps.Random, tracer: deps.Tracer, tenants: deps.Tenants, s3: deps.S3,
		dedupe: dedupe, workers: sh.workers})
	return s, nil
}

// newProtector returns the protector of the task's scale-in protection, following load.
func newProtector(cfg Config, deps Deps, load activity, healthy func() bool, cut *cutoff) *protector {
	return &protector{api: deps.Protection, load: load, policy: newProtectionPolicy(cfg),
		metrics: deps.Metrics, log: deps.Logger.With("component", "scale-in-protection"), random: deps.Random,
		healthy: healthy, cut: cut}
}

// start logs what the supervisor serves, and runs it until the drain is over.
func (s *Supervisor) start(ctx context.Context, abort <-chan struct{}) error {
	r := s.runner
	s.log.Info("watchbot listening", "queue_url", s.cfg.QueueURL, "fifo", s.fifo, "concurrency", s.cfg.Concurrency,
		"max_attempts", r.maxAttempts, "dead_letter_queue", r.dlqURL, workerAttr(s.cfg))
	if s.fifo {
		s.log.Info("FIFO queue: messages of one group run one at a time, in order; groups run side by side; failed messages are retried in place")
	}
	s.health.start(r.kind)
	return s.run(ctx, abort)
}

// workerAttr is the log attribute naming the worker: its command, or its URL.
func workerAttr(cfg Config) slog.Attr {
	if cfg.HTTP.URL != "" {
		return slog.String("http_worker", cfg.HTTP.URL)
	}
	return slog.Any("command", cfg.Command)
}

// run starts the acknowledger, the heartbeat, the receive loop and the loop, and then goes
// through a stop's phases in order, each bounded: awaitStop (a stop request, or the end of
// --once's run), drain (the runs may finish within --shutdown-timeout; then they are
// stopped, or killed at a second request), stopHeartbeat (so no renewal follows a message's
// release), awaitRuns (the runs' and hand-backs' goroutines, which end with their current
// SQS call) and flushAcks (the acknowledger sends what is pending, bounded by --ack-timeout).
func (s *Supervisor) run(ctx context.Context, abort <-chan struct{}) error {
	// Work outlives ctx (the stop request): it runs on base, which ends only when the drain
	// is over. Runs run on jobs; the calls a receive makes while stopping on polls.
	base := context.WithoutCancel(ctx)
	jobs, stopJobs := context.WithCancelCause(base)
	defer stopJobs(nil)
	polls, stopPolls := context.WithCancel(base)
	defer stopPolls()
	beats, stopBeats := context.WithCancel(base)
	defer stopBeats()

	var acks, heartbeat, loops sync.WaitGroup
	acks.Go(func() { s.acks.run(base) })
	heartbeat.Go(func() { s.leaser.run(beats) })
	var received int
	loops.Go(func() { received = s.serve(ctx, jobs, polls) })

	s.awaitStop(ctx)
	aborted := s.drain(abort, func(cause error) { stopJobs(cause); stopPolls() })
	loops.Wait()
	stopHeartbeat(stopBeats, &heartbeat)
	s.awaitRuns()
	s.flushAcks(&acks)
	s.log.Info("watchbot stopped", "received", received)
	if aborted {
		return ErrAborted
	}
	return nil
}

// serve runs the receive loop and the loop until the drain is over, and returns how many
// messages were received.
func (s *Supervisor) serve(stop, jobs, polls context.Context) int {
	// The receives outlive the drain window: the long poll under way is left to answer, and
	// only a second stop request (which ends the runs with errSecond) ends it at once.
	receives, stopReceiving := context.WithCancel(context.WithoutCancel(polls))
	defer stopReceiving()
	defer context.AfterFunc(jobs, func() {
		if errors.Is(context.Cause(jobs), errSecond) {
			stopReceiving()
		}
	})()
	asks, answers := make(chan receiveAsk), make(chan receiveAnswer)
	var receiving sync.WaitGroup
	defer receiving.Wait()
	for poll := range maxPolls {
		receiving.Go(func() { s.receiveLoop(poll, stop, polls, receives, asks, answers) })
	}
	defer close(s.loopDone)
	return s.loop(stop, jobs, asks, answers)
}

// awaitStop waits for a stop request, or for the loop to end (--once: the one job runs to
// its end unless a stop is requested); at a stop it sets the cutoff after the drain window,
// or after the answer of the long poll under way when that comes later: what the poll
// brings runs in the drain or is released, and its release must not be cut.
func (s *Supervisor) awaitStop(ctx context.Context) {
	select {
	case <-s.loopDone:
	case <-ctx.Done():
	}
	if ctx.Err() == nil {
		return
	}
	if n := len(s.leaser.list()); n > 0 {
		s.log.Info("stop requested: draining running jobs", "held", n, "shutdown_timeout", s.cfg.ShutdownTimeout.String())
	}
	now := time.Now()
	cut := now.Add(s.cfg.ShutdownTimeout + s.cfg.KillGrace)
	poll := s.pollUnderWay()
	if poll.After(now) {
		// An idle stop is silent until the poll answers: say why, so nobody takes it for a hang
		// and sends the second signal that would strand what the poll brings.
		s.log.Info("stop requested: waiting for the long poll under way to answer; a second signal stops at once",
			"until", poll.UTC().Format(time.RFC3339))
	}
	if poll.After(cut) {
		cut = poll
	}
	s.cut.set(cut.Add(releaseSlack))
}

// drain waits for the loop to end within the shutdown window; once the window closes,
// stopWork stops the runs and the receive's last calls, and a second stop request (abort)
// kills the workers at once. It reports whether abort ended it.
func (s *Supervisor) drain(abort <-chan struct{}, stopWork func(cause error)) (aborted bool) {
	window := time.NewTimer(s.cfg.ShutdownTimeout)
	defer window.Stop()
	select {
	case <-s.loopDone:
		return false
	case <-window.C:
		s.log.Warn("shutdown window closed: stopping running jobs; their messages will be released", "held", len(s.leaser.list()))
		stopWork(errShutdown)
		select {
		case <-s.loopDone:
			return false
		case <-abort:
		}
	case <-abort:
	}
	s.log.Warn("second stop request: killing running jobs now; their messages will be released")
	s.cut.set(time.Now().Add(releaseSlack))
	stopWork(errSecond)
	for _, j := range s.leaser.list() {
		if kill := j.killer(); kill != nil {
			kill()
		}
	}
	<-s.loopDone
	return true
}

// releaseSlack is how long after its drain window and --kill-grace (or the answer of the long
// poll under way, when that comes later) a stop waits for SQS to take the releases of the
// messages it held: every call to SQS and DynamoDB ends by then (cutoff), so a stop ends
// within --shutdown-timeout + --kill-grace + 2 s, or the poll's wait + 4 s, whatever SQS and
// DynamoDB do.
const releaseSlack = 1500 * time.Millisecond

// stopHeartbeat ends the heartbeat and waits for it, so that no renewal follows a message's
// release.
func stopHeartbeat(stop context.CancelFunc, heartbeat *sync.WaitGroup) {
	stop()
	heartbeat.Wait()
}

// awaitRuns waits for the runs' and the hand-backs' goroutines: each ends with its current
// call to SQS, which the acknowledger bounds.
func (s *Supervisor) awaitRuns() {
	s.runs.Wait()
	s.handBacks.Wait()
}

// flushAcks closes the acknowledger, which sends what is pending and waits for its calls,
// and waits for it.
func (s *Supervisor) flushAcks(acks *sync.WaitGroup) {
	s.acks.close()
	acks.Wait()
}
