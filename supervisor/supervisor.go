package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/backoff"
	"github.com/watchbot/watchbot/internal/queueattr"
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
}

// Supervisor runs one listen loop. Build it with Run.
type Supervisor struct {
	cfg     Config
	api     sqsAPI
	log     *slog.Logger
	metrics alarms.Recorder
	random  func() float64

	maxAttempts     int
	maxReceiveCount int // 0 without a redrive policy
	dlqURL          string
	command         []string // Command with its path resolved

	acks    *acker
	jobs    jobs
	running sync.WaitGroup
	// workDir holds the jobs' message and result files, spillDir those that did not fit in
	// workDir when it is a size-limited tmpfs ("" when workDir is already on disk); jobSeq
	// names them.
	workDir, spillDir string
	jobSeq            atomic.Uint64
	// pollCtx carries the receives; polls owns a receive the stop request left under way.
	pollCtx context.Context
	polls   sync.WaitGroup
	// baseEnv is the supervisor's environment, which every worker inherits.
	baseEnv []string
}

// Run checks the queue and the command, then receives and supervises until ctx is done, and
// drains: running workers may finish within cfg.ShutdownTimeout, then they are stopped and
// their messages released. It returns nil after a clean drain, a ConfigError when a startup
// check fails (before any message is received), and ErrAborted when deps.Abort closed.
func Run(ctx context.Context, cfg Config, deps Deps) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if deps.SQS == nil {
		return errors.New("supervisor: no SQS client")
	}
	s := &Supervisor{cfg: cfg, api: deps.SQS, log: deps.Logger, metrics: deps.Metrics, random: deps.Random}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.metrics == nil {
		s.metrics = alarms.Discard
	}
	if s.random == nil {
		s.random = rand.Float64
	}
	if err := s.check(ctx); err != nil {
		return err
	}
	if err := s.makeWorkDirs(); err != nil {
		return err
	}
	defer s.removeWorkDirs()
	s.baseEnv = os.Environ()
	s.log.Info("watchbot listening", "queue_url", cfg.QueueURL, "concurrency", cfg.Concurrency,
		"max_attempts", s.maxAttempts, "dead_letter_queue", s.dlqURL, "command", s.command)
	return s.run(ctx, deps.Abort)
}

// check runs the startup checks of DESIGN §2.4, before anything is received.
func (s *Supervisor) check(ctx context.Context) error {
	path, err := exec.LookPath(s.cfg.Command[0])
	if err != nil {
		return ConfigError{Msg: fmt.Sprintf("worker command %q: %v", s.cfg.Command[0], unwrapExec(err))}
	}
	s.command = append([]string{path}, s.cfg.Command[1:]...)
	for _, v := range s.cfg.Volumes {
		if fi, err := os.Stat(v); err != nil || !fi.IsDir() {
			return ConfigError{Flag: "--volumes", Msg: fmt.Sprintf("%q is not a directory", v)}
		}
	}
	if s.cfg.TempDir != "" {
		if fi, err := os.Stat(s.cfg.TempDir); err != nil || !fi.IsDir() {
			return ConfigError{Msg: fmt.Sprintf("temporary directory %q is not a directory", s.cfg.TempDir)}
		}
	}
	info, err := queueattr.Describe(ctx, s.api, s.cfg.QueueURL)
	if err != nil {
		return fmt.Errorf("--queue-url: queue not reachable: %w", err)
	}
	switch {
	case info.Redrive != nil:
		s.maxReceiveCount = info.Redrive.MaxReceiveCount
		s.dlqURL, err = queueattr.DeadLetterQueue(ctx, s.api, info)
		if err != nil {
			return fmt.Errorf("--queue-url: %w", err)
		}
		s.maxAttempts = s.cfg.MaxAttempts
		if s.maxAttempts == 0 {
			s.maxAttempts = s.maxReceiveCount
		}
		if s.maxAttempts > s.maxReceiveCount {
			return ConfigError{Flag: "--max-attempts", Msg: fmt.Sprintf("(%d) is above the queue's maxReceiveCount (%d): the redrive policy would move messages to the DLQ first", s.maxAttempts, s.maxReceiveCount)}
		}
	case s.cfg.AllowNoDLQ:
		s.maxAttempts = s.cfg.MaxAttempts
		if s.maxAttempts == 0 {
			s.maxAttempts = 10
		}
		s.log.Warn("the queue has no redrive policy: dead-lettered messages will be deleted and recorded only in this log")
	default:
		return ConfigError{Flag: "--queue-url", Msg: "the queue has no redrive policy (no dead-letter queue): poison messages would retry forever; add one, or pass --allow-no-dlq"}
	}
	return nil
}

