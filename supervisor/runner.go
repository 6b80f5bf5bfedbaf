package supervisor

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/backoff"
	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/internal/tracing"
	"github.com/watchbot/watchbot/limits"
	"github.com/watchbot/watchbot/worker"
)

// runner runs workers: one path for one message or a batch. It has the worker kind run the
// job, decides each message's outcome with outcomeFor from what the run gave, and settles
// each message through settle.
type runner struct {
	cfg  Config
	kind worker.Kind
	// dirs hold the fetched payloads' files (nil when there is nothing to hold).
	dirs *worker.Dirs
	// queueARN is the queue's, fifo whether it is a FIFO queue.
	queueARN string
	fifo     bool
	// maxAttempts is the effective --max-attempts; maxReceiveCount and dlqURL are the
	// redrive policy's (0 and "" without one).
	maxAttempts     int
	maxReceiveCount int
	dlqURL          string

	api   sqsAPI
	acks  *acker
	cut   *cutoff // ends the dead-letter sends at a stop's last moment
	brake *brake
	// limiter takes the pauses workers ask for (nil in watchbot try).
	limiter *limits.Limiter
	metrics alarms.Recorder
	log     *slog.Logger
	random  func() float64
	// dedupe, when set, claims each message's key before it runs (--dedupe-table).
	dedupe *deduper
	// s3, when set, fetches and deletes payloads (--payload-bucket); passThroughWarned: the
	// first pointer passed through unresolved without it has been warned of.
	s3                PayloadAPI
	passThroughWarned atomic.Bool
	// tracer starts each run's span (nil or disabled: none); queueName names the spans.
	tracer    *tracing.Provider
	queueName string
	// tenants counts each tenant's runs and waits as they start (nil: none).
	tenants *Tenants
}

// Causes of a worker being stopped by watchbot, carried as context causes.
var (
	errShutdown  = errors.New("shutdown window closed")
	errSecond    = errors.New("second signal: stopped at once")
	errLeaseLost = errors.New("lease lost")
	errCeiling   = errors.New("12h in-flight limit reached")
)

// endFor is the end of a run that watchbot stopped, from the cause it stopped it for.
func endFor(cause error) runEnd {
	switch {
	case errors.Is(cause, worker.ErrTimedOut):
		return endTimedOut
	case errors.Is(cause, errLeaseLost):
		return endLeaseLost
	case errors.Is(cause, errCeiling):
		return endCeiling
	default:
		return endShutdown
	}
}

// run runs the worker once for jobs (one message, or a batch) and settles each message.
// ended is called as soon as the worker is over, with how long it ran (0 when none ran),
// before the messages are settled, so its slot can serve another run while their acks go
// out. It returns how each job left the run (disps[i] is jobs[i]'s), for the scheduler.
func (r *runner) run(ctx context.Context, jobs []*job, ended func(took time.Duration)) []disposition {
	ctx, span := r.startSpan(ctx, jobs)
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	a := r.attempt(runCtx, cancel, jobs)
	for _, j := range jobs {
		j.detach()
	}
	// The pause is in force before the run's slot goes back, or a message held for that slot
	// could start in between.
	r.pause(a.results)
	ended(a.took)
	results, outs, decided := a.results, a.outs, a.decided
	var attrs []any
	if a.ran && r.cfg.BatchSize == 1 {
		attrs = []any{"duration", a.took.Round(time.Millisecond).String()}
	}

	r.judge(jobs, results, outs, decided)
	if r.fifo {
		groups := make([]string, len(jobs))
		for i, j := range jobs {
			groups[i] = j.msg.GroupID
		}
		outs = inGroupOrder(groups, outs)
	}
	r.dedupe.finish(ctx, jobs, results, outs)
	disps := r.settleRun(ctx, jobs, outs, decided, attrs)
	r.dedupe.finishLeft(ctx, jobs, results, disps)
	r.endSpan(span, jobs, results, outs)
	return disps
}

// attempt is what one run of the worker found for each message of a run (results[i],
// outs[i] and decided[i] are jobs[i]'s).
type attempt struct {
	results []result
	// outs[i] was decided before, by an earlier run, when decided[i]: a delete or
	// dead-letter send that failed, applied again without rerunning the worker.
	outs    []outcome
	decided []bool
	// ran: a worker ran, for took.
	ran  bool
	took time.Duration
	// answer is the worker's answer, for try to print.
	answer string
}

