package worker

// The process kind: a worker process per run, given its message file as stdin and in
// WATCHBOT_MESSAGE_FILE, the contract's environment, and a result file to write.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/setting"
	"github.com/watchbot/watchbot/internal/tracing"
)

// ProcessConfig is what the process kind runs, and how.
type ProcessConfig struct {
	// Command is the worker, exec'd directly with no shell; Start finds its program.
	Command []string
	// Environ is watchbot's own environment (os.Environ()), which every worker inherits but
	// for the trace context.
	Environ []string
	// MaxDuration stops a worker that runs longer (--max-job-duration; 0: never); KillGrace
	// is the wait between its SIGTERM and SIGKILL.
	MaxDuration, KillGrace time.Duration
	// Volumes are directories emptied after every run.
	Volumes []string
	// Dirs hold the runs' message and result files.
	Dirs *Dirs
	// Spawn runs each process; nil runs real ones.
	Spawn Spawn
}

// Process runs a worker process per job.
type Process struct {
	cfg     ProcessConfig
	environ []string // cfg.Environ without the trace context
	spawn   Spawn
	// command is cfg.Command with its program's path, found by Start.
	command []string
}

var _ Kind = (*Process)(nil)

// NewProcess returns the process kind of cfg.
func NewProcess(cfg ProcessConfig) *Process {
	p := &Process{cfg: cfg, environ: inheritedEnv(cfg.Environ), spawn: cfg.Spawn}
	if p.spawn == nil {
		p.spawn = spawn
	}
	return p
}

// Start finds the command's program and checks the volumes, so that a command that cannot
// run is refused before any message is received.
func (p *Process) Start(context.Context) error {
	command, err := resolve(p.cfg.Command)
	if err != nil {
		return err
	}
	for _, v := range p.cfg.Volumes {
		if fi, err := os.Stat(v); err != nil || !fi.IsDir() {
			return setting.Refuse(listenspec.SettingVolumes, v, "is not a directory")
		}
	}
	p.command = command
	return nil
}

// Stop does nothing: every process ended with its run.
func (p *Process) Stop() {}

// Ready is always true: each run starts its own process.
func (p *Process) Ready() (bool, string) { return true, "" }

// resolve finds the worker command's program as starting it would, and returns the command
// with the program's path: listen and try refuse a command that cannot be run before any
// message is received or run.
func resolve(command []string) ([]string, error) {
	path, err := exec.LookPath(command[0])
	if err != nil {
		if e, ok := errors.AsType[*exec.Error](err); ok {
			err = e.Err
		}
		return nil, setting.Refuse("", nil, fmt.Sprintf("worker command %q: %v", command[0], err))
	}
	return append([]string{path}, command[1:]...), nil
}

// ExitRelease is the exit status with which a worker releases its message (the outcome
// table's, docs/outcomes.md): the worker's decision, logged as information, not a failure.
const ExitRelease = 4

// The process's exit on the run's span.
const (
	attrExitCode = attribute.Key("watchbot.exit_code")
	attrSignal   = attribute.Key("watchbot.signal")
)

// Run writes the message file for job, runs the worker with the environment of the
// per-message or the batch contract, and reads the result it left: one directive for the
// message, or one per message of a batch, by message id.
func (p *Process) Run(ctx context.Context, job Job) Result {
	files, err := p.messageFile(job)
	if err != nil {
		res := Result{End: NotStarted, Err: err}
		logEnd(job.Log, res, p.cfg.MaxDuration)
		return res
	}
	defer files.remove()
	var deadline time.Time
	if p.cfg.MaxDuration > 0 {
		deadline = time.Now().Add(p.cfg.MaxDuration)
	}
	res := p.spawn(ctx, Spec{
		Command: p.command, Env: slices.Concat(p.environ, p.env(job, *files, deadline), tracing.Env(ctx)),
		StdinPath: files.message, Stdin: files.stdin,
		MaxDuration: p.cfg.MaxDuration, KillGrace: p.cfg.KillGrace, Started: job.Started,
	}, job.Log)
	p.emptyVolumes(job.Log)
	logEnd(job.Log, res, p.cfg.MaxDuration)
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		switch res.End {
		case Exited:
			span.SetAttributes(attrExitCode.Int(res.Code))
		case Signaled:
			span.SetAttributes(attrSignal.Int(res.Code))
		}
	}
	if res.End != NotStarted {
		res.Directives = p.results(job, files)
	}
	return res
}