func unwrapExec(err error) error {
	var e *exec.Error
	if errors.As(err, &e) {
		return e.Err
	}
	return err
}

func (s *Supervisor) run(ctx context.Context, abort <-chan struct{}) error {
	// Work outlives ctx (the stop request): jobs and acks run on base, which ends only when
	// the drain is over.
	base := context.WithoutCancel(ctx)
	jobsCtx, stopJobs := context.WithCancelCause(base)
	defer stopJobs(nil)

	s.acks = newAcker(s.api, s.cfg.QueueURL, s.cfg.AckLinger, s.cfg.AckTimeout)
	var owned sync.WaitGroup
	owned.Add(1)
	go func() { defer owned.Done(); s.acks.run(base) }()
	hbCtx, stopHeartbeat := context.WithCancel(base)
	owned.Add(1)
	go func() { defer owned.Done(); s.heartbeat(hbCtx) }()

	// Receives run on pollCtx, not ctx: a long poll under way when the stop comes is left to
	// finish (SQS would otherwise still answer it and take its messages out of sight for a
	// visibility timeout); what it brings is released. pollCtx ends when the drain gives up.
	pollCtx, stopPolls := context.WithCancel(base)
	defer stopPolls()
	s.pollCtx = pollCtx
	received := s.receiveLoop(ctx, jobsCtx)

	drained := make(chan struct{})
	go func() { s.running.Wait(); s.polls.Wait(); close(drained) }()
	if s.cfg.Once && ctx.Err() == nil {
		// --once: the one job runs to its end unless a stop is requested.
		select {
		case <-drained:
		case <-ctx.Done():
		}
	}
	// Drain: the loop has stopped receiving. Running jobs go on until the window closes.
	aborted := false
	if n := len(s.jobs.list()); n > 0 && ctx.Err() != nil {
		s.log.Info("stop requested: draining running jobs", "running", n, "shutdown_timeout", s.cfg.ShutdownTimeout.String())
	}
	window := time.NewTimer(s.cfg.ShutdownTimeout)
	defer window.Stop()
	select {
	case <-drained:
	case <-window.C:
		s.log.Warn("shutdown window closed: stopping running jobs; their messages will be released", "running", len(s.jobs.list()))
		stopJobs(errShutdown)
		stopPolls()
		select {
		case <-drained:
		case <-abort:
			aborted = true
		}
	case <-abort:
		aborted = true
	}
	if aborted {
		s.log.Warn("second stop request: killing running jobs now; their messages will be released")
		stopJobs(errShutdown)
		stopPolls()
		for _, j := range s.jobs.list() {
			j.mu.Lock()
			if j.pgid != 0 {
				_ = signalGroup(j.pgid, syscall.SIGKILL)
			}
			j.mu.Unlock()
		}
		<-drained
	}
	stopHeartbeat()
	s.acks.close()
	owned.Wait()
	s.log.Info("watchbot stopped", "received", received)
	if aborted {
		return ErrAborted
	}
	return nil
}