// attempt runs the worker once for the jobs that are to run (not stopped while they waited,
// not too old, their dedupe keys claimed), with cancel as the way to stop it, and returns
// each job's result for outcomeFor. Try uses it as listen does.
func (r *runner) attempt(ctx context.Context, cancel context.CancelCauseFunc, jobs []*job) attempt {
	batch := r.cfg.BatchSize > 1
	a := attempt{results: make([]result, len(jobs)), outs: make([]outcome, len(jobs)), decided: make([]bool, len(jobs))}
	var live []*job
	var liveAt []int
	for i, j := range jobs {
		a.results[i] = result{Attempt: j.attempt, MaxAttempts: r.maxAttempts, MaxReceiveCount: r.maxReceiveCount, OnReject: r.cfg.OnReject, FIFO: r.fifo,
			CountsRuns: r.dedupe != nil}
		switch {
		case j.pending != nil:
			a.outs[i], a.decided[i] = *j.pending, true
		case !j.attach(cancel, batch):
			a.results[i].End = endFor(j.stopped()) // stopped while it waited for its run
		case r.tooOld(j):
			a.results[i].End = endNotRun
		default:
			live, liveAt = append(live, j), append(liveAt, i)
		}
	}
	live, liveAt = r.dedupe.claim(ctx, live, liveAt, a.results)
	live, liveAt = r.resolvePayloads(ctx, live, liveAt, a.results)
	if len(live) == 0 {
		return a
	}
	defer dropFetched(live)
	run, directives := r.runWorker(ctx, live)
	a.ran, a.took, a.answer = true, run.Duration, run.Answer
	for _, i := range liveAt {
		j := jobs[i]
		a.results[i].End, a.results[i].ExitCode, a.results[i].Directive = run.End, run.ExitCode, directives[j.msg.ID]
		if errors.Is(j.stopped(), errLeaseLost) {
			// In a batch a lost lease does not stop the others: this message alone is no
			// longer watchbot's.
			a.results[i].End = endLeaseLost
		}
	}
	return a
}

// judge decides the outcome of each message of a run not decided before, and tells the
// brake how the run went: failures (non-zero exit, signal, timeout, spawn error) and
// successes; the worker's own decisions (exit 3 and 4, result-file directives) are neither.
// While braking, the first failed message becomes the probe, kept in place.
func (r *runner) judge(jobs []*job, results []result, outs []outcome, decided []bool) {
	now := time.Now()
	var failed []int
	succeeded := 0
	for i := range jobs {
		if decided[i] {
			continue
		}
		outs[i] = outcomeFor(results[i])
		switch {
		case brakeFailure(results[i]):
			failed = append(failed, i)
		case outs[i].Success:
			succeeded++
		}
	}
	r.brake.observe(now, len(failed), succeeded)
	braking := r.brake.braking()
	for _, i := range failed {
		if delay, ok := r.brake.probeFor(now, jobs[i]); ok {
			// Its attempt is not counted, so the last-attempt rule does not apply.
			first := results[i]
			first.Attempt = 0
			o := outcomeFor(first)
			outs[i] = outcome{Action: actRetryInPlace, Delay: delay, Probe: true, WorkerError: o.WorkerError, SpawnError: o.SpawnError,
				Reason: "braking: " + o.Reason}
		} else if braking {
			results[i].Braking = true
			outs[i] = outcomeFor(results[i])
		}
	}
}

// pause passes on the longest pause the run's worker asked for: no job starts until it ends,
// across the fleet when the limits share a table. --max-pause caps it.
func (r *runner) pause(results []result) {
	var d time.Duration
	for _, res := range results {
		if res.Directive != nil {
			d = max(d, res.Directive.PauseFor)
		}
	}
	if d == 0 || r.limiter == nil {
		return
	}
	if most := r.cfg.Limits.Fleet.MaxPause; d > most {
		r.log.Warn("worker asked for a pause longer than --max-pause: capped", "asked", d.String(), "max_pause", most.String())
		d = most
	}
	r.limiter.Pause(d)
	r.log.Info("worker asked for a pause: no job starts until it ends", "pause", d.String(), "fleet_wide", r.cfg.Limits.Fleet.Table != "")
}

// pausedUntil is when the pause in force ends (now when none is, or without a limiter).
func (r *runner) pausedUntil() time.Time {
	now := time.Now()
	if r.limiter == nil || !now.Before(r.limiter.PausedUntil()) {
		return now
	}
	return r.limiter.PausedUntil()
}

// brakeFailure reports whether a run failed as the brake counts failures: it ended badly
// without the worker deciding the message's fate.
func brakeFailure(res result) bool {
	if res.Directive != nil {
		return false
	}
	switch res.End {
	case endSignaled, endTimedOut, endSpawnError, endHTTPStatus, endFunctionFailed:
		return true
	case endExited:
		return res.ExitCode != 0 && res.ExitCode != exitReject && res.ExitCode != exitRelease
	}
	return false
}

// settleOrder splits a run's jobs (by index) into parts settled side by side, each part in
// order. On a FIFO queue a part is a group, so its messages leave SQS in the group's order
// (a later one is never deleted while an earlier one's delete may still fail); elsewhere every
// message is a part of its own.
func settleOrder(jobs []*job, fifo bool) [][]int {
	var parts [][]int
	at := map[string]int{}
	for i, j := range jobs {
		if !fifo {
			parts = append(parts, []int{i})
			continue
		}
		k, ok := at[j.msg.GroupID]
		if !ok {
			k = len(parts)
			at[j.msg.GroupID] = k
			parts = append(parts, nil)
		}
		parts[k] = append(parts[k], i)
	}
	return parts
}

