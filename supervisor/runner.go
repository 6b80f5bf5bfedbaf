package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/backoff"
	"github.com/watchbot/watchbot/internal/dlqattr"
	"github.com/watchbot/watchbot/internal/sqsspec"
)

// runner runs workers: one path for one message or a batch. It writes the message file,
// builds the worker's environment, runs the worker, reads its result, decides each
// message's outcome with outcomeFor, and settles each message through settle.
type runner struct {
	cfg     Config
	command []string // cfg.Command with its path resolved
	baseEnv []string // the supervisor's environment, which every worker inherits
	fifo    bool
	// maxAttempts is the effective --max-attempts; maxReceiveCount and dlqURL are the
	// redrive policy's (0 and "" without one).
	maxAttempts     int
	maxReceiveCount int
	dlqURL          string

	api     sqsAPI
	acks    *acker
	brake   *brake
	metrics alarms.Recorder
	log     *slog.Logger
	random  func() float64
	// spawn runs one worker process: runWorker, or a stand-in in tests.
	spawn func(context.Context, workerSpec, *slog.Logger) workerRun
	// http, when set, takes the place of the worker command (--http-worker).
	http *httpWorker
	// dedupe, when set, claims each message's key before it runs (--dedupe-table).
	dedupe *deduper

	// dirs hold the jobs' message and result files (nil for an HTTP worker); jobSeq names
	// those of a spill.
	dirs   *workDirs
	jobSeq atomic.Uint64
	// slots name the work directory's job files.
	slots slotFiles
}

// run runs the worker once for jobs (one message, or a batch) and settles each message.
// ended is called as soon as the worker is over, with how long it ran (0 when none ran),
// before the messages are settled, so its slot can serve another run while their acks go
// out. It returns how each job left the run (disps[i] is jobs[i]'s), for the scheduler.
func (r *runner) run(ctx context.Context, jobs []*job, ended func(took time.Duration)) []disposition {
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	a := r.attempt(runCtx, cancel, jobs)
	for _, j := range jobs {
		j.detach()
	}
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
	r.dedupe.finish(ctx, jobs, outs)
	return r.settleRun(ctx, jobs, outs, decided, attrs)
}