// receiveLoop receives while ctx is live and there is room, and starts worker runs: one per
// message, or in batch mode one per batch of up to BatchSize messages collected for at most
// BatchWindow. It returns the number of messages received. Messages still held (received but
// not started) when it returns are released.
func (s *Supervisor) receiveLoop(ctx, jobsCtx context.Context) int {
	size := max(1, s.cfg.BatchSize)
	workers := s.cfg.Concurrency
	if s.cfg.Once {
		workers = 1
	}
	var (
		freeWorkers = workers
		freeMsgs    = workers * size // concurrency × batch size, less what is held or running
		done        = make(chan runDone, workers)
		held        []*job
		firstAt     time.Time
		lastEmpty   = true
		received    = 0
		runs        = 0
		failures    = 0
		lastErrLog  time.Time
	)
	reclaim := func(r runDone) {
		freeWorkers++
		freeMsgs += r.messages
	}
	drain := func() {
		for {
			select {
			case r := <-done:
				reclaim(r)
			default:
				return
			}
		}
	}
	// wait blocks until a run ends, the deadline passes (zero: none) or ctx is done.
	wait := func(deadline time.Time) {
		var timer <-chan time.Time
		if !deadline.IsZero() {
			t := time.NewTimer(time.Until(deadline))
			defer t.Stop()
			timer = t.C
		}
		select {
		case r := <-done:
			reclaim(r)
		case <-timer:
		case <-ctx.Done():
		}
	}
	defer func() {
		for _, j := range held {
			s.releaseHeld(j, "stopped before its batch started")
		}
	}()
	for ctx.Err() == nil {
		drain()
		// Start what is ready: every message at once in per-message mode; in batch mode a
		// full batch, or what has been held for the window.
		for len(held) > 0 && freeWorkers > 0 && (size == 1 || len(held) >= size || !time.Now().Before(firstAt.Add(s.cfg.BatchWindow))) {
			n := min(size, len(held))
			batch := held[:n:n]
			held = held[n:]
			if len(held) > 0 {
				firstAt = held[0].receivedAt
			}
			freeWorkers--
			runs++
			s.startRun(jobsCtx, batch, done)
		}
		if s.cfg.Once && runs > 0 {
			break
		}
		room := freeMsgs - len(held)
		var windowEnd time.Time
		if len(held) > 0 {
			windowEnd = firstAt.Add(s.cfg.BatchWindow)
		}
		if room <= 0 {
			wait(windowEnd)
			continue
		}
		poll := s.cfg.WaitTime
		if !windowEnd.IsZero() {
			left := time.Until(windowEnd)
			if left < time.Second && lastEmpty {
				// SQS long-polls in whole seconds: for the last fraction of the window, short
				// polls at most every 250 ms.
				wait(time.Now().Add(min(left, shortPollEvery)))
				lastEmpty = false
				continue
			}
			poll = min(poll, left.Truncate(time.Second))
		}
		// Per-message mode with few slots free: wait a moment for more, unless the queue was
		// empty last time (then the long poll waits anyway).
		if want := gatherTarget(workers); size == 1 && room < want && !lastEmpty && s.cfg.ReceiveGather > 0 {
			s.gather(ctx, done, reclaim, func() bool { return freeMsgs-len(held) >= want })
			room = freeMsgs - len(held)
		}
		msgs, err, stopped := s.receiveOrStop(ctx, min(maxBatch, room), poll)
		if stopped {
			break
		}
		if err != nil {
			failures++
			delay := receiveBackoff.Delay(failures, s.random)
			if failures == 1 || time.Since(lastErrLog) > 30*time.Second {
				s.log.Error("receive failed; backing off", "error", err, "consecutive_failures", failures, "retry_in", delay.Round(time.Millisecond).String())
				lastErrLog = time.Now()
			}
			wait(time.Now().Add(delay))
			continue
		}
		if failures > 0 {
			s.log.Info("receive recovered", "after_failures", failures)
			failures = 0
		}
		lastEmpty = len(msgs) == 0
		now := time.Now()
		for _, m := range msgs {
			received++
			s.metrics.Add(alarms.MessageReceives, 1)
			msg := parseMessage(m)
			if j := s.jobs.get(msg.ID); j != nil && j.takeOver(msg, now, s.cfg.VisibilityTimeout) {
				continue
			}
			if len(held) == 0 {
				firstAt = now
			}
			held = append(held, s.hold(msg, now))
			freeMsgs--
		}
	}
	return received
}

