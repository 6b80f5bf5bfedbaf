package supervisor

// Running a worker: the message file written, the process (or the HTTP worker) run with the
// contract's environment, its result file read, and how the run ended logged and measured.

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/internal/tracing"
)

// runWorker writes the message file for jobs, runs the worker with the environment of the
// per-message or the batch contract, and reads the result it left: one directive for the
// message, or one per message of a batch, by message id.
func (r *runner) runWorker(ctx context.Context, jobs []*job) (workerRun, map[string]*directive) {
	batch := r.cfg.BatchSize > 1
	var log *slog.Logger
	if batch {
		log = r.log.With(append([]any{"batch_size", len(jobs), "first_message_id", jobs[0].msg.ID}, tracing.LogAttrs(ctx)...)...)
	} else {
		log = r.runLog(ctx, jobs[0]).With("attempt", jobs[0].attempt)
	}
	if r.http != nil {
		r.starting(jobs)
		ctx := ctx
		if r.cfg.MaxJobDuration > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeoutCause(ctx, r.cfg.MaxJobDuration, errTimedOut)
			defer cancel()
		}
		body, err := r.httpBody(jobs)
		if err != nil {
			run := workerRun{End: endSpawnError, Err: err}
			r.logRun(log, run)
			return run, nil
		}
		if body != nil {
			defer body.remove()
		}
		run, directives := r.http.post(ctx, jobs, batch, jobs[0].attempt, body)
		r.logRun(log, run)
		return run, directives
	}
	files, err := r.messageFile(jobs)
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
		Command: r.command, Env: slices.Concat(r.baseEnv, r.env(jobs, *files, deadline), tracing.Env(ctx)),
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

// messageFile writes the run's message file: the body, or the batch, as the worker reads it.
// A fetched payload is the message file of a run of one message as it is; a batch with one is
// written streaming from its file.
func (r *runner) messageFile(jobs []*job) (*jobFiles, error) {
	switch {
	case r.cfg.BatchSize > 1 && hasFetched(jobs):
		files, err := r.batchFile(jobs, false)
		if err != nil {
			return nil, fmt.Errorf("write message file: %w", err)
		}
		return files, nil
	case r.cfg.BatchSize > 1:
		return r.writeJobFiles(string(encodeBatch(jobs)))
	case jobs[0].fetched != nil:
		f := jobs[0].fetched
		jobs[0].fetched = nil // the run's files now, removed with them
		return f.files, nil
	}
	return r.writeJobFiles(jobs[0].msg.Body)
}

// httpBody is the file an HTTP worker's POST streams its body from, when the run has a
// fetched payload: the payload, or the batch written with it; nil otherwise, when the body is
// in memory.
func (r *runner) httpBody(jobs []*job) (*jobFiles, error) {
	switch {
	case !hasFetched(jobs):
		return nil, nil
	case r.cfg.BatchSize > 1:
		files, err := r.batchFile(jobs, true)
		if err != nil {
			return nil, fmt.Errorf("write the request body: %w", err)
		}
		return files, nil
	}
	f := jobs[0].fetched
	jobs[0].fetched = nil
	return f.files, nil
}

// starting measures the messages' age, per tenant too, and logs their bodies when asked, as
// their run starts.
func (r *runner) starting(jobs []*job) {
	for _, j := range jobs {
		if !j.msg.SentAt.IsZero() {
			age := time.Since(j.msg.SentAt)
			r.metrics.Add(alarms.MessageAge, float64(age.Milliseconds()))
			r.tenants.Record(r.queueName, j.msg.GroupID, age)
		}
		switch {
		case r.cfg.LogBodies && j.payload != nil:
			j.log.Info("starting worker", "body", j.msg.Body, "payload", j.payload.URI())
		case r.cfg.LogBodies:
			j.log.Info("starting worker", "body", j.msg.Body)
		}
	}
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
