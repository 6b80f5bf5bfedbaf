package supervisor

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/internal/sqsspec"
)

// urgentLinger is the most an urgent op waits for others to share its call.
var urgentLinger = 2 * time.Millisecond

type ackKind int

const (
	ackDelete ackKind = iota
	ackVisibility
)

// ackOp is one delete or visibility change waiting to be batched.
type ackOp struct {
	kind       ackKind
	handle     string
	visibility int32
	// urgent: the next message of a FIFO group waits on this delete (SQS keeps the group
	// locked until it lands, whether or not watchbot holds that message), so it lingers only
	// urgentLinger for others to share its call.
	urgent bool
	// done (buffered) receives the op's one result, unless reply is set: then reply is called
	// with it, from the goroutine of the batch's call.
	done  chan error
	reply func(error)
}

// answer reports the op's result.
func (op ackOp) answer(err error) {
	if op.reply != nil {
		op.reply(err)
		return
	}
	op.done <- err
}

// acker batches deletes and visibility changes: an op waits at most linger for others to
// join it, and every batch is sent with a context detached from shutdown, so finished work
// is acknowledged even while the supervisor stops. Each entry's failure is reported to its
// own caller.
type acker struct {
	api      sqsAPI
	queueURL string
	linger   time.Duration
	// urgentLinger is how long an urgent op waits for others: long enough to share a call
	// with ops submitted at about the same moment, short beside an SQS round trip.
	urgentLinger time.Duration
	timeout      time.Duration

	health *Health // told of each call, so a hung one shows
	in     chan ackOp
	// cut ends every call under way at a stop's last moment, and every later one.
	cut       *cutoff
	flights   runPool // batch calls under way
	stopped   chan struct{}
	closeOnce sync.Once
}

// newAcker returns the acknowledger of queueURL's ops: each waits up to linger for others to
// share its call, each call is bounded by timeout and cut at a stop's last moment, and health
// (nil: none) is told of each call.
func newAcker(api sqsAPI, queueURL string, linger, timeout time.Duration, health *Health, cut *cutoff) *acker {
	return &acker{api: api, queueURL: queueURL, linger: linger, urgentLinger: min(linger, urgentLinger), timeout: timeout,
		health: health, cut: cut, in: make(chan ackOp), stopped: make(chan struct{})}
}

// submit queues an op and returns where its result arrives.
func (a *acker) submit(kind ackKind, handle string, visibility int32) <-chan error {
	return a.enqueue(ackOp{kind: kind, handle: handle, visibility: visibility})
}

// submitReply queues an op whose result goes to reply, called from the goroutine of the
// batch's call: it must not wait on the acker.
func (a *acker) submitReply(kind ackKind, handle string, visibility int32, reply func(error)) {
	a.in <- ackOp{kind: kind, handle: handle, visibility: visibility, reply: reply}
}

func (a *acker) enqueue(op ackOp) <-chan error {
	op.done = make(chan error, 1)
	a.in <- op
	return op.done
}

// delete deletes a message; urgent sends it without lingering.
func (a *acker) delete(handle string, urgent bool) error {
	return <-a.enqueue(ackOp{kind: ackDelete, handle: handle, urgent: urgent})
}

func (a *acker) changeVisibility(handle string, seconds int32) error {
	return <-a.submit(ackVisibility, handle, seconds)
}

// run batches until close is called, then sends what is pending and waits for every call.
func (a *acker) run(ctx context.Context) {
	defer close(a.stopped)
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	defer a.cut.cuts(cancel)()
	var pending [2][]ackOp
	var timer *time.Timer
	var fire <-chan time.Time
	var due time.Time
	flush := func(kind ackKind) {
		if len(pending[kind]) == 0 {
			return
		}
		batch := pending[kind]
		pending[kind] = nil
		a.flights.Go(func() { a.send(ctx, kind, batch) })
	}
	for {
		select {
		case op, ok := <-a.in:
			if !ok {
				flush(ackDelete)
				flush(ackVisibility)
				a.flights.Wait()
				return
			}
			pending[op.kind] = append(pending[op.kind], op)
			if len(pending[op.kind]) == sqsspec.MaxBatchEntries || a.linger == 0 || (op.urgent && a.urgentLinger == 0) {
				flush(op.kind)
			}
			if n := len(pending[ackDelete]) + len(pending[ackVisibility]); n > 0 {
				wait := a.linger
				if op.urgent {
					wait = a.urgentLinger
				}
				if at := time.Now().Add(wait); fire == nil || at.Before(due) {
					if timer == nil {
						timer = time.NewTimer(wait)
					} else {
						timer.Reset(wait)
					}
					fire, due = timer.C, at
				}
			}
		case <-fire:
			fire = nil
			flush(ackDelete)
			flush(ackVisibility)
		}
		if fire != nil && len(pending[ackDelete])+len(pending[ackVisibility]) == 0 {
			timer.Stop()
			fire = nil
		}
	}
}

// close stops accepting ops and waits until every pending one has been sent. Calling it
// again only waits.
func (a *acker) close() {
	a.closeOnce.Do(func() { close(a.in) })
	<-a.stopped
}

// send sends one batch of ops of one kind and answers each op on its own. An entry that
// failed on SQS's side gets one more try on its own.
func (a *acker) send(ctx context.Context, kind ackKind, ops []ackOp) {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	if a.health != nil {
		defer a.health.ackEnded(a.health.ackStarted(time.Now()))
	}
	if len(ops) == 1 {
		ops[0].answer(a.sendOne(ctx, ops[0]))
		return
	}
	errs := sqsspec.InBatches(len(ops), func(from, to int) ([]types.BatchResultErrorEntry, error) {
		switch kind {
		case ackDelete:
			entries := make([]types.DeleteMessageBatchRequestEntry, to-from)
			for i, op := range ops[from:to] {
				entries[i] = types.DeleteMessageBatchRequestEntry{Id: sqsspec.EntryID(i), ReceiptHandle: aws.String(op.handle)}
			}
			out, err := a.api.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(a.queueURL), Entries: entries})
			if err != nil {
				return nil, err
			}
			return out.Failed, nil
		default:
			entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, to-from)
			for i, op := range ops[from:to] {
				entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{Id: sqsspec.EntryID(i),
					ReceiptHandle: aws.String(op.handle), VisibilityTimeout: op.visibility}
			}
			out, err := a.api.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(a.queueURL), Entries: entries})
			if err != nil {
				return nil, err
			}
			return out.Failed, nil
		}
	})
	for i, op := range ops {
		var entry *sqsspec.EntryError
		if errors.As(errs[i], &entry) && !entry.SenderFault {
			errs[i] = a.sendOne(ctx, op)
		}
		op.answer(errs[i])
	}
}

func (a *acker) sendOne(ctx context.Context, op ackOp) error {
	var err error
	switch op.kind {
	case ackDelete:
		_, err = a.api.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(a.queueURL), ReceiptHandle: aws.String(op.handle)})
	case ackVisibility:
		_, err = a.api.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(a.queueURL),
			ReceiptHandle: aws.String(op.handle), VisibilityTimeout: op.visibility})
	}
	return err
}
