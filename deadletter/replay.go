package deadletter

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/watchbot/watchbot/internal/dlqattr"
	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/internal/setting"
	"github.com/watchbot/watchbot/internal/sqsspec"
	"github.com/watchbot/watchbot/producer"
)

// Progress is told about each message handled by a long operation. *progressbar.ProgressBar
// satisfies it; NoProgress is the quiet one.
type Progress interface {
	Add(n int) error
	Finish() error
}

// NoProgress reports nothing.
type NoProgress struct{}

// Add does nothing.
func (NoProgress) Add(int) error { return nil }

// Finish does nothing.
func (NoProgress) Finish() error { return nil }

// DefaultHold is how long a walk over the DLQ keeps the messages it received invisible; kept
// messages are made visible again as soon as the walk ends, so this only matters when watchbot
// is killed mid-walk.
const DefaultHold = 5 * time.Minute

// ReplayConfig says which messages replay sends back, how fast, and whether it only reports.
type ReplayConfig struct {
	// Limit is the most messages to replay; 0 means all that match.
	Limit int
	// IDs, when set, are the only messages replayed: each is a DLQ message id or an original
	// message id (watchbot-original-message-id). The walk ends when all were found.
	IDs []string
	// Filter selects the messages to replay (ParseFilter builds it from --match-body and
	// --match-attr); the zero Filter selects all.
	Filter Filter
	// Rate is the most messages sent per second; 0 means as fast as SQS takes them.
	Rate float64
	// DryRun receives and lists what would be replayed, then gives every message back.
	DryRun bool
	// Hold is how long received messages stay invisible during the walk (DefaultHold).
	Hold time.Duration
	// Out receives one line per message replayed (or, in a dry run, that would be).
	Out io.Writer
	// Errs receives one line per message that could not be replayed.
	Errs io.Writer
	// Progress counts handled messages.
	Progress Progress
	// Now stamps watchbot-replayed-at; time.Now when nil.
	Now func() time.Time
}

// DefaultReplayConfig returns a ReplayConfig that replays every message as fast as SQS allows.
func DefaultReplayConfig() ReplayConfig {
	return ReplayConfig{Hold: DefaultHold, Out: io.Discard, Errs: io.Discard, Progress: NoProgress{}, Now: time.Now}
}

// Validate checks the configuration without any I/O.
func (c ReplayConfig) Validate() error {
	if c.Limit < 0 {
		return setting.Refuse(setting.Limit, c.Limit, "must not be negative")
	}
	if c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) {
		return setting.Refuse(setting.Rate, c.Rate, "must be a positive number of messages per second")
	}
	if c.Hold < time.Second || c.Hold > sqsspec.MaxInFlight {
		return fmt.Errorf("hold (%v) must be between 1s and 12h", c.Hold)
	}
	return nil
}

// Summary counts what replay did.
type Summary struct {
	// Replayed were sent to the target and deleted from the DLQ (in a dry run: would be).
	Replayed int `json:"replayed"`
	// Skipped did not match the filters and were left in the DLQ.
	Skipped int `json:"skipped"`
	// Failed could not be sent and were left in the DLQ.
	Failed int `json:"failed"`
	// NotDeleted were sent to the target but could not be deleted from the DLQ, so they are in
	// both queues now.
	NotDeleted int `json:"notDeleted"`
	// CameBack were copies this run had replayed that failed again and were back in the DLQ
	// before the run ended; they were left there.
	CameBack int `json:"cameBack"`
	// NotFound are the IDs asked for that the walk did not meet.
	NotFound []string `json:"notFound,omitempty"`
	DryRun   bool     `json:"dryRun"`
}