// settleRun settles each message of a run by its outcome (counting the outcomes decided in
// this run), and returns how each left the run. FIFO groups settle in order, each group
// apart; a message whose delete or dead-letter send failed stops its group too.
func (r *runner) settleRun(ctx context.Context, jobs []*job, outs []outcome, decided []bool, attrs []any) []disposition {
	disps := make([]disposition, len(jobs))
	settlePart := func(part []int) {
		stopped, inPlace := false, false
		for _, i := range part {
			o := outs[i]
			if stopped {
				o = behind(inPlace, o)
			}
			if !decided[i] {
				r.count(o)
			}
			d := r.settle(ctx, jobs[i], o, attrs...)
			disps[i] = d
			if !stopped && o.Action.leavesGroup() && (d.keep || d.returned) {
				stopped, inPlace = true, d.keep
			}
		}
	}
	parts := settleOrder(jobs, r.fifo)
	if len(parts) == 1 {
		settlePart(parts[0]) // a run of one message, most often: no goroutine to start and grow
		return disps
	}
	var settling sync.WaitGroup
	for _, part := range parts {
		settling.Go(func() { settlePart(part) })
	}
	settling.Wait()
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
		a.results[i] = result{Attempt: j.attempt, MaxAttempts: r.maxAttempts, MaxReceiveCount: r.maxReceiveCount, OnReject: r.cfg.OnReject, FIFO: r.fifo}
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
	if len(live) == 0 {
		return a
	}
	run, directives := r.runWorker(ctx, live)
	a.ran, a.took = true, run.Duration
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

// brakeFailure reports whether a run failed as the brake counts failures: it ended badly
// without the worker deciding the message's fate.
func brakeFailure(res result) bool {
	if res.Directive != nil {
		return false
	}
	switch res.End {
	case endSignaled, endTimedOut, endSpawnError, endHTTPStatus:
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

// runWorker writes the message file for jobs, runs the worker with the environment of the
// per-message or the batch contract, and reads the result it left: one directive for the
// message, or one per message of a batch, by message id.
func (r *runner) runWorker(ctx context.Context, jobs []*job) (workerRun, map[string]*directive) {
	batch := r.cfg.BatchSize > 1
	log := jobs[0].log.With("attempt", jobs[0].attempt)
	if batch {
		log = r.log.With("batch_size", len(jobs), "first_message_id", jobs[0].msg.ID)
	}
	if r.http != nil {
		r.starting(jobs)
		ctx := ctx
		if r.cfg.MaxJobDuration > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeoutCause(ctx, r.cfg.MaxJobDuration, errTimedOut)
			defer cancel()
		}
		run, directives := r.http.post(ctx, jobs, batch, jobs[0].attempt)
		r.logRun(log, run)
		return run, directives
	}
	content := jobs[0].msg.Body
	if batch {
		content = string(encodeBatch(jobs))
	}
	files, err := r.writeJobFiles(content)
	if err != nil {
		run := workerRun{End: endSpawnError, Err: err}
		r.logRun(log, run)
		return run, nil
	}
	defer files.remove()
	var deadline time.Time
	if r.cfg.MaxJobDuration > 0 {
		deadline = time.Now().Add(r.cfg.MaxJobDuration)
	}
	r.starting(jobs)
	run := r.spawn(ctx, workerSpec{
		Command: r.command, Env: append(slices.Clip(r.baseEnv), r.env(jobs, *files, deadline)...),
		StdinPath: files.message, Stdin: files.stdin,
		MaxDuration: r.cfg.MaxJobDuration, KillGrace: r.cfg.KillGrace,
		Started: func(pgid int) {
			for _, j := range jobs {
				j.setProcessGroup(pgid)
			}
		},
	}, log)
	r.emptyVolumes(log)
	r.logRun(log, run)
	if run.End == endSpawnError || run.End == endLeaseLost {
		return run, nil
	}
	return run, r.results(jobs, files, log)
}

// starting measures the messages' age and logs their bodies when asked, as their run starts.
func (r *runner) starting(jobs []*job) {
	for _, j := range jobs {
		if !j.msg.SentAt.IsZero() {
			r.metrics.Add(alarms.MessageAge, float64(time.Since(j.msg.SentAt).Milliseconds()))
		}
		if r.cfg.LogBodies {
			j.log.Info("starting worker", "body", j.msg.Body)
		}
	}
}

// env returns the worker's variables: the message's (Watchbot's names and WATCHBOT_*), or a
// batch's.
func (r *runner) env(jobs []*job, files jobFiles, deadline time.Time) []string {
	if r.cfg.BatchSize == 1 {
		j := jobs[0]
		return buildEnv(j.msg, jobEnv{Attempt: j.attempt, QueueURL: r.cfg.QueueURL, MaxAttempts: r.maxAttempts,
			MessageFile: files.message, ResultFile: files.result, Deadline: deadline})
	}
	env := []string{
		"WATCHBOT_MESSAGE_FILE=" + files.message,
		"WATCHBOT_RESULT_FILE=" + files.result,
		"WATCHBOT_BATCH_SIZE=" + strconv.Itoa(len(jobs)),
		"WATCHBOT_MAX_ATTEMPTS=" + strconv.Itoa(r.maxAttempts),
		"WATCHBOT_QUEUE_URL=" + r.cfg.QueueURL,
	}
	if !deadline.IsZero() {
		env = append(env, "WATCHBOT_DEADLINE="+deadline.UTC().Format(time.RFC3339))
	}
	return env
}

// results reads what the worker wrote to its result file: a directive for the message, or
// one line per message of a batch. What cannot be used is logged; the exit code then decides.
// It notes in files a result file the worker did not write, which is then not removed.
func (r *runner) results(jobs []*job, files *jobFiles, log *slog.Logger) map[string]*directive {
	path := files.result
	if r.cfg.BatchSize == 1 {
		d, found, err := readDirective(path)
		files.noResult = !found
		if err != nil {
			log.Error("ignoring the worker's result file; following its exit code", "error", err)
		}
		if d == nil {
			return nil
		}
		return map[string]*directive{jobs[0].msg.ID: d}
	}
	f, err := os.Open(path)
	if err != nil {
		files.noResult = os.IsNotExist(err)
		if !files.noResult {
			log.Error("could not read the batch's result file; every message follows the exit code", "error", err)
		}
		return nil
	}
	defer f.Close()
	ids := make(map[string]bool, len(jobs))
	for _, j := range jobs {
		ids[j.msg.ID] = true
	}
	results, warnings := parseBatchResults(f, ids)
	for _, w := range warnings {
		log.Warn("batch result ignored", "problem", w)
	}
	return results
}

// settle applies an outcome to one message and returns how the message left its run. Before
// it acts on SQS it marks the job settled and waits for a renewal under way (beginSettle), so
// no renewal can land after the outcome's own visibility change; it holds no lock meanwhile.
// A job the outcome keeps held (its call failed and is tried again in place) is renewed again.
func (r *runner) settle(ctx context.Context, j *job, o outcome, attrs ...any) disposition {
	return r.settleAs(ctx, j, o, false, attrs...)
}

// settleLeaving settles a message that leaves watchbot whatever the outcome: a hand-back.
func (r *runner) settleLeaving(ctx context.Context, j *job, o outcome) disposition {
	return r.settleAs(ctx, j, o, true)
}

func (r *runner) settleAs(ctx context.Context, j *job, o outcome, leaving bool, attrs ...any) disposition {
	log := j.log.With(append([]any{"attempt", j.attempt, "outcome", o.Action.String()}, attrs...)...)
	switch o.Action {
	case actRetryInPlace:
		attempt := j.attempt
		if o.Unrun {
			// Its waits space its claims as attempts would: on a FIFO queue a wait is none.
			attempt += j.dedupeWaits
		}
		delay := r.delay(o, attempt)
		if o.Probe {
			log.Info("probe failed: watchbot keeps the message, leased, and probes with it again; the run is not counted as an attempt",
				"reason", o.Reason, "probe_in_seconds", sqsspec.Seconds(delay))
			return disposition{keep: true, at: time.Now().Add(delay)}
		}
		if o.Unrun {
			level := slog.LevelInfo
			if j.dedupeWaits > 0 {
				level = slog.LevelDebug
			}
			j.dedupeWaits++
			log.Log(ctx, level, "message waits in place, leased and unrun, until its dedupe key can be claimed: watchbot keeps it, and its group's later messages; not an attempt",
				"reason", o.Reason, "retry_in_seconds", sqsspec.Seconds(delay), "waits", j.dedupeWaits)
			return disposition{keep: true, at: time.Now().Add(delay)}
		}
		log.Info("message will be retried in place: watchbot keeps it, and its group's later messages, leased",
			"reason", o.Reason, "retry_in_seconds", sqsspec.Seconds(delay))
		return disposition{keep: true, at: time.Now().Add(delay), attempt: true}
	case actHold:
		log.Info("message held: an earlier message of its group is retried in place first", "reason", o.Reason)
		return disposition{keep: true, attempt: o.Attempted}
	}
	d := r.act(ctx, j, j.beginSettle(), o, log)
	if d.keep && !leaving {
		j.resumed()
	}
	return d
}

// act performs an outcome's SQS action on the delivery dl of j, and says how the message left.
func (r *runner) act(ctx context.Context, j *job, dl delivery, o outcome, log *slog.Logger) disposition {
	returned := disposition{returned: true}
	switch o.Action {
	case actDelete:
		if err := r.acks.delete(dl.receipt, r.fifo); err != nil {
			return r.failed(j, log, o, err, "delete failed")
		}
		if o.Success {
			r.metrics.Add(alarms.MessagesProcessed, 1)
			log.Info("message done")
		} else {
			log.Warn("message deleted", "reason", o.Reason)
		}
	case actRetry:
		r.setVisibility(dl, log, r.delay(o, j.attempt), "message will be retried", o.Reason)
		return returned
	case actRelease:
		r.setVisibility(dl, log, 0, "message released", o.Reason)
		return returned
	case actRedrive:
		r.setVisibility(dl, log, 0, "message left to the redrive policy: it moves to the dead-letter queue on its next receive", o.Reason)
		return returned
	case actDeadLetter:
		if r.dlqURL == "" {
			if err := r.acks.delete(j.receipt, r.fifo); err != nil {
				return r.failed(j, log, o, err, "delete failed")
			}
			log.Error("message deleted: it would be dead-lettered, but there is no dead-letter queue (--allow-no-dlq), so this line is its only record",
				"reason", o.Reason, "body", j.msg.Raw, "attributes", j.msg.Attributes)
			return disposition{}
		}
		if err := r.sendToDLQ(ctx, j, o.Reason); err != nil {
			if r.fifo {
				return r.failed(j, log, o, err, "could not dead-letter the message")
			}
			log.Error("could not dead-letter the message; it stays in the queue and will be retried", "error", err, "reason", o.Reason)
			r.setVisibility(dl, log, r.retryDelay(j.attempt), "message will be retried", "dead-letter send failed")
			return returned
		}
		if err := r.acks.delete(dl.receipt, r.fifo); err != nil {
			sent := outcome{Action: actDelete, Reason: "already in the dead-letter queue (" + o.Reason + ")"}
			return r.failed(j, log, sent, err, "dead-lettered but the delete failed")
		}
		log.Error("message dead-lettered", "reason", o.Reason, "dead_letter_queue", r.dlqURL)
	case actAbandon:
		// Given up for lost, the lease may be watchbot's still: a renewal that SQS took
		// late, or a new delivery taken over. Released, the message comes back at once
		// rather than when that lease ends; a receipt that someone else's receive replaced
		// is refused and changes nothing.
		if err := r.acks.changeVisibility(dl.receipt, 0); err == nil {
			log.Warn("message released: its lease was given up for lost, but watchbot still held it", "reason", o.Reason)
			return returned
		}
		log.Warn("message left alone", "reason", o.Reason)
		return returned
	}
	return disposition{}
}

// settleBackoff spaces the retries of a FIFO message's delete or dead-letter send.
var settleBackoff = backoff.Exponential{Base: 500 * time.Millisecond, Max: 30 * time.Second, Jitter: backoff.Equal}

// failed handles an SQS call that failed while settling a message. On a
// FIFO queue a message whose lease still holds keeps its group's place and the call is tried
// again in place, so its successors never overtake it; elsewhere the message is left to come
// back when its lease ends.
func (r *runner) failed(j *job, log *slog.Logger, o outcome, err error, what string) disposition {
	if r.fifo && !leaseGone(err) {
		j.settleFailures++
		delay := settleBackoff.Delay(j.settleFailures, r.random)
		log.Error(what+"; watchbot keeps the message and its group's place, and tries again", "error", err,
			"reason", o.Reason, "retry_in", delay.Round(time.Millisecond).String())
		return disposition{keep: true, at: time.Now().Add(delay), pending: &o}
	}
	log.Error(what+": the message will be delivered again after its visibility timeout", "error", err, "reason", o.Reason)
	return disposition{returned: r.fifo}
}

// delay is how long a retry waits: the outcome's own delay, or the backoff of the attempt.
func (r *runner) delay(o outcome, attempt int) time.Duration {
	if o.DelayFromBackoff {
		return r.retryDelay(attempt)
	}
	return o.Delay
}

// retryDelay is how long a failed attempt waits: --retry-delay when set, else the backoff.
func (r *runner) retryDelay(attempt int) time.Duration {
	if r.cfg.RetryDelay > 0 {
		return r.cfg.RetryDelay
	}
	return r.cfg.Backoff.Delay(attempt, r.random)
}

// setVisibility makes the delivered message visible again after delay, never past the 12 h
// limit.
func (r *runner) setVisibility(dl delivery, log *slog.Logger, delay time.Duration, what, reason string) {
	left := sqsspec.MaxInFlight - time.Since(dl.receivedAt) - time.Second
	delay = max(0, min(delay, left))
	secs := sqsspec.Seconds(delay)
	if err := r.acks.changeVisibility(dl.receipt, secs); err != nil {
		log.Error("visibility change failed: the message will be visible again when its lease ends", "error", err, "reason", reason)
		return
	}
	log.Info(what, "reason", reason, "visible_in_seconds", secs)
}

// sendToDLQ sends the message, as received (an SNS envelope stays an envelope), with its
// attributes and watchbot's to the dead-letter queue. The caller deletes it from the source
// only when this returns nil. On a FIFO dead-letter queue the message keeps its group id, and
// its message id is the deduplication id, so a send retried after a lost answer is stored once.
func (r *runner) sendToDLQ(ctx context.Context, j *job, reason string) error {
	m := j.msg
	cause := dlqattr.Cause{Reason: reason, SourceQueue: r.cfg.QueueURL, Attempts: j.attempt, Lineage: dlqattr.Lineage{
		OriginalMessageID: dlqattr.OriginalID(m.ID, m.SQSAttributes),
		ReplayedFrom:      dlqattr.ReadLineage(m.SQSAttributes).ReplayedFrom,
	}}
	attrs, ok := dlqattr.With(m.SQSAttributes, cause)
	if !ok {
		j.log.Warn("message has all its attribute slots taken, no room for watchbot's: the dead-letter reason is only in this log",
			"reason", reason, "attributes", len(m.SQSAttributes))
	}
	in := &sqs.SendMessageInput{
		QueueUrl:          aws.String(r.dlqURL),
		MessageBody:       aws.String(m.Raw),
		MessageAttributes: attrs,
	}
	if strings.HasSuffix(r.dlqURL, ".fifo") {
		group := m.GroupID
		if group == "" {
			group = "watchbot"
		}
		in.MessageGroupId = aws.String(group)
		in.MessageDeduplicationId = aws.String(m.ID)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.AckTimeout)
	defer cancel()
	if _, err := r.api.SendMessage(ctx, in); err != nil {
		return fmt.Errorf("send to dead-letter queue: %w", err)
	}
	return nil
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

// logRun logs and measures how a worker run ended.
func (r *runner) logRun(log *slog.Logger, run workerRun) {
	if run.End != endSpawnError {
		r.metrics.Add(alarms.WorkerDuration, float64(run.Duration.Milliseconds()))
	}
	// A failed run is a warning (the message is retried, and the WorkerErrors alarm counts it);
	// a message that leaves for the dead-letter queue is the error.
	switch run.End {
	case endSpawnError:
		log.Error("worker could not start", "error", run.Err)
	case endSignaled:
		log.Warn("worker killed by a signal", "signal", run.ExitCode, "duration", run.Duration.String())
	case endTimedOut:
		if r.http != nil && run.Err != nil {
			log.Warn("worker stopped", "reason", run.Err, "duration", run.Duration.String())
			break
		}
		log.Warn("worker stopped: it ran longer than --max-job-duration", "limit", r.cfg.MaxJobDuration.String())
	case endHTTPStatus:
		log.Warn("worker answered a failure", "status", run.ExitCode, "error", run.Err, "duration", run.Duration.String())
	case endShutdown, endCeiling, endLeaseLost:
		log.Warn("worker stopped by watchbot", "reason", run.Err, "duration", run.Duration.String())
	default:
		// A success is logged once, with its outcome; a failure's exit code is worth a line.
		level := slog.LevelWarn
		if run.ExitCode == 0 {
			level = slog.LevelDebug
		}
		log.Log(context.Background(), level, "worker finished", "exit_code", run.ExitCode, "duration", run.Duration.String())
	}
}

// emptyVolumes removes everything inside each --volumes directory.
func (r *runner) emptyVolumes(log *slog.Logger) {
	for _, v := range r.cfg.Volumes {
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

// jobFiles are one job's message and result files.
type jobFiles struct {
	message, result string
	// stdin is the message file, open at its start: the worker's stdin.
	stdin *os.File
	// noResult: the result file was looked for and the worker had not written it.
	noResult bool
	// kept is the pool the files' slot is from, which keeps the message file for a later
	// job; nil for files of this job alone (a spill).
	kept *slotFiles
	slot int
	size int64 // of the message file, once written
}

// slotFiles are the names of the work directory's job files, a message and a result file
// per run at a time, used by one job after another. Creating and removing a file per job
// changes the directory twice, under its lock, and costs several times more than writing a
// file that is there (docs/performance.md); and looking for a result
// file under a new name each time leaves the kernel a cached entry per job. A process a
// worker left outside its process group, which outlives the worker, could still write to a
// slot's files while a later job has them: a worker must not leave one doing so.
type slotFiles struct {
	dir  string
	mu   sync.Mutex
	free []int
	next int
}

func (m *slotFiles) take() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n := len(m.free); n > 0 {
		slot := m.free[n-1]
		m.free = m.free[:n-1]
		return slot
	}
	m.next++
	return m.next
}

func (m *slotFiles) put(slot int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.free = append(m.free, slot)
}

// slotJobFiles names a job's files: a slot's of the pool, for the job's time.
func (r *runner) slotJobFiles() *jobFiles {
	slot := r.slots.take()
	n := filepath.Join(r.slots.dir, strconv.Itoa(slot))
	return &jobFiles{message: n + ".message", result: n + ".result.json", kept: &r.slots, slot: slot}
}

// newJobFiles names files of a job's own in dir: unique, created by no one yet.
func (r *runner) newJobFiles(dir string) *jobFiles {
	n := filepath.Join(dir, strconv.FormatUint(r.jobSeq.Add(1), 10))
	return &jobFiles{message: n + ".message", result: n + ".result.json"}
}

// makeWorkDirs makes the directories that hold the jobs' files (openWorkDirs), unless the
// worker is an HTTP application, which gets no files.
func (r *runner) makeWorkDirs() error {
	if r.http != nil {
		return nil
	}
	log := r.log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dirs, err := openWorkDirs(r.cfg.TempDir, sharedMemory, os.TempDir(), log)
	if err != nil {
		return err
	}
	r.dirs = dirs
	r.slots.dir = dirs.work
	return nil
}

func (r *runner) removeWorkDirs() { r.dirs.remove() }

// writeJobFiles writes the message file, one of the pool's in the work directory, or one of
// its own in the spill directory when the work directory is full, and leaves it open at its
// start for the worker's stdin. When neither takes it, the error says so and names
// --temp-dir: the job then fails its attempt, as a worker that could not start.
func (r *runner) writeJobFiles(body string) (*jobFiles, error) {
	files := r.slotJobFiles()
	err := files.write(body)
	if err != nil && r.dirs.spillParent != "" {
		files.remove()
		spill, serr := r.dirs.spillDir()
		if serr != nil {
			return nil, fmt.Errorf("write message file: %w; %w (set --temp-dir to a writable volume)", err, serr)
		}
		files = r.newJobFiles(spill)
		err = files.write(body)
	}
	if err != nil {
		files.remove()
		return nil, fmt.Errorf("write message file: %w", err)
	}
	return files, nil
}

// keptBody is the most of a body a kept message file holds on to while its slot waits.
// Emptying the file frees its pages, and the next job allocates them again: that costs more
// than the whole rest of writing a small message (docs/performance.md), so a small
// body is written over instead, and only a larger one is emptied out.
const keptBody = 64 * 1024

// remove closes the job's files and removes them, but a kept message file: that goes back to
// the pool, emptied when its body is large. A slot whose result file stays goes out of use.
func (f *jobFiles) remove() {
	gone := true
	if !f.noResult {
		err := os.Remove(f.result)
		gone = err == nil || errors.Is(err, os.ErrNotExist)
	}
	if f.kept == nil {
		_ = os.Remove(f.message)
	} else if f.stdin == nil || f.size > keptBody && f.stdin.Truncate(0) != nil {
		// Not opened, or not emptied: the slot's next job makes it anew.
		_ = os.Remove(f.message)
	}
	if f.stdin != nil {
		f.stdin.Close()
	}
	if f.kept != nil && gone {
		f.kept.put(f.slot)
	}
	f.kept = nil
}