// shortPollEvery spaces the short polls that fill the last second of a batch window.
const shortPollEvery = 250 * time.Millisecond

// receiveBackoff spaces receive retries: 500 ms doubling to 30 s, jittered.
var receiveBackoff = backoff.Exponential{Base: 500 * time.Millisecond, Max: 30 * time.Second, Jitter: backoff.Equal}

// receiveOrStop receives like receive, but returns stopped as soon as ctx is done. A receive
// then under way goes on in the background, owned by s.polls, and releases whatever it
// brings.
func (s *Supervisor) receiveOrStop(ctx context.Context, n int, wait time.Duration) (msgs []types.Message, err error, stopped bool) {
	type answer struct {
		msgs []types.Message
		err  error
	}
	ch := make(chan answer) // unbuffered: an answer is either taken here or released there
	s.polls.Add(1)
	go func() {
		defer s.polls.Done()
		m, err := s.receive(s.pollCtx, n, wait)
		select {
		case ch <- answer{m, err}:
		case <-ctx.Done():
			// Abandoned by the stop request: hand the messages straight back.
			s.releaseReceived(m)
			return
		}
	}()
	select {
	case a := <-ch:
		return a.msgs, a.err, false
	case <-ctx.Done():
		return nil, nil, true
	}
}

// releaseReceived makes messages received after the stop request visible again at once.
func (s *Supervisor) releaseReceived(msgs []types.Message) {
	for _, m := range msgs {
		if err := s.acks.changeVisibility(aws.ToString(m.ReceiptHandle), 0); err != nil {
			s.log.Error("could not release a message received as watchbot stopped; it will be visible again when its lease ends",
				"message_id", aws.ToString(m.MessageId), "error", err)
			continue
		}
		s.log.Info("message received as watchbot stopped: released", "message_id", aws.ToString(m.MessageId))
	}
}

// receive takes up to n messages with a long poll of wait.
func (s *Supervisor) receive(ctx context.Context, n int, wait time.Duration) ([]types.Message, error) {
	out, err := s.api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(s.cfg.QueueURL),
		MaxNumberOfMessages:         int32(n),
		WaitTimeSeconds:             int32(wait / time.Second),
		VisibilityTimeout:           seconds(s.cfg.VisibilityTimeout),
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		MessageAttributeNames:       []string{"All"},
	})
	if err != nil {
		return nil, err
	}
	return out.Messages, nil
}

// gatherTarget is how many free slots are worth a receive without waiting: a full receive
// (10, or the concurrency when lower). Taking each freed slot at once would make one receive
// per message.
func gatherTarget(workers int) int {
	return min(maxBatch, workers)
}

