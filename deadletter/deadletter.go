// Package deadletter is what an operator needs when messages dead-letter: find the
// dead-letter queue (DLQ) and the queue its messages came from, count and peek at them without
// consuming them, replay chosen ones with their attributes and FIFO group ids, purge, export to
// and import from JSON Lines, and walk them one by one (triage). Every operation that removes a
// message from the DLQ does so only after the message is safely somewhere else.
package deadletter

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/internal/setting"
	"github.com/watchbot/watchbot/producer"
)

// API is the part of the SQS client this package calls.
type API interface {
	queueattr.API
	producer.API
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
	ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
	PurgeQueue(ctx context.Context, in *sqs.PurgeQueueInput, opts ...func(*sqs.Options)) (*sqs.PurgeQueueOutput, error)
	ListDeadLetterSourceQueues(ctx context.Context, in *sqs.ListDeadLetterSourceQueuesInput, opts ...func(*sqs.Options)) (*sqs.ListDeadLetterSourceQueuesOutput, error)
}

var _ API = (*sqs.Client)(nil)

// Location says which DLQ to work on: either a source queue, whose redrive policy names the DLQ,
// or the DLQ itself, with the replay target from To or from ListDeadLetterSourceQueues.
type Location struct {
	// QueueURL is the source (work) queue; the DLQ is the one its redrive policy names.
	QueueURL string
	// DLQURL is the dead-letter queue itself.
	DLQURL string
	// To is the queue replayed messages go to; only with DLQURL. Its redrive policy must name
	// the DLQ, so messages cannot be replayed into an unrelated queue by a typo.
	To string
}

// The settings of a Location, as its errors name them.
var (
	queueURL = setting.Ref(setting.QueueURL)
	dlqURL   = setting.Ref(setting.DLQURL)
	to       = setting.Ref(setting.To)
)

// Validate checks the combination of settings without any I/O.
func (l Location) Validate() error {
	switch {
	case l.QueueURL == "" && l.DLQURL == "":
		return setting.Refuse("", nil, "give "+queueURL+" (the source queue; WATCHBOT_QUEUE_URL gives it too) or "+dlqURL+" (the dead-letter queue)")
	case l.QueueURL != "" && l.DLQURL != "":
		return setting.Refuse("", nil, "give either "+queueURL+" or "+dlqURL+", not both")
	case l.To != "" && l.QueueURL != "":
		return setting.Refuse("", nil, to+" is only for "+dlqURL+": with "+queueURL+", messages are replayed to that queue")
	}
	for _, f := range []struct {
		setting setting.Name
		url     string
	}{{setting.QueueURL, l.QueueURL}, {setting.DLQURL, l.DLQURL}, {setting.To, l.To}} {
		if f.url == "" {
			continue
		}
		if err := queueattr.ValidateURL(f.url); err != nil {
			return setting.Error{Setting: f.setting, Err: err}
		}
	}
	return nil
}

// ErrNotDeadLetterQueue is returned by Locate when the queue given as the DLQ is not one.
var ErrNotDeadLetterQueue = errors.New("not a dead-letter queue")

// worded is what an operation found, worded with the settings it names (Render, which the
// command line uses to name them as flags). Unlike a setting.Error it is no refused
// configuration; it is kind, if set, for errors.Is.
type worded struct {
	said setting.Error
	kind error
}

func (e worded) Error() string                                { return e.said.Error() }
func (e worded) Is(target error) bool                         { return e.kind != nil && target == e.kind }
func (e worded) Render(name func(setting.Name) string) string { return e.said.Render(name) }

// found returns the worded error of kind, saying reason.
func found(kind error, reason string) error {
	return worded{said: setting.Refuse("", nil, reason), kind: kind}
}

// Queues are the queues an operation works on.
type Queues struct {
	// DLQ is the dead-letter queue.
	DLQ queueattr.Info
	// target is where replayed messages go; nil when it could not be determined, and then
	// targetErr says why.
	target    *queueattr.Info
	targetErr error
}

// Target returns the queue replayed messages go to, or an error saying how to name one.
func (q Queues) Target() (queueattr.Info, error) {
	if q.target == nil {
		return queueattr.Info{}, q.targetErr
	}
	return *q.target, nil
}

