package supervisor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"
)

// batchLine is one message of a batch as the worker reads it: one JSON object per line on
// stdin and in WATCHBOT_MESSAGE_FILE.
type batchLine struct {
	ID            string            `json:"id"`
	Body          string            `json:"body"`
	Subject       string            `json:"subject,omitempty"`
	Attributes    map[string]string `json:"attributes"`
	Attempt       int               `json:"attempt"`
	SentTimestamp string            `json:"sentTimestamp,omitempty"`
	GroupID       string            `json:"groupId,omitempty"`
}

func encodeBatch(jobs []*job) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for _, j := range jobs {
		m := j.msg
		line := batchLine{ID: m.ID, Body: m.Body, Subject: m.Subject, Attributes: m.Attributes, Attempt: m.Attempt, GroupID: m.GroupID}
		if !m.SentAt.IsZero() {
			line.SentTimestamp = m.SentAt.Format(time.RFC3339Nano)
		}
		_ = enc.Encode(line) // strings and maps of strings always encode
	}
	return buf.Bytes()
}

// maxBatchResults bounds how much of a batch's result file is read.
const maxBatchResults = 16 << 20

// parseBatchResults reads a batch's result file: one JSON object per line,
// {"id":…,"action":"ack"|"retry"|"dead-letter","delaySeconds":…,"reason":…}. The first valid
// line for a message wins. Lines that are malformed, name a message not in the batch, or
// repeat one already decided are returned as warnings and otherwise ignored.
func parseBatchResults(r io.Reader, ids map[string]bool) (map[string]*directive, []string) {
	results := map[string]*directive{}
	var warnings []string
	br := bufio.NewReaderSize(io.LimitReader(r, maxBatchResults), 64*1024)
	for n := 1; ; n++ {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			warnings = append(warnings, fmt.Sprintf("result line %d: longer than 64 KiB; ignored", n))
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			if err != nil {
				break
			}
			continue
		}
		if trimmed := bytes.TrimSpace(line); len(trimmed) > 0 {
			if w := addBatchResult(results, ids, trimmed); w != "" {
				warnings = append(warnings, fmt.Sprintf("result line %d: %s", n, w))
			}
		}
		if err != nil {
			break
		}
	}
	return results, warnings
}

func addBatchResult(results map[string]*directive, ids map[string]bool, line []byte) string {
	var res struct {
		ID string `json:"id"`
		directive
	}
	if err := json.Unmarshal(line, &res); err != nil {
		return fmt.Sprintf("not a JSON object (%v); ignored", err)
	}
	d := res.directive
	if err := d.validate(); err != nil {
		return fmt.Sprintf("%v; ignored", err)
	}
	switch {
	case res.ID == "":
		return "no id; ignored"
	case !ids[res.ID]:
		return fmt.Sprintf("message %q is not in this batch; ignored", res.ID)
	case results[res.ID] != nil:
		return fmt.Sprintf("message %q already has a result; the first one stands", res.ID)
	}
	results[res.ID] = &d
	return ""
}

// processBatch runs one worker for a batch and settles each message by its own result, or
// by the run's exit when it has none. cancel stops the shared worker.
func (s *Supervisor) processBatch(ctx context.Context, cancel context.CancelCauseFunc, batch []*job, release func()) {
	var live []*job
	var settled sync.WaitGroup
	settle := func(j *job, r result) {
		o := outcomeFor(r)
		s.count(o)
		settled.Go(func() { s.settle(ctx, j, o) })
	}
	for _, j := range batch {
		r := result{Attempt: j.msg.Attempt, MaxAttempts: s.maxAttempts, MaxReceiveCount: s.maxReceiveCount, OnReject: s.cfg.OnReject}
		switch {
		case j.stopped() != nil:
			// Stopped by the heartbeat while it waited for its batch to start.
			r.End = endFor(j.stopped())
			settle(j, r)
		case s.tooOld(j):
			r.End = endNotRun
			settle(j, r)
		case !j.attach(cancel, true):
			r.End = endFor(j.stopped())
			settle(j, r)
		default:
			live = append(live, j)
		}
	}
	if len(live) == 0 {
		release()
		settled.Wait()
		return
	}
	log := s.log.With("batch_size", len(live), "first_message_id", live[0].msg.ID)
	run, results := s.runBatch(ctx, live, log)
	release()
	for _, j := range live {
		r := result{End: run.End, ExitCode: run.ExitCode, Directive: results[j.msg.ID],
			Attempt: j.msg.Attempt, MaxAttempts: s.maxAttempts, MaxReceiveCount: s.maxReceiveCount, OnReject: s.cfg.OnReject}
		if errors.Is(j.stopped(), errLeaseLost) {
			r.End = endLeaseLost
		}
		settle(j, r)
	}
	settled.Wait()
}

// runBatch writes the batch's file, runs the worker and reads its results.
func (s *Supervisor) runBatch(ctx context.Context, batch []*job, log *slog.Logger) (workerRun, map[string]*directive) {
	files, err := s.writeJobFiles(string(encodeBatch(batch)))
	if err != nil {
		run := workerRun{End: endSpawnError, Err: err}
		s.logRun(log, run)
		return run, nil
	}
	defer files.remove()
	run := s.runWorkerFor(ctx, batch, files, func(deadline time.Time) []string {
		env := []string{
			"WATCHBOT_MESSAGE_FILE=" + files.message,
			"WATCHBOT_RESULT_FILE=" + files.result,
			"WATCHBOT_BATCH_SIZE=" + strconv.Itoa(len(batch)),
			"WATCHBOT_MAX_ATTEMPTS=" + strconv.Itoa(s.maxAttempts),
			"WATCHBOT_QUEUE_URL=" + s.cfg.QueueURL,
		}
		if !deadline.IsZero() {
			env = append(env, "WATCHBOT_DEADLINE="+deadline.UTC().Format(time.RFC3339))
		}
		return env
	}, log)
	if run.End == endSpawnError {
		return run, nil
	}
	f, err := os.Open(files.result)
	if err != nil {
		if !os.IsNotExist(err) {
			log.Error("could not read the batch's result file; every message follows the exit code", "error", err)
		}
		return run, nil
	}
	defer f.Close()
	ids := make(map[string]bool, len(batch))
	for _, j := range batch {
		ids[j.msg.ID] = true
	}
	results, warnings := parseBatchResults(f, ids)
	for _, w := range warnings {
		log.Warn("batch result ignored", "problem", w)
	}
	return run, results
}

// tooOld reports a message sent longer ago than --max-message-age.
func (s *Supervisor) tooOld(j *job) bool {
	m := j.msg
	old := s.cfg.MaxMessageAge > 0 && !m.SentAt.IsZero() && time.Since(m.SentAt) > s.cfg.MaxMessageAge
	if old {
		j.log.Warn("message older than --max-message-age: dead-lettering without running it", "sent", m.SentAt.Format(time.RFC3339))
	}
	return old
}
