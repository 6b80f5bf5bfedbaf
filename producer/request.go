package producer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/internal/sqsspec"
)

// QueueAPI is the part of the SQS client Deliver calls.
type QueueAPI interface {
	API
	queueattr.API
}

var _ QueueAPI = (*sqs.Client)(nil)

// Body is one message body and where it came from, for error messages ("stdin line 3").
type Body struct {
	Text   string
	Source string
}

// Request is what `watchbot send` asks for: bodies that share attributes, delay and group.
type Request struct {
	QueueURL   string
	Bodies     []Body
	Attributes map[string]types.MessageAttributeValue
	// Delay postpones delivery; standard queues only, at most sqsspec.MaxDelay.
	Delay time.Duration
	// GroupID is the MessageGroupId: required on FIFO queues; on a standard queue it names the
	// message's tenant for SQS fair queues ("Amazon SQS fair queues", SQS Developer Guide).
	GroupID string
	// TraceContext is added to every message's attributes where SQS's limits leave room;
	// where they do not, the message is sent without it and its Result says so.
	TraceContext TraceContext
}

// Validate checks what can be checked without asking SQS.
func (r Request) Validate() error {
	if err := queueattr.ValidateURL(r.QueueURL); err != nil {
		return listenspec.Error{Setting: listenspec.SettingQueueURL, Err: err}
	}
	if len(r.Bodies) == 0 {
		return listenspec.Refuse("", nil, "nothing to send: give "+listenspec.Ref(listenspec.SettingBody)+", "+listenspec.Ref(listenspec.SettingFile)+" or lines on stdin")
	}
	if r.Delay < 0 || r.Delay > sqsspec.MaxDelay {
		return listenspec.Refuse(listenspec.SettingDelay, r.Delay, fmt.Sprintf("must be between 0 and %v", sqsspec.MaxDelay))
	}
	if err := CheckAttributes(r.Attributes); err != nil {
		return listenspec.Error{Setting: listenspec.SettingAttrs, Err: err}
	}
	return nil
}

// InputError lists the inputs SQS would refuse; nothing was sent. A problem with a setting of
// the request is a listenspec.Error.
type InputError struct {
	Problems []error
}

func (e *InputError) Error() string {
	problems := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		problems[i] = p.Error()
	}
	return fmt.Sprintf("nothing sent: %s", strings.Join(problems, "; "))
}

// Deliver checks every body against the queue (FIFO or not, MaximumMessageSize, characters)
// and, only when all pass, sends them in batches. A bad input is an *InputError naming each
// bad body and nothing is sent. Otherwise it returns one Result per body, in order.
func Deliver(ctx context.Context, api QueueAPI, r Request) ([]Result, error) {
	if err := r.Validate(); err != nil {
		return nil, &InputError{Problems: []error{err}}
	}
	info, err := queueattr.Describe(ctx, api, r.QueueURL)
	if err != nil {
		return nil, err
	}
	name, groupID := queueattr.NameFromURL(r.QueueURL), listenspec.Ref(listenspec.SettingGroupID)
	refuse := func(reason string) error { return &InputError{Problems: []error{listenspec.Refuse("", nil, reason)}} }
	switch {
	case info.FIFO && r.GroupID == "":
		return nil, refuse(groupID + " is required: " + name + " is a FIFO queue")
	case info.FIFO && r.Delay > 0:
		return nil, refuse(listenspec.Ref(listenspec.SettingDelay) + " is not allowed: " + name + " is a FIFO queue (set the queue's DelaySeconds instead)")
	}
	contentDedup := false
	if info.FIFO {
		out, err := api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
			QueueUrl:       aws.String(r.QueueURL),
			AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameContentBasedDeduplication},
		})
		if err != nil {
			return nil, fmt.Errorf("read attributes of %s: %w", r.QueueURL, err)
		}
		contentDedup = out.Attributes[string(types.QueueAttributeNameContentBasedDeduplication)] == "true"
	}
	limits := Limits{MaxSize: info.MaximumMessageSize, FIFO: info.FIFO}
	msgs := make([]Message, len(r.Bodies))
	warnings := make([]string, len(r.Bodies))
	var problems []error
	for i, b := range r.Bodies {
		m := Message{Body: b.Text, Attributes: r.Attributes, GroupID: r.GroupID, Delay: r.Delay}
		if info.FIFO && !contentDedup {
			m.DeduplicationID = NewDeduplicationID()
		}
		if err := Check(m, limits); err != nil {
			problems = append(problems, fmt.Errorf("%s: %w", b.Source, err))
		}
		msgs[i], warnings[i] = withTraceContext(m, r.TraceContext, limits)
	}
	if len(problems) > 0 {
		return nil, &InputError{Problems: problems}
	}
	results := make([]Result, len(msgs))
	Send(ctx, api, r.QueueURL, msgs, func(i int, res Result) {
		res.Warning = warnings[i]
		results[i] = res
	})
	return results, nil
}

// maxLine is the longest stdin line ReadLines accepts: a 1 MiB body and its line ending.
const maxLine = sqsspec.MaxMessageSize + 2

// ReadLines reads one body per line ("\n" or "\r\n" ends a line), naming each "<name> line N".
// Empty lines are kept so that Deliver refuses them by line number rather than skipping input
// silently.
func ReadLines(r io.Reader, name string) ([]Body, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), maxLine)
	var bodies []Body
	n := 0
	for sc.Scan() {
		n++
		bodies = append(bodies, Body{Text: strings.TrimSuffix(sc.Text(), "\r"), Source: fmt.Sprintf("%s line %d", name, n)})
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("%s line %d: longer than 1 MiB, SQS's largest message", name, n+1)
		}
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return bodies, nil
}