// tooOld reports a message sent longer ago than --max-message-age.
func (r *runner) tooOld(j *job) bool {
	m := j.msg
	old := r.cfg.MaxMessageAge > 0 && !m.SentAt.IsZero() && time.Since(m.SentAt) > r.cfg.MaxMessageAge
	if old {
		j.log.Warn("message older than --max-message-age: dead-lettering without running it", "sent", m.SentAt.Format(time.RFC3339))
	}
	return old
}

// count records an outcome's metrics.
func (r *runner) count(o outcome) {
	add := func(ok bool, m alarms.Metric) {
		if ok {
			r.metrics.Add(m, 1)
		}
	}
	add(o.WorkerError, alarms.WorkerErrors)
	add(o.SpawnError, alarms.WorkerSpawnErrors)
	add(o.DeadLetter, alarms.DeadLetter)
	add(o.Duplicate, alarms.DuplicatesSkipped)
}

// runnerParts are the pieces of a listen a runner uses, shared with the rest of it.
type runnerParts struct {
	api     sqsAPI
	acks    *acker
	cut     *cutoff
	brake   *brake
	limiter *limits.Limiter
	metrics alarms.Recorder
	log     *slog.Logger
	random  func() float64
	tracer  *tracing.Provider
	tenants *Tenants
	s3      PayloadAPI
	dedupe  *deduper
	workers workers
}

// newRunner returns the runner of cfg's queue, whose rules q holds, running its jobs on
// p.workers. listen and try build their runners here alike.
func newRunner(cfg Config, q queueInfo, p runnerParts) *runner {
	return &runner{cfg: cfg, kind: p.workers.kind, dirs: p.workers.dirs,
		queueARN: q.arn, fifo: q.fifo, maxAttempts: q.maxAttempts, maxReceiveCount: q.maxReceiveCount, dlqURL: q.dlqURL,
		api: p.api, acks: p.acks, cut: p.cut, brake: p.brake, limiter: p.limiter, metrics: p.metrics, log: p.log, random: p.random,
		dedupe: p.dedupe, s3: p.s3, tracer: p.tracer, queueName: queueattr.NameFromURL(cfg.QueueURL), tenants: p.tenants}
}

// workers are the worker kind of a listen (or a try), which every queue's runs share, and
// the directories of the runs' files: a command's message and result files, and fetched
// payloads (nil for an HTTP worker without payloads).
type workers struct {
	kind worker.Kind
	dirs *worker.Dirs
}

// openWorkers makes the directories of the runs' files and builds the worker kind cfg names,
// not yet started: an application over HTTP (--http-worker), Lambda runtimes (--lambda), or a
// command run per job.
// spawn stands in for worker processes in tests (nil runs real ones).
func openWorkers(cfg Config, spawn worker.Spawn, log *slog.Logger) (workers, error) {
	var w workers
	if cfg.HTTP.URL == "" && !cfg.Lambda.Enabled || cfg.Payload.enabled() {
		dirs, err := worker.OpenDirs(cfg.TempDir, log)
		if err != nil {
			return w, err
		}
		w.dirs = dirs
	}
	switch {
	case cfg.HTTP.URL != "":
		w.kind = worker.NewHTTP(cfg.HTTP, runSlots(cfg), cfg.MaxJobDuration, w.dirs, log)
		return w, nil
	case cfg.Lambda.Enabled:
		w.kind = worker.NewLambda(worker.LambdaConfig{Command: cfg.Command, Environ: os.Environ(), Lambda: cfg.Lambda,
			QueueURL: cfg.QueueURL, Runtimes: runSlots(cfg), MaxDuration: cfg.MaxJobDuration, KillGrace: cfg.KillGrace,
			Restart: backoff.Exponential{Base: cfg.Backoff.Base, Max: min(cfg.Backoff.Max, time.Minute), Jitter: backoff.None}, Log: log})
		return w, nil
	}
	w.kind = worker.NewProcess(worker.ProcessConfig{Command: cfg.Command, Environ: os.Environ(), MaxDuration: cfg.MaxJobDuration,
		KillGrace: cfg.KillGrace, Volumes: cfg.Volumes, Dirs: w.dirs, Spawn: spawn})
	return w, nil
}

// close stops the worker kind and removes the runs' directories, once no run is under way.
func (w workers) close() {
	if w.kind != nil {
		w.kind.Stop()
	}
	w.dirs.Remove()
}

// runSlots is how many runs go on at once.
func runSlots(cfg Config) int {
	if cfg.Once {
		return 1
	}
	return cfg.Concurrency
}