// gather waits up to ReceiveGather for enough to be free, so a busy supervisor receives
// several messages per call instead of one per finished job.
func (s *Supervisor) gather(ctx context.Context, done <-chan runDone, reclaim func(runDone), enough func() bool) {
	t := time.NewTimer(s.cfg.ReceiveGather)
	defer t.Stop()
	for !enough() {
		select {
		case r := <-done:
			reclaim(r)
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// runDone reports a finished worker run and the message slots it gives back.
type runDone struct{ messages int }

// hold registers a received message: from now on the heartbeat keeps it leased.
func (s *Supervisor) hold(m message, receivedAt time.Time) *job {
	j := &job{msg: m, receipt: m.ReceiptHandle, receivedAt: receivedAt, leaseUntil: receivedAt.Add(s.cfg.VisibilityTimeout),
		log: s.log.With("message_id", m.ID, "attempt", m.Attempt)}
	s.jobs.add(j)
	return j
}

// releaseHeld makes a held message visible again at once and forgets it.
func (s *Supervisor) releaseHeld(j *job, reason string) {
	s.settle(context.Background(), j, outcome{Action: actRelease, Reason: reason})
	s.jobs.remove(j)
}

// startRun runs a worker for the batch (one message in per-message mode) in its own
// goroutine, owned by s.running. The run's worker slot and message slots come back on done
// once the worker has ended, while the messages' acks may still be on their way.
func (s *Supervisor) startRun(ctx context.Context, batch []*job, done chan<- runDone) {
	runCtx, cancel := context.WithCancelCause(ctx)
	s.running.Add(1)
	go func() {
		defer s.running.Done()
		var once sync.Once
		release := func() { once.Do(func() { done <- runDone{messages: len(batch)} }) }
		defer release()
		defer func() {
			for _, j := range batch {
				s.jobs.remove(j)
			}
		}()
		defer cancel(nil)
		if s.cfg.BatchSize > 1 {
			s.processBatch(runCtx, cancel, batch, release)
			return
		}
		j := batch[0]
		if !j.attach(cancel, false) {
			// Stopped (12 h limit) while it waited to start.
			release()
			s.settle(runCtx, j, outcomeFor(result{End: endFor(j.stopped())}))
			return
		}
		s.process(runCtx, j, release)
	}()
}

// process runs the worker for one message and settles the message by the outcome table.
func (s *Supervisor) process(ctx context.Context, j *job, release func()) {
	m := j.msg
	var attrs []any
	r := result{Attempt: m.Attempt, MaxAttempts: s.maxAttempts, MaxReceiveCount: s.maxReceiveCount, OnReject: s.cfg.OnReject}
	if s.tooOld(j) {
		r.End = endNotRun
	} else {
		var run workerRun
		files, err := s.writeJobFiles(m.Body)
		if err != nil {
			run = workerRun{End: endSpawnError, Err: err}
			s.logRun(j.log, run)
		} else {
			run = s.runWorkerFor(ctx, []*job{j}, files, func(deadline time.Time) []string {
				return buildEnv(m, jobEnv{QueueURL: s.cfg.QueueURL, MaxAttempts: s.maxAttempts,
					MessageFile: files.message, ResultFile: files.result, Deadline: deadline})
			}, j.log)
		}
		r.End, r.ExitCode = run.End, run.ExitCode
		if run.End != endSpawnError && run.End != endLeaseLost {
			d, err := readDirective(files.result)
			if err != nil {
				j.log.Error("ignoring the worker's result file; following its exit code", "error", err)
			}
			r.Directive = d
		}
		files.remove()
		attrs = []any{"duration", run.Duration.Round(time.Millisecond).String()}
	}
	release()
	o := outcomeFor(r)
	s.count(o)
	s.settle(ctx, j, o, attrs...)
}

// runWorkerFor runs the worker for jobs (one message, or a batch) whose message file is
// written. env builds the worker's variables, given the time it will be stopped (zero: never).
// It measures each message's age, records the worker's process group on every job so a
// second stop signal can kill it, empties --volumes afterwards, and logs and measures how
// the run ended.
func (s *Supervisor) runWorkerFor(ctx context.Context, jobs []*job, files jobFiles, env func(deadline time.Time) []string, log *slog.Logger) workerRun {
	var deadline time.Time
	if s.cfg.MaxJobDuration > 0 {
		deadline = time.Now().Add(s.cfg.MaxJobDuration)
	}
	for _, j := range jobs {
		if !j.msg.SentAt.IsZero() {
			s.metrics.Add(alarms.MessageAge, float64(time.Since(j.msg.SentAt).Milliseconds()))
		}
		if s.cfg.LogBodies {
			j.log.Info("starting worker", "body", j.msg.Body)
		}
	}
	run := runWorker(ctx, workerSpec{
		Command: s.command, Env: append(slices.Clip(s.baseEnv), env(deadline)...), StdinPath: files.message,
		MaxDuration: s.cfg.MaxJobDuration, KillGrace: s.cfg.KillGrace,
		Started: func(pgid int) {
			for _, j := range jobs {
				j.mu.Lock()
				j.pgid = pgid
				j.mu.Unlock()
			}
		},
	}, log)
	s.emptyVolumes(log)
	s.logRun(log, run)
	return run
}

// jobFiles are the paths of one job's message and result files.
type jobFiles struct{ message, result string }

// newJobFiles names a job's files in dir: unique, created by no one yet.
func (s *Supervisor) newJobFiles(dir string) jobFiles {
	n := strconv.FormatUint(s.jobSeq.Add(1), 10)
	return jobFiles{message: filepath.Join(dir, n+".message"), result: filepath.Join(dir, n+".result.json")}
}

// sharedMemory is a tmpfs most Linux systems and containers have. Job files there cost a few
// microseconds; on a disk file system creating and removing them costs far more per job.
const sharedMemory = "/dev/shm"

// makeWorkDirs creates the directories that hold the jobs' files: in --temp-dir when set;
// otherwise in /dev/shm when it is usable, with a spill directory in $TMPDIR for when it is
// full (a container's /dev/shm is often only 64 MiB), or else in $TMPDIR.
func (s *Supervisor) makeWorkDirs() error {
	if s.cfg.TempDir == "" {
		if dir, err := os.MkdirTemp(sharedMemory, "watchbot-"); err == nil {
			spill, err := os.MkdirTemp("", "watchbot-")
			if err != nil {
				os.RemoveAll(dir)
				return fmt.Errorf("create the jobs' directory: %w", err)
			}
			s.workDir, s.spillDir = dir, spill
			return nil
		}
	}
	dir, err := os.MkdirTemp(s.cfg.TempDir, "watchbot-")
	if err != nil {
		return fmt.Errorf("create the jobs' directory: %w", err)
	}
	s.workDir = dir
	return nil
}

func (s *Supervisor) removeWorkDirs() {
	os.RemoveAll(s.workDir)
	if s.spillDir != "" {
		os.RemoveAll(s.spillDir)
	}
}

// writeJobFiles writes the message file, in the spill directory when the work directory is
// full.
func (s *Supervisor) writeJobFiles(body string) (jobFiles, error) {
	files := s.newJobFiles(s.workDir)
	err := os.WriteFile(files.message, []byte(body), 0o600)
	if err != nil && s.spillDir != "" {
		files.remove()
		files = s.newJobFiles(s.spillDir)
		err = os.WriteFile(files.message, []byte(body), 0o600)
	}
	if err != nil {
		files.remove()
		return jobFiles{}, fmt.Errorf("write message file: %w", err)
	}
	return files, nil
}

func (f jobFiles) remove() {
	_ = os.Remove(f.message)
	_ = os.Remove(f.result)
}

// logRun logs and measures how a worker run ended.
func (s *Supervisor) logRun(log *slog.Logger, run workerRun) {
	if run.End != endSpawnError {
		s.metrics.Add(alarms.WorkerDuration, float64(run.Duration.Milliseconds()))
	}
	switch run.End {
	case endSpawnError:
		log.Error("worker could not start", "error", run.Err)
	case endSignaled:
		log.Error("worker killed by a signal", "signal", run.ExitCode, "duration", run.Duration.String())
	case endTimedOut:
		log.Error("worker stopped: it ran longer than --max-job-duration", "limit", s.cfg.MaxJobDuration.String())
	case endShutdown, endCeiling, endLeaseLost:
		log.Warn("worker stopped by watchbot", "reason", run.Err, "duration", run.Duration.String())
	default:
		// A success is logged once, with its outcome; a failure's exit code is worth a line.
		level := slog.LevelInfo
		if run.ExitCode == 0 {
			level = slog.LevelDebug
		}
		log.Log(context.Background(), level, "worker finished", "exit_code", run.ExitCode, "duration", run.Duration.String())
	}
}

func (s *Supervisor) count(o outcome) {
	add := func(ok bool, m alarms.Metric) {
		if ok {
			s.metrics.Add(m, 1)
		}
	}
	add(o.WorkerError, alarms.WorkerErrors)
	add(o.SpawnError, alarms.WorkerSpawnErrors)
	add(o.DeadLetter, alarms.DeadLetter)
}

// settle applies the outcome to the message. It holds the job's lock so no heartbeat renewal
// can land after it.
func (s *Supervisor) settle(ctx context.Context, j *job, o outcome, attrs ...any) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.settled = true
	log := j.log.With(append([]any{"outcome", o.Action.String()}, attrs...)...)
	switch o.Action {
	case actDelete:
		if err := s.acks.delete(j.receipt); err != nil {
			log.Error("delete failed: the message will be delivered again after its visibility timeout", "error", err)
			return
		}
		if o.Success {
			s.metrics.Add(alarms.MessagesProcessed, 1)
			log.Info("message done")
		} else {
			log.Warn("message deleted", "reason", o.Reason)
		}
	case actRetry:
		delay := o.Delay
		if o.DelayFromBackoff {
			delay = s.retryDelay(j.msg.Attempt)
		}
		s.setVisibility(j, log, delay, "message will be retried", o.Reason)
	case actRelease:
		s.setVisibility(j, log, 0, "message released", o.Reason)
	case actRedrive:
		s.setVisibility(j, log, 0, "message left to the redrive policy: it moves to the dead-letter queue on its next receive", o.Reason)
	case actDeadLetter:
		s.deadLetter(ctx, j, log, o.Reason)
	case actAbandon:
		log.Warn("message left alone", "reason", o.Reason)
	}
}

// retryDelay is how long a failed attempt waits: --retry-delay when set, else the backoff.
func (s *Supervisor) retryDelay(attempt int) time.Duration {
	if s.cfg.RetryDelay > 0 {
		return s.cfg.RetryDelay
	}
	return s.cfg.Backoff.Delay(attempt, s.random)
}

// setVisibility makes the message visible again after delay, never past the 12 h limit.
func (s *Supervisor) setVisibility(j *job, log *slog.Logger, delay time.Duration, what, reason string) {
	left := maxInFlight - time.Since(j.receivedAt) - time.Second
	delay = max(0, min(delay, left))
	secs := seconds(delay)
	if err := s.acks.changeVisibility(j.receipt, secs); err != nil {
		log.Error("visibility change failed: the message will be visible again when its lease ends", "error", err, "reason", reason)
		return
	}
	log.Info(what, "reason", reason, "visible_in_seconds", secs)
}

// deadLetter records the message in the DLQ (or, with --allow-no-dlq and no DLQ, in the
// log), then deletes it. A message whose send failed is never deleted.
func (s *Supervisor) deadLetter(ctx context.Context, j *job, log *slog.Logger, reason string) {
	if s.dlqURL == "" {
		log.Error("dead-lettering without a dead-letter queue: this log line is the only record of the message",
			"reason", reason, "body", j.msg.Raw, "attributes", j.msg.Attributes)
	} else if err := s.sendToDLQ(ctx, j, reason); err != nil {
		log.Error("could not dead-letter the message; it stays in the queue and will be retried", "error", err, "reason", reason)
		s.setVisibility(j, log, s.retryDelay(j.msg.Attempt), "message will be retried", "dead-letter send failed")
		return
	}
	if err := s.acks.delete(j.receipt); err != nil {
		log.Error("dead-lettered but the delete failed: the message will be delivered again", "error", err)
		return
	}
	log.Warn("message dead-lettered", "reason", reason, "dead_letter_queue", s.dlqURL)
}

// emptyVolumes removes everything inside each --volumes directory.
func (s *Supervisor) emptyVolumes(log *slog.Logger) {
	for _, v := range s.cfg.Volumes {
		entries, err := os.ReadDir(v)
		if err != nil {
			log.Error("could not empty volume", "volume", v, "error", err)
			continue
		}
		for _, e := range entries {
			if err := os.RemoveAll(filepath.Join(v, e.Name())); err != nil {
				log.Error("could not empty volume", "volume", v, "error", err)
			}
		}
	}
}

// seconds converts a duration to SQS's whole seconds, rounding up.
func seconds(d time.Duration) int32 { return backoff.Seconds(d) }
