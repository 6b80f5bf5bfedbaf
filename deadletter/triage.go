package deadletter

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/producer"
)

// TriageState is where the triage dialogue stands.
type TriageState int

const (
	// Choosing waits for what to do with the message shown.
	Choosing TriageState = iota
	// ConfirmingDelete waits for a yes before a message is deleted for good.
	ConfirmingDelete
)

// TriageAction is what the operator's answer asks for.
type TriageAction int

const (
	// ActionHelp explains the choices again.
	ActionHelp TriageAction = iota
	// ActionShowBody prints the whole body.
	ActionShowBody
	// ActionReplay sends the message to the replay target and deletes it from the DLQ.
	ActionReplay
	// ActionKeep leaves the message in the DLQ and moves on.
	ActionKeep
	// ActionAskDelete asks for confirmation before deleting.
	ActionAskDelete
	// ActionDelete deletes the message from the DLQ for good.
	ActionDelete
	// ActionCancelDelete keeps the message shown after a declined confirmation.
	ActionCancelDelete
	// ActionQuit ends triage; the message shown stays in the DLQ.
	ActionQuit
)

// Decide is the triage dialogue as a pure function: the state and the operator's answer give
// the next state and the action to take. Answers are case-insensitive and may be spelled out.
// A delete needs an explicit "y"/"yes"; anything else cancels it.
func Decide(state TriageState, answer string) (TriageState, TriageAction) {
	a := strings.ToLower(strings.TrimSpace(answer))
	if state == ConfirmingDelete {
		if a == "y" || a == "yes" {
			return Choosing, ActionDelete
		}
		return Choosing, ActionCancelDelete
	}
	switch a {
	case "r", "replay":
		return Choosing, ActionReplay
	case "k", "keep", "n", "next":
		return Choosing, ActionKeep
	case "d", "delete":
		return ConfirmingDelete, ActionAskDelete
	case "s", "show", "b", "body":
		return Choosing, ActionShowBody
	case "q", "quit", "stop":
		return Choosing, ActionQuit
	}
	return Choosing, ActionHelp
}

// Prompt is the question asked in state.
func Prompt(state TriageState) string {
	if state == ConfirmingDelete {
		return "delete this message for good? [y/N] "
	}
	return "[r]eplay, [k]eep, [d]elete, [s]how body, [q]uit? "
}

const triageHelp = `  r, replay  send it to the replay target, then delete it from the dead-letter queue
  k, keep    leave it in the dead-letter queue and show the next one
  d, delete  delete it for good (asks first)
  s, show    print the whole body
  q, quit    stop; this and every kept message stay in the dead-letter queue
`

// TriageConfig connects triage to the operator.
type TriageConfig struct {
	In  io.Reader
	Out io.Writer
	// Hold is how long each message shown stays invisible to others (DefaultHold).
	Hold time.Duration
	// MaxBody cuts the body in the listing; the show action prints it whole.
	MaxBody int
	Now     func() time.Time
}

// TriageSummary counts what triage did.
type TriageSummary struct {
	Replayed, Kept, Deleted int
}

// Triage walks the DLQ one message at a time and asks the operator what to do with each (see
// Decide). Kept messages, and the one shown when the operator quits or input ends, are made
// visible again when triage ends.
func Triage(ctx context.Context, api API, q Queues, cfg TriageConfig) (sum TriageSummary, err error) {
	target, err := q.Target()
	if err != nil {
		return sum, err
	}
	if cfg.Hold <= 0 {
		cfg.Hold = DefaultHold
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	t := &triage{api: api, dlqURL: q.DLQ.URL, target: target, sc: newScanner(api, q.DLQ.URL, cfg.Hold),
		in: bufio.NewReader(cfg.In), out: cfg.Out, now: cfg.Now, sum: &sum}
	defer func() {
		if rerr := t.sc.release(ctx); rerr != nil && err == nil {
			err = rerr
		}
	}()
	fmt.Fprintf(t.out, "triage of %s; replay goes to %s\n\n", queueName(q.DLQ), queueName(target))
	for {
		batch, err := t.sc.next(ctx, 1)
		if err != nil {
			return sum, err
		}
		if len(batch) == 0 {
			fmt.Fprintln(t.out, "no more messages.")
			return sum, nil
		}
		m := batch[0]
		if err := WriteListing(t.out, m, cfg.MaxBody); err != nil {
			return sum, err
		}
		if more, err := t.ask(ctx, m); !more || err != nil {
			return sum, err
		}
	}
}

// triage is one Triage walk: the queues, the operator's terminal and what was done.
type triage struct {
	api    API
	dlqURL string
	target queueattr.Info
	sc     *scanner
	in     *bufio.Reader
	out    io.Writer
	now    func() time.Time
	sum    *TriageSummary
}

// ask holds the dialogue about m until it is replayed, kept or deleted. It reports false
// when triage ends instead: the operator quit or the input ended (m is then kept).
func (t *triage) ask(ctx context.Context, m Message) (bool, error) {
	state := Choosing
	for {
		fmt.Fprint(t.out, Prompt(state))
		line, rerr := t.in.ReadString('\n')
		if rerr != nil && line == "" {
			t.sc.keep(m)
			fmt.Fprintln(t.out)
			if errors.Is(rerr, io.EOF) {
				return false, nil
			}
			return false, fmt.Errorf("read answer: %w", rerr)
		}
		var action TriageAction
		state, action = Decide(state, line)
		switch action {
		case ActionHelp:
			fmt.Fprint(t.out, triageHelp)
		case ActionShowBody:
			fmt.Fprintf(t.out, "%s\n", m.Body)
		case ActionAskDelete:
		case ActionCancelDelete:
			fmt.Fprintln(t.out, "not deleted.")
		case ActionKeep:
			t.sc.keep(m)
			t.sum.Kept++
			fmt.Fprintln(t.out)
			return true, nil
		case ActionQuit:
			t.sc.keep(m)
			return false, nil
		case ActionDelete:
			if t.delete(ctx, m) {
				return true, nil
			}
		case ActionReplay:
			if t.replay(ctx, m) {
				return true, nil
			}
		}
	}
}

// delete deletes m from the DLQ for good, and reports whether it did; if not, the operator
// is asked again.
func (t *triage) delete(ctx context.Context, m Message) bool {
	if err := deleteMessages(ctx, t.api, t.dlqURL, []Message{m})[m.ID]; err != nil {
		fmt.Fprintf(t.out, "delete failed, the message is still there: %v\n", err)
		return false
	}
	t.sum.Deleted++
	fmt.Fprintf(t.out, "deleted %s.\n\n", m.ID)
	return true
}

// replay sends m to the replay target, then deletes it from the DLQ, and reports whether it
// was sent; if not, the operator is asked again.
func (t *triage) replay(ctx context.Context, m Message) bool {
	res := producer.SendBatch(ctx, t.api, t.target.URL, []producer.Message{replayMessage(m, t.target.FIFO, t.target.MaximumMessageSize, t.now())})[0]
	if res.Err != nil {
		fmt.Fprintf(t.out, "replay failed, the message is still in the dead-letter queue: %v\n", res.Err)
		return false
	}
	t.sum.Replayed++
	if err := deleteMessages(context.WithoutCancel(ctx), t.api, t.dlqURL, []Message{m})[m.ID]; err != nil {
		fmt.Fprintf(t.out, "replayed as %s, but not deleted from the dead-letter queue: %v\n\n", res.MessageID, err)
		return true
	}
	fmt.Fprintf(t.out, "replayed to %s as %s.\n\n", queueName(t.target), res.MessageID)
	return true
}