// Err is non-nil when some message was not replayed as asked.
func (s Summary) Err() error {
	var parts []string
	if s.Failed > 0 {
		parts = append(parts, fmt.Sprintf("%d could not be sent and are still in the dead-letter queue", s.Failed))
	}
	if s.NotDeleted > 0 {
		parts = append(parts, fmt.Sprintf("%d were replayed but could not be deleted from the dead-letter queue, so they are in both queues", s.NotDeleted))
	}
	if len(s.NotFound) > 0 {
		id := setting.Ref(setting.IDs)
		parts = append(parts, fmt.Sprintf("not found in the dead-letter queue: %s %s (peek lists the ids; a message in flight elsewhere is not seen)", id, strings.Join(s.NotFound, ", "+id+" ")))
	}
	if len(parts) == 0 {
		return nil
	}
	return found(nil, "replay: "+strings.Join(parts, "; "))
}

// Replay sends the DLQ's matching messages to the replay target (see replayMessage for what is
// sent) and deletes each from the DLQ only after its send succeeded. Messages that do not match,
// and messages whose send failed, are left in the DLQ and made visible again when the walk ends.
//
// A run works on the messages the DLQ held when it began (the count Locate read): it ends when
// it has met that many, whatever arrives meanwhile. A copy this run replayed that fails again
// and comes back (it carries watchbot-replayed-from or watchbot-original-message-id of a message
// this run replayed) is left in the DLQ and counted as CameBack, never replayed again by the
// same run; a last pass (lookBack) counts the copies already back when the walk ends. The walk also ends when the DLQ returns nothing more, when Limit messages were
// replayed, when every one of IDs was found, or when ctx is cancelled: then the messages held
// are made visible again, a send under way completes, and the error is ctx's.
//
// On a FIFO DLQ, SQS hands out a group's messages in order only: a message left in the DLQ holds
// back the rest of its group until the walk ends, so the filters see only the first message of
// such a group in one run.
func Replay(ctx context.Context, api API, q Queues, cfg ReplayConfig) (sum Summary, err error) {
	sum = Summary{DryRun: cfg.DryRun}
	if err := cfg.Validate(); err != nil {
		return sum, err
	}
	target, terr := q.Target()
	if terr != nil {
		return sum, terr
	}
	r := newReplay(api, q, target, cfg, &sum)
	defer func() {
		sum.NotFound = append(sum.NotFound, r.notFound()...)
		if rerr := r.sc.release(ctx); rerr != nil && err == nil {
			err = rerr
		}
	}()
	for !r.done() {
		batch, err := r.sc.next(ctx, r.receiveUpTo())
		if err != nil {
			return sum, err
		}
		if len(batch) == 0 {
			break
		}
		selected := r.sort(batch)
		if r.cfg.DryRun {
			r.list(selected)
			continue
		}
		if err := r.send(ctx, selected); err != nil {
			return sum, err
		}
	}
	if err := r.lookBack(ctx); err != nil {
		return sum, err
	}
	return sum, ctx.Err()
}

// newReplay starts a walk of q's DLQ that replays to target and counts in sum.
func newReplay(api API, q Queues, target queueattr.Info, cfg ReplayConfig, sum *Summary) *replay {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	chunk := sqsspec.MaxBatchEntries
	if cfg.Rate > 0 && cfg.Rate < float64(chunk) {
		chunk = max(1, int(cfg.Rate))
	}
	r := &replay{api: api, dlqURL: q.DLQ.URL, target: target, sc: newScanner(api, q.DLQ.URL, cfg.Hold), sum: sum, cfg: cfg,
		chunk: chunk, pace: newPacer(cfg.Rate), snapshot: q.DLQ.Visible + q.DLQ.Delayed,
		wanted: map[string]bool{}, replayedIDs: map[string]bool{}, replayedOrig: map[string]bool{}}
	for _, id := range cfg.IDs {
		r.wanted[id] = true
	}
	return r
}