// Locate finds the DLQ and the replay target described by l, checking that they belong
// together. A source without a redrive policy wraps queueattr.ErrNoRedrivePolicy; a DLQ that is
// evidently not one wraps ErrNotDeadLetterQueue.
func Locate(ctx context.Context, api API, l Location) (Queues, error) {
	if err := l.Validate(); err != nil {
		return Queues{}, err
	}
	if l.QueueURL != "" {
		src, err := queueattr.Describe(ctx, api, l.QueueURL)
		if err != nil {
			return Queues{}, err
		}
		if src.Redrive == nil {
			return Queues{}, found(queueattr.ErrNoRedrivePolicy, fmt.Sprintf("%s %s: %v, so it has no dead-letter queue (give the DLQ itself with %s)",
				queueURL, l.QueueURL, queueattr.ErrNoRedrivePolicy, dlqURL))
		}
		dlq, err := queueattr.DescribeDeadLetterQueue(ctx, api, src)
		if err != nil {
			return Queues{}, err
		}
		return Queues{DLQ: dlq, target: &src}, nil
	}

	dlq, err := queueattr.Describe(ctx, api, l.DLQURL)
	if err != nil {
		return Queues{}, err
	}
	name := queueattr.NameFromURL(l.DLQURL)
	if l.To != "" {
		toQueue, err := queueattr.Describe(ctx, api, l.To)
		if err != nil {
			return Queues{}, err
		}
		switch {
		case toQueue.Redrive == nil:
			return Queues{}, found(ErrNotDeadLetterQueue, fmt.Sprintf("%s %s is %v of %s %s: that queue has no redrive policy (use export and import to move messages between unrelated queues)",
				dlqURL, name, ErrNotDeadLetterQueue, to, queueattr.NameFromURL(l.To)))
		case toQueue.Redrive.DeadLetterTargetARN != dlq.ARN:
			return Queues{}, found(ErrNotDeadLetterQueue, fmt.Sprintf("%s %s is %v of %s %s: its redrive policy names %s (use export and import to move messages between unrelated queues)",
				dlqURL, name, ErrNotDeadLetterQueue, to, queueattr.NameFromURL(l.To), toQueue.Redrive.DeadLetterTargetARN))
		}
		return Queues{DLQ: dlq, target: &toQueue}, nil
	}

	sources, listErr := listSources(ctx, api, l.DLQURL)
	switch {
	case listErr == nil && len(sources) == 0:
		return Queues{}, found(ErrNotDeadLetterQueue, fmt.Sprintf("%s %s is %v: no queue's redrive policy names it", dlqURL, name, ErrNotDeadLetterQueue))
	case listErr != nil && dlq.Redrive != nil:
		// Nothing confirms it is a DLQ, and it has a redrive policy of its own: most likely a
		// work queue given by mistake. Refusing here keeps purge and replay off work queues.
		return Queues{}, found(ErrNotDeadLetterQueue, fmt.Sprintf("%s %s: nothing confirms it is a dead-letter queue (%v) and it has a redrive policy of its own, so it looks like a work queue: pass it as %s, or name its source with %s: %v",
			dlqURL, name, listErr, queueURL, to, ErrNotDeadLetterQueue))
	case listErr != nil:
		return Queues{DLQ: dlq, targetErr: found(nil, fmt.Sprintf("cannot tell which queue %s belongs to (%v): name the replay target with %s (peek shows each message's watchbot-source-queue)", name, listErr, to))}, nil
	case len(sources) > 1:
		return Queues{DLQ: dlq, targetErr: found(nil, fmt.Sprintf("%s is the dead-letter queue of %d queues (%s): choose the replay target with %s (peek shows each message's watchbot-source-queue)",
			name, len(sources), strings.Join(sources, ", "), to))}, nil
	}
	src, err := queueattr.Describe(ctx, api, sources[0])
	if err != nil {
		return Queues{}, err
	}
	return Queues{DLQ: dlq, target: &src}, nil
}

func listSources(ctx context.Context, api API, dlqURL string) ([]string, error) {
	var urls []string
	in := &sqs.ListDeadLetterSourceQueuesInput{QueueUrl: aws.String(dlqURL), MaxResults: aws.Int32(1000)}
	for {
		out, err := api.ListDeadLetterSourceQueues(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("list dead-letter source queues: %w", err)
		}
		urls = append(urls, out.QueueUrls...)
		if aws.ToString(out.NextToken) == "" {
			return urls, nil
		}
		in.NextToken = out.NextToken
	}
}

// Counts are a queue's approximate message counts, as SQS reports them.
type Counts struct {
	Visible  int64 `json:"visible"`
	InFlight int64 `json:"inFlight"`
	Delayed  int64 `json:"delayed"`
}

// Total is the number of messages in the queue, visible or not.
func (c Counts) Total() int64 { return c.Visible + c.InFlight + c.Delayed }

// Count reads the DLQ's message counts afresh.
func Count(ctx context.Context, api API, q Queues) (Counts, error) {
	info, err := queueattr.Describe(ctx, api, q.DLQ.URL)
	if err != nil {
		return Counts{}, err
	}
	return Counts{Visible: info.Visible, InFlight: info.InFlight, Delayed: info.Delayed}, nil
}

// Purge deletes every message in the DLQ. SQS allows one purge per queue every 60 seconds and
// may take up to 60 seconds to finish one.
func Purge(ctx context.Context, api API, q Queues) error {
	if _, err := api.PurgeQueue(ctx, &sqs.PurgeQueueInput{QueueUrl: aws.String(q.DLQ.URL)}); err != nil {
		return fmt.Errorf("purge %s: %w", queueattr.NameFromURL(q.DLQ.URL), err)
	}
	return nil
}