// messageFile writes the run's message file: the body, or the batch, as the worker reads it.
// A fetched payload is the message file of a run of one message as it is; a batch with one is
// written streaming from its file.
func (p *Process) messageFile(job Job) (*jobFiles, error) {
	d := p.cfg.Dirs
	switch {
	case job.Batch && hasPayload(job.Messages):
		files, err := d.batchFile(job.Messages, false)
		if err != nil {
			return nil, fmt.Errorf("write message file: %w", err)
		}
		return files, nil
	case job.Batch:
		return d.writeJobFiles(string(encodeBatch(job.Messages)))
	case job.Messages[0].Payload != nil:
		return job.Messages[0].Payload.take(), nil
	}
	return d.writeJobFiles(job.Messages[0].Body)
}

// results reads what the worker wrote to its result file: a directive for the message, or
// one line per message of a batch. What cannot be used is logged; the exit code then decides.
// It notes in files a result file the worker did not write, which is then not removed.
func (p *Process) results(job Job, files *jobFiles) map[string]*Directive {
	path, log := files.result, job.Log
	if !job.Batch {
		d, found, err := readDirective(path)
		files.noResult = !found
		if err != nil {
			log.Error("ignoring the worker's result file; following its exit code", "error", err)
		}
		if d == nil {
			return nil
		}
		return map[string]*Directive{job.Messages[0].ID: d}
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
	results, warnings := parseBatchResults(f, batchIDs(job.Messages))
	for _, w := range warnings {
		log.Warn("batch result ignored", "problem", w)
	}
	return results
}

// batchIDs is the set of a batch's message ids.
func batchIDs(msgs []Message) map[string]bool {
	ids := make(map[string]bool, len(msgs))
	for _, m := range msgs {
		ids[m.ID] = true
	}
	return ids
}

// emptyVolumes removes everything inside each --volumes directory.
func (p *Process) emptyVolumes(log *slog.Logger) {
	for _, v := range p.cfg.Volumes {
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

// logEnd logs how a run ended. A failed run is a warning (the message is retried, and the
// WorkerErrors alarm counts it); a message that leaves for the dead-letter queue is the
// error, logged where its outcome is decided. limit is the run's --max-job-duration.
func logEnd(log *slog.Logger, res Result, limit time.Duration) {
	switch res.End {
	case NotStarted:
		log.Error("worker could not start", "error", res.Err)
	case Signaled:
		log.Warn("worker killed by a signal", "signal", res.Code, "duration", res.Duration.String())
	case TimedOut:
		if errors.Is(res.Err, ErrTimedOut) || res.Err == nil {
			log.Warn("worker stopped: it ran longer than --max-job-duration", "limit", limit.String())
			break
		}
		log.Warn("worker stopped", "reason", res.Err, "duration", res.Duration.String())
	case Failed:
		// A failure names its status, or the error that ended the answer: never a nil error.
		attrs := []any{"duration", res.Duration.String()}
		if res.Code != 0 {
			attrs = append(attrs, "status", res.Code)
		}
		if res.Err != nil {
			attrs = append(attrs, "error", res.Err)
		}
		log.Warn("worker answered a failure", attrs...)
	case Stopped:
		log.Warn("worker stopped by watchbot", "reason", res.Err, "duration", res.Duration.String())
	case FunctionFailed:
		log.Warn("the function failed", "error", res.Err, "duration", res.Duration.String())
	case Succeeded:
		log.Debug("worker finished", "duration", res.Duration.String())
	default:
		// A success is logged once, with its outcome; a failure's exit code is worth a
		// warning; a release is the worker's decision, not a failure.
		level := slog.LevelWarn
		switch res.Code {
		case 0:
			level = slog.LevelDebug
		case ExitRelease:
			level = slog.LevelInfo
		}
		log.Log(context.Background(), level, "worker finished", "exit_code", res.Code, "duration", res.Duration.String())
	}
}