// sort returns the messages of batch to replay, keeps the others in the DLQ and counts them:
// copies that came back, messages that arrived after the run began, and those the filters
// (or Limit) leave out.
func (r *replay) sort(batch []Message) []Message {
	var selected []Message
	for _, m := range batch {
		switch {
		case r.cameBack(m):
			r.sc.keep(m)
			r.sum.CameBack++
			continue
		case r.snapshot > 0 && r.met >= r.snapshot:
			r.sc.keep(m) // arrived after the run began
			continue
		}
		r.met++
		if r.selects(m) && (r.cfg.Limit == 0 || r.sum.Replayed+len(selected) < r.cfg.Limit) {
			delete(r.wanted, m.ID)
			delete(r.wanted, dlqattr.OriginalID(m.ID, m.Attributes))
			selected = append(selected, m)
			continue
		}
		r.sc.keep(m)
		r.sum.Skipped++
		_ = r.cfg.Progress.Add(1)
	}
	return selected
}

// list is a dry run's replay: it says what would be replayed and keeps it in the DLQ.
func (r *replay) list(selected []Message) {
	for _, m := range selected {
		r.sc.keep(m)
		r.sum.Replayed++
		_ = r.cfg.Progress.Add(1)
		fmt.Fprintf(r.cfg.Out, "would replay %s to %s%s\n", m.ID, queueattr.NameFromURL(r.target.URL), describeCause(m))
	}
}

// send replays selected in parts of at most chunk, at the pace of --rate. When ctx ends
// while it waits, the messages not sent yet are kept in the DLQ.
func (r *replay) send(ctx context.Context, selected []Message) error {
	for start := 0; start < len(selected); start += r.chunk {
		part := selected[start:min(start+r.chunk, len(selected))]
		if err := r.pace.wait(ctx, len(part)); err != nil {
			for _, m := range selected[start:] {
				r.sc.keep(m)
			}
			return err
		}
		r.part(ctx, part)
	}
	return nil
}

// notFound are the IDs asked for that the walk did not meet, in the order asked.
func (r *replay) notFound() []string {
	var out []string
	for _, id := range r.cfg.IDs {
		if r.wanted[id] {
			out = append(out, id)
		}
	}
	return out
}

// lookBack is a run's last pass: it replays nothing, and counts the copies of this run's
// replays that already failed again and came back, so that the summary says whether the cause
// is fixed. It receives at most a few more messages than were replayed, so a run on a big DLQ
// does not walk the rest of it.
func (r *replay) lookBack(ctx context.Context) error {
	budget := max(sqsspec.MaxReceive, 2*len(r.replayedIDs))
	if len(r.replayedIDs) == 0 {
		budget = 0
	}
	for budget > 0 {
		batch, err := r.sc.next(ctx, min(sqsspec.MaxReceive, budget))
		if err != nil || len(batch) == 0 {
			return err
		}
		budget -= len(batch)
		for _, m := range batch {
			r.sc.keep(m)
			if r.cameBack(m) {
				r.sum.CameBack++
			}
		}
	}
	return nil
}

// replay is one Replay walk: where it sends, what it has handled, and how it reports.
type replay struct {
	api    API
	dlqURL string
	target queueattr.Info
	sc     *scanner
	sum    *Summary
	cfg    ReplayConfig
	// chunk is the most messages sent in one part; pace spaces the parts by --rate.
	chunk int
	pace  *pacer
	// snapshot is how many messages the DLQ held when the run began (0: unknown); met counts
	// those the walk has met, copies that came back left out.
	snapshot, met int64
	// wanted holds the IDs not found yet.
	wanted map[string]bool
	// replayedIDs and replayedOrig are the DLQ ids and original ids this run replayed, which
	// recognise a copy that came back.
	replayedIDs, replayedOrig map[string]bool
}

// done reports that the walk has nothing more to do.
func (r *replay) done() bool {
	return (r.cfg.Limit > 0 && r.sum.Replayed >= r.cfg.Limit) ||
		(len(r.cfg.IDs) > 0 && len(r.wanted) == 0) ||
		(r.snapshot > 0 && r.met >= r.snapshot)
}

