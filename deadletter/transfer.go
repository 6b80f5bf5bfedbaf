package deadletter

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/internal/setting"
	"github.com/watchbot/watchbot/internal/sqsspec"
	"github.com/watchbot/watchbot/payload"
	"github.com/watchbot/watchbot/producer"
)

// PeekHold is how long peek keeps the messages it shows invisible before giving them back.
const PeekHold = 30 * time.Second

// CheckPeekLimit checks how many messages Peek is to show, without any I/O.
func CheckPeekLimit(limit int) error {
	if limit < 1 {
		return setting.Refuse(setting.Limit, limit, "must be at least 1")
	}
	return nil
}

// Peek shows up to limit messages (1 or more) without consuming them: each is received with a
// short visibility timeout, handed to each, and made visible again when Peek returns. SQS
// counts the receive: ApproximateReceiveCount grows by one. It returns how many were shown.
func Peek(ctx context.Context, api API, q Queues, limit int, each func(Message) error) (n int, err error) {
	if err := CheckPeekLimit(limit); err != nil {
		return 0, err
	}
	sc := newScanner(api, q.DLQ.URL, PeekHold)
	defer func() {
		if rerr := sc.release(ctx); rerr != nil && err == nil {
			err = rerr
		}
	}()
	for n < limit {
		batch, err := sc.next(ctx, limit-n)
		if err != nil {
			return n, err
		}
		if len(batch) == 0 {
			break
		}
		for _, m := range batch {
			sc.keep(m)
			if n == limit {
				continue
			}
			n++
			if err := each(m); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// SyncWriter is a file export can make durable before it deletes what it wrote.
type SyncWriter interface {
	io.Writer
	Sync() error
}

// ExportConfig shapes an export.
type ExportConfig struct {
	// Delete removes each message from the DLQ once its line is written and synced.
	Delete bool
	// Limit is the most messages to export; 0 means all.
	Limit int
	// Hold is how long received messages stay invisible during the walk (DefaultHold).
	Hold time.Duration
	// Progress counts exported messages.
	Progress Progress
	// Payloads, when set, fetches the body of each pointer message from S3 and writes it in
	// the message's line in place of the pointer (Record.Resolve). A body that cannot be
	// fetched is reported on Errs; its line keeps the pointer, and with Delete its message
	// stays in the DLQ.
	Payloads payload.Getter
	// Errs receives one line per body that could not be fetched.
	Errs io.Writer
}

// Validate checks the configuration without any I/O.
func (c ExportConfig) Validate() error {
	if c.Limit < 0 {
		return setting.Refuse(setting.Limit, c.Limit, "must not be negative")
	}
	return nil
}

// ExportSummary counts what export did.
type ExportSummary struct {
	Exported int `json:"exported"`
	// Deleted were removed from the DLQ after being written (with Delete).
	Deleted int `json:"deleted"`
	// NotDeleted were written but could not be deleted: they are in the file and the DLQ.
	NotDeleted int `json:"notDeleted"`
	// PayloadsResolved are the pointer messages whose body was fetched and written (with
	// Payloads); PayloadsFailed those whose body could not be fetched.
	PayloadsResolved int `json:"payloadsResolved,omitempty"`
	PayloadsFailed   int `json:"payloadsFailed,omitempty"`
}

// Export writes the DLQ's messages to w as JSON Lines, one Record per line. With Delete, each
// batch of lines is written and synced to disk before its messages are deleted, so a crash
// leaves every message in the file, the DLQ or both, never in neither. Without Delete the
// messages are made visible again when the export ends.
func Export(ctx context.Context, api API, q Queues, w SyncWriter, cfg ExportConfig) (sum ExportSummary, err error) {
	if err := cfg.Validate(); err != nil {
		return sum, err
	}
	e := newExporter(api, q.DLQ.URL, w, cfg, &sum)
	defer func() {
		if rerr := e.sc.release(ctx); rerr != nil && err == nil {
			err = rerr
		}
	}()
	for e.cfg.Limit == 0 || sum.Exported < e.cfg.Limit {
		batch, err := e.sc.next(ctx, upTo(e.cfg.Limit, sum.Exported))
		if err != nil {
			return sum, err
		}
		if len(batch) == 0 {
			break
		}
		deletable, err := e.write(ctx, batch)
		if err != nil {
			return sum, err
		}
		sum.Exported += len(batch)
		_ = e.cfg.Progress.Add(len(batch))
		if !e.cfg.Delete {
			continue
		}
		if err := w.Sync(); err != nil {
			return sum, fmt.Errorf("sync export (nothing deleted): %w", err)
		}
		e.remove(ctx, deletable)
	}
	if err := w.Sync(); err != nil {
		return sum, fmt.Errorf("sync export: %w", err)
	}
	return sum, ctx.Err()
}

// exporter is one Export walk: the DLQ it reads, the file it writes and what it counts.
type exporter struct {
	api    API
	dlqURL string
	w      SyncWriter
	cfg    ExportConfig
	sc     *scanner
	sum    *ExportSummary
	// buf holds the lines of a batch not written yet; enc encodes into it.
	buf *bytes.Buffer
	enc *json.Encoder
}

// newExporter starts an export of the DLQ at dlqURL to w, counting in sum; cfg's unset
// fields take their defaults.
func newExporter(api API, dlqURL string, w SyncWriter, cfg ExportConfig, sum *ExportSummary) *exporter {
	if cfg.Hold <= 0 {
		cfg.Hold = DefaultHold
	}
	if cfg.Progress == nil {
		cfg.Progress = NoProgress{}
	}
	if cfg.Errs == nil {
		cfg.Errs = io.Discard
	}
	buf := &bytes.Buffer{}
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	return &exporter{api: api, dlqURL: dlqURL, w: w, cfg: cfg, sc: newScanner(api, dlqURL, cfg.Hold), sum: sum, buf: buf, enc: enc}
}

// write writes batch's lines and keeps its messages until they are deleted. It returns the
// messages that may be deleted: not those whose body could not be fetched, whose line holds
// only the pointer.
func (e *exporter) write(ctx context.Context, batch []Message) ([]Message, error) {
	e.buf.Reset()
	deletable := batch[:0:0]
	for _, m := range batch {
		e.sc.keep(m) // until it is deleted
		rec := RecordOf(m)
		fetched := e.resolve(ctx, m, &rec)
		if err := e.enc.Encode(rec); err != nil {
			return nil, fmt.Errorf("encode message %s: %w", m.ID, err)
		}
		if fetched {
			deletable = append(deletable, m)
		}
		if e.buf.Len() >= exportFlushBytes {
			// A batch of fetched bodies is written out as it grows rather than held whole.
			if _, err := e.w.Write(e.buf.Bytes()); err != nil {
				return nil, fmt.Errorf("write export: %w", err)
			}
			e.buf.Reset()
		}
	}
	if _, err := e.w.Write(e.buf.Bytes()); err != nil {
		return nil, fmt.Errorf("write export: %w", err)
	}
	return deletable, nil
}

// resolve fetches the body of rec when it is a pointer and Payloads is set, and reports
// whether rec holds what the message stands for: false when the body could not be fetched.
func (e *exporter) resolve(ctx context.Context, m Message, rec *Record) bool {
	if e.cfg.Payloads == nil || rec.Payload == nil {
		return true
	}
	if err := rec.Resolve(ctx, e.cfg.Payloads); err != nil {
		e.sum.PayloadsFailed++
		fmt.Fprintf(e.cfg.Errs, "message %s: body not fetched from %s: %s; its line keeps the pointer\n", m.ID, rec.Payload.URI, rec.Payload.Error)
		return false
	}
	e.sum.PayloadsResolved++
	return true
}

// remove deletes from the DLQ the messages whose lines are synced; one whose delete fails
// stays kept, and is made visible again when the walk ends.
func (e *exporter) remove(ctx context.Context, deletable []Message) {
	failed := deleteMessages(context.WithoutCancel(ctx), e.api, e.dlqURL, deletable)
	for _, m := range deletable {
		if _, bad := failed[m.ID]; bad {
			e.sum.NotDeleted++
			continue
		}
		delete(e.sc.kept, m.ID)
		e.sum.Deleted++
	}
}

// exportFlushBytes is how much of a batch's lines export holds before writing them out.
const exportFlushBytes = 1 << 20

// ImportConfig shapes an import.
type ImportConfig struct {
	// Name is the file's name in error messages ("dlq.jsonl:12: ...").
	Name string
	// Errs receives one line per line that was not imported.
	Errs io.Writer
	// Progress counts lines read.
	Progress Progress
}

// ImportSummary counts what import did.
type ImportSummary struct {
	Imported int `json:"imported"`
	// Rejected lines were malformed, refused by the checks, or refused by SQS; nothing was sent
	// for them.
	Rejected int `json:"rejected"`
}

// Err is non-nil when some line was not imported.
func (s ImportSummary) Err() error {
	if s.Rejected == 0 {
		return nil
	}
	return fmt.Errorf("import: %d lines not imported (listed above); the other %d were sent", s.Rejected, s.Imported)
}

// maxImportLine bounds one line: a 1 MiB body with every character escaped fits.
const maxImportLine = 16 << 20

// Import sends the Records read from r (JSON Lines, as Export writes them) to the DLQ: body,
// message attributes and, on FIFO queues, the group id with a fresh deduplication id. System
// attributes cannot be set and are not sent. A line that is malformed, that SQS would refuse
// (empty body, characters outside XML's, larger than the queue's MaximumMessageSize, bad
// attributes) or that SQS refuses is reported on Errs with its line number and skipped; the
// other lines are still imported, and the summary's Err reports the count. Blank lines are
// skipped. Import stops at the first read error or a line longer than 16 MiB.
func Import(ctx context.Context, api API, q Queues, r io.Reader, cfg ImportConfig) (ImportSummary, error) {
	var sum ImportSummary
	if cfg.Errs == nil {
		cfg.Errs = io.Discard
	}
	if cfg.Progress == nil {
		cfg.Progress = NoProgress{}
	}
	limits := producer.Limits{MaxSize: q.DLQ.MaximumMessageSize, FIFO: q.DLQ.FIFO}
	var pending []producer.Message
	var lines []int
	flush := func() {
		producer.Send(ctx, api, q.DLQ.URL, pending, func(i int, res producer.Result) {
			if res.Err != nil {
				sum.Rejected++
				fmt.Fprintf(cfg.Errs, "%s:%d: not imported: %v\n", cfg.Name, lines[i], res.Err)
				return
			}
			sum.Imported++
		})
		pending, lines = pending[:0], lines[:0]
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), maxImportLine)
	n := 0
	for sc.Scan() {
		n++
		_ = cfg.Progress.Add(1)
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		m, err := parseRecord(line, limits)
		if err != nil {
			sum.Rejected++
			fmt.Fprintf(cfg.Errs, "%s:%d: not imported: %v\n", cfg.Name, n, err)
			continue
		}
		pending = append(pending, m)
		lines = append(lines, n)
		if len(pending) == sqsspec.MaxBatchEntries {
			flush()
		}
		if err := ctx.Err(); err != nil {
			return sum, fmt.Errorf("import stopped after line %d: %w", n, err)
		}
	}
	if len(pending) > 0 {
		flush()
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return sum, fmt.Errorf("%s:%d: line longer than %d MiB; import stopped here", cfg.Name, n+1, maxImportLine>>20)
		}
		return sum, fmt.Errorf("read %s: %w", cfg.Name, err)
	}
	return sum, nil
}

// parseRecord decodes and checks one export line.
func parseRecord(line []byte, limits producer.Limits) (producer.Message, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	var rec Record
	if err := dec.Decode(&rec); err != nil {
		return producer.Message{}, fmt.Errorf("malformed JSON: %w", err)
	}
	if dec.More() {
		return producer.Message{}, errors.New("malformed JSON: more than one value on the line")
	}
	for name, a := range rec.MessageAttributes {
		if strings.HasPrefix(a.DataType, "Binary") && a.StringValue != nil {
			return producer.Message{}, fmt.Errorf("attribute %s: a Binary attribute has binaryValue (base64), not stringValue", name)
		}
		if !strings.HasPrefix(a.DataType, "Binary") && a.BinaryValue != nil {
			return producer.Message{}, fmt.Errorf("attribute %s: a %s attribute has stringValue, not binaryValue", name, a.DataType)
		}
	}
	m := producer.Message{Body: rec.Body, Attributes: rec.attributes()}
	m.GroupID = rec.groupID() // a FIFO group, or a fair queue's tenant on a standard queue
	if limits.FIFO {
		m.DeduplicationID = producer.NewDeduplicationID()
	}
	if err := producer.Check(m, limits); err != nil {
		return producer.Message{}, err
	}
	return m, nil
}

// queueName is a short name for messages.
func queueName(info queueattr.Info) string { return queueattr.NameFromURL(info.URL) }