// receiveUpTo is how many messages to receive next: no more than the walk can still handle.
func (r *replay) receiveUpTo() int {
	n := upTo(r.cfg.Limit, r.sum.Replayed)
	if r.snapshot > 0 {
		n = int(min(int64(n), r.snapshot-r.met))
	}
	return n
}

// selects reports whether m is to be replayed.
func (r *replay) selects(m Message) bool {
	if len(r.cfg.IDs) > 0 && !slices.Contains(r.cfg.IDs, m.ID) && !slices.Contains(r.cfg.IDs, dlqattr.OriginalID(m.ID, m.Attributes)) {
		return false
	}
	return r.cfg.Filter.Match(m)
}

// cameBack reports whether m is a copy this run replayed that is back in the DLQ.
func (r *replay) cameBack(m Message) bool {
	l := dlqattr.ReadLineage(m.Attributes)
	return (l.ReplayedFrom != "" && r.replayedIDs[l.ReplayedFrom]) || (l.OriginalMessageID != "" && r.replayedOrig[l.OriginalMessageID])
}

// part sends msgs to the target, then deletes what was sent from the DLQ. A message whose send
// failed is kept in the DLQ. A part is never cut short: once it starts, a cancelled ctx waits
// for its sends and deletes, so no message is left sent but not deleted.
func (r *replay) part(ctx context.Context, msgs []Message) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), partTimeout)
	defer cancel()
	now := r.cfg.Now()
	out := make([]producer.Message, len(msgs))
	for i, m := range msgs {
		out[i] = replayMessage(m, r.target.FIFO, r.target.MaximumMessageSize, now)
	}
	var sent []Message
	for _, b := range producer.Batches(out) {
		for j, res := range producer.SendBatch(ctx, r.api, r.target.URL, out[b[0]:b[1]]) {
			m := msgs[b[0]+j]
			if res.Err != nil {
				r.sc.keep(m)
				r.sum.Failed++
				_ = r.cfg.Progress.Add(1)
				fmt.Fprintf(r.cfg.Errs, "%s: not replayed, left in the dead-letter queue: %v\n", m.ID, res.Err)
				continue
			}
			sent = append(sent, m)
		}
	}
	if len(sent) == 0 {
		return
	}
	failed := deleteMessages(ctx, r.api, r.dlqURL, sent)
	for _, m := range sent {
		r.replayedIDs[m.ID] = true
		r.replayedOrig[dlqattr.OriginalID(m.ID, m.Attributes)] = true
		_ = r.cfg.Progress.Add(1)
		if ferr, bad := failed[m.ID]; bad {
			r.sum.NotDeleted++
			fmt.Fprintf(r.cfg.Errs, "%s: replayed to %s but not deleted from the dead-letter queue: %v\n", m.ID, queueattr.NameFromURL(r.target.URL), ferr)
			continue
		}
		r.sum.Replayed++
		fmt.Fprintf(r.cfg.Out, "replayed %s to %s\n", m.ID, queueattr.NameFromURL(r.target.URL))
	}
}

// partTimeout bounds one part's sends and deletes, retries included.
const partTimeout = time.Minute

func describeCause(m Message) string {
	if c, ok := dlqattr.Read(m.Attributes); ok && c.Reason != "" {
		return fmt.Sprintf(" (reason: %s)", c.Reason)
	}
	return ""
}

// pacer spaces sends so that no more than rate messages go out per second on average.
type pacer struct {
	every time.Duration
	next  time.Time
}

func newPacer(rate float64) *pacer {
	if rate <= 0 {
		return &pacer{}
	}
	return &pacer{every: time.Duration(float64(time.Second) / rate)}
}

// wait blocks until n more messages may be sent.
func (p *pacer) wait(ctx context.Context, n int) error {
	if p.every == 0 {
		return ctx.Err()
	}
	now := time.Now()
	if p.next.Before(now) {
		p.next = now
	}
	delay := p.next.Sub(now)
	p.next = p.next.Add(time.Duration(n) * p.every)
	if delay <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
