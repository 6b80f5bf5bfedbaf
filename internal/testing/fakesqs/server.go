package fakesqs

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// Server is an SQS stand-in. Its methods have the signatures of *sqs.Client's, so it
// satisfies the small interfaces consumers declare over the SDK client; ServeHTTP and Listen
// serve the same queues over the AWS JSON 1.0 protocol. It is safe for concurrent use.
type Server struct {
	// mu guards every queue, every message and the counters below. It is held only while
	// state is read or changed, never while a receive waits.
	mu     sync.Mutex
	queues map[string]*queue // by name
	serial uint64            // last message, receipt and sequence serial handed out
	calls  map[string]int
	faults map[string]faultPlan
	// dialect is how the HTTP face names errors (SetDialect).
	dialect atomic.Int32
	// inFlight is the longest a message stays in flight after a receive (InFlightLimit);
	// set by New, read only.
	inFlight time.Duration
}

// Option changes a Server that New returns.
type Option func(*Server)

// InFlightLimit scales SQS's 12-hour in-flight limit down to d (whole seconds, at least one),
// so that a test sees in seconds what SQS does in hours. The ChangeMessageVisibility API
// reference words the limit: "You can continue to call ChangeMessageVisibility to extend the
// visibility timeout to a maximum of 12 hours. If you try to extend the visibility timeout
// beyond 12 hours, your request is rejected", and "If you attempt to set the
// VisibilityTimeout to an amount more than the maximum time left, Amazon SQS returns an
// error. It will not automatically recalculate and increase the timeout to the maximum time
// remaining" (InvalidParameterValue, "Total VisibilityTimeout for the message is beyond the
// limit"). With the limit scaled: a receive hides a message for at most d; a change whose
// total since the receive passes d is refused with that error; the message is visible again
// at d, and the next receive raises its ApproximateReceiveCount and gives a new receipt
// handle ("Amazon SQS visibility timeout", SQS Developer Guide); a delete with the handle of
// an earlier receive succeeds without deleting it (the DeleteMessage reference), as at 12
// hours.
func InFlightLimit(d time.Duration) Option {
	return func(s *Server) { s.inFlight = max(d.Truncate(time.Second), time.Second) }
}

// Fault says whether an injected failure happens before or after the call takes effect.
type Fault int

const (
	// Before fails the call without effect.
	Before Fault = iota
	// After lets the call take effect, then loses the answer: a receive takes its messages
	// and raises their receive counts, a send enqueues, a delete deletes, and the caller
	// gets InternalFailure all the same.
	After
)

type faultPlan struct {
	left int
	when Fault
}

// MessageState is a snapshot of one message, for tests to assert on.
type MessageState struct {
	ID, Body, GroupID, DedupID, SequenceNumber string
	// ReceiveCount is ApproximateReceiveCount: how many receives returned the message.
	ReceiveCount int
	// InFlight is true between a receive and the end of its visibility timeout.
	InFlight bool
	// VisibleAt is when the message is or was available to a receive: the end of the latest
	// visibility timeout once received, the end of its delay before that.
	VisibleAt time.Time
	// FirstReceived is ApproximateFirstReceiveTimestamp (zero until the first receive).
	FirstReceived time.Time
	// Sent is SentTimestamp, which a redrive to a dead-letter queue keeps.
	Sent time.Time
}

// New returns an empty Server. It starts no goroutines and reads time from time.Now, so
// under testing/synctest the bubble's clock drives visibility timeouts, delays and long
// polls. Create it inside the bubble that uses it.
func New(opts ...Option) *Server {
	s := &Server{
		queues:   map[string]*queue{},
		calls:    map[string]int{},
		faults:   map[string]faultPlan{},
		inFlight: maxInFlight,
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Fail makes the next n calls of op (an SQS operation name such as "ReceiveMessage") fail
// with InternalFailure, the error an SQS server fault gives (HTTP 500 over the wire).
// n <= 0 cancels the failures still planned for op. An op the Server does not serve panics:
// it is a mistake in the test.
func (s *Server) Fail(op string, n int, when Fault) {
	mustBeOperation(op)
	s.mu.Lock()
	defer s.mu.Unlock()
	if n <= 0 {
		delete(s.faults, op)
		return
	}
	s.faults[op] = faultPlan{left: n, when: when}
}

// Calls returns how many calls of op the Server has answered, failed ones included.
func (s *Server) Calls(op string) int {
	mustBeOperation(op)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[op]
}

// Messages returns every message of the queue that is not yet deleted, in the order the
// messages entered it (a dead-letter queue lists the messages moved to it). It returns nil
// for a queue that does not exist.
func (s *Server) Messages(queueURL string) []MessageState {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queueByURL(&queueURL)
	if err != nil {
		return nil
	}
	now := time.Now()
	q.expire(now)
	out := make([]MessageState, 0, len(q.msgs))
	for _, m := range q.msgs {
		st := MessageState{
			ID: m.id, Body: m.body, GroupID: m.group, DedupID: m.dedupID, SequenceNumber: m.seq,
			ReceiveCount: m.receives, InFlight: m.inFlight(now), VisibleAt: m.available,
			FirstReceived: m.firstReceive, Sent: m.sent,
		}
		if m.rcv != nil {
			st.VisibleAt = m.visibleAt
		}
		out = append(out, st)
	}
	return out
}

func mustBeOperation(op string) {
	if _, ok := operations[op]; !ok {
		panic(fmt.Sprintf("fakesqs: %q is not an operation the Server serves", op))
	}
}

// call runs one operation as both faces answer it: a done ctx fails it as the SDK would
// (nothing is sent), then it is counted and any planned fault is applied around do.
func call[In, Out any](s *Server, ctx context.Context, op string, in *In, do func(context.Context, *In) (*Out, error)) (*Out, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.calls[op]++
	plan, faulted := s.faults[op]
	if faulted {
		plan.left--
		if plan.left == 0 {
			delete(s.faults, op)
		} else {
			s.faults[op] = plan
		}
	}
	s.mu.Unlock()
	if faulted && plan.when == Before {
		return nil, internalFailure()
	}
	if in == nil {
		in = new(In)
	}
	out, err := do(ctx, in)
	if faulted {
		if ctxErr := ctx.Err(); err != nil && ctxErr != nil {
			return nil, ctxErr
		}
		return nil, internalFailure()
	}
	return out, err
}

// onQueue is call for an operation on one queue, which url reads from the input: do runs under
// the server's lock, with the queue, or the operation fails as SQS fails it for an unknown
// queue.
func onQueue[In, Out any](s *Server, ctx context.Context, op string, in *In, url func(*In) *string, do func(*queue, *In) (*Out, error)) (*Out, error) {
	return call(s, ctx, op, in, func(_ context.Context, in *In) (*Out, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		q, err := s.queueByURL(url(in))
		if err != nil {
			return nil, err
		}
		return do(q, in)
	})
}

// baseKey carries the scheme and host that queue URLs in answers are built on.
type baseKey struct{}

func urlBase(ctx context.Context) string {
	if b, ok := ctx.Value(baseKey{}).(string); ok {
		return b
	}
	return memoryBase
}

func (s *Server) next() uint64 {
	s.serial++
	return s.serial
}

func missing(param string) error {
	return errMissingParameter.errorf("The request must contain the parameter %s.", param)
}

// queueByURL finds a queue by the last path segment of its URL, so that both URL shapes
// (with and without the HTTP face's port) name the same queue.
func (s *Server) queueByURL(queueURL *string) (*queue, error) {
	if queueURL == nil || *queueURL == "" {
		return nil, missing("QueueUrl")
	}
	u, err := url.Parse(*queueURL)
	if err != nil || !strings.HasPrefix(u.Path, "/") || strings.Count(u.Path, "/") != 2 {
		return nil, errInvalidAddress.errorf("The address %s is not valid for this endpoint.", *queueURL)
	}
	name := u.Path[strings.LastIndexByte(u.Path, '/')+1:]
	q, ok := s.queues[name]
	if !ok {
		return nil, errQueueDoesNotExist.errorf("The specified queue does not exist.")
	}
	return q, nil
}

func (s *Server) queueByARN(arn string) *queue {
	name, ok := strings.CutPrefix(arn, "arn:aws:sqs:"+region+":"+accountID+":")
	if !ok {
		return nil
	}
	return s.queues[name]
}

// validQueueName applies the CreateQueue API reference's rule: up to 80 characters of
// alphanumerics, hyphens and underscores, and a FIFO queue's name ends in ".fifo".
func validQueueName(name string, fifo bool) bool {
	base := name
	if fifo {
		var ok bool
		if base, ok = strings.CutSuffix(name, ".fifo"); !ok {
			return false
		}
	}
	if base == "" || len(name) > 80 {
		return false
	}
	for _, c := range base {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// checkRedrive refuses a redrive policy whose target is missing or of the other queue type
// ("The dead-letter queue of a FIFO queue must also be a FIFO queue", CreateQueue API
// reference).
func (s *Server) checkRedrive(policy string, fifo bool) error {
	if policy == "" {
		return nil
	}
	p, _ := parseRedrivePolicy(policy)
	target := s.queueByARN(p.targetARN)
	if target == nil {
		return errInvalidParameterValue.errorf("Value %s for parameter RedrivePolicy is invalid. Reason: Dead letter target does not exist.", policy)
	}
	if target.fifo != fifo {
		return errInvalidParameterValue.errorf("Value %s for parameter RedrivePolicy is invalid. Reason: Dead-letter queue must be same type of queue as the source.", policy)
	}
	return nil
}

// CreateQueue creates a queue, or returns the URL of an existing one when every attribute
// given equals the queue's; a differing attribute is QueueNameExists.
func (s *Server) CreateQueue(ctx context.Context, in *sqs.CreateQueueInput, _ ...func(*sqs.Options)) (*sqs.CreateQueueOutput, error) {
	return call(s, ctx, "CreateQueue", in, s.createQueue)
}

func (s *Server) createQueue(ctx context.Context, in *sqs.CreateQueueInput) (*sqs.CreateQueueOutput, error) {
	if in.QueueName == nil {
		return nil, missing("QueueName")
	}
	name := *in.QueueName
	fifo := in.Attributes["FifoQueue"] == "true"
	if !validQueueName(name, fifo) {
		if fifo {
			return nil, errInvalidParameterValue.errorf("The name of a FIFO queue can only include alphanumeric characters, hyphens, or underscores, must end with .fifo suffix and be 1 to 80 in length.")
		}
		return nil, errInvalidParameterValue.errorf("Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length")
	}
	given := map[string]string{}
	for k, v := range in.Attributes {
		norm, err := normaliseAttribute(k, v, fifo)
		if err != nil {
			return nil, err
		}
		given[k] = norm
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	base := urlBase(ctx)
	if q, ok := s.queues[name]; ok {
		for k, v := range given {
			if q.attrs[k] != v && !(k == "FifoQueue" && v == strconv.FormatBool(q.fifo)) {
				return nil, errQueueNameExists.errorf("A queue already exists with the same name and a different value for attribute %s", k)
			}
		}
		return &sqs.CreateQueueOutput{QueueUrl: aws.String(q.url(base))}, nil
	}
	if err := s.checkRedrive(given["RedrivePolicy"], fifo); err != nil {
		return nil, err
	}
	now := time.Now()
	q := &queue{
		name: name, fifo: fifo, created: now, modified: now, attrs: map[string]string{}, inFlight: s.inFlight,
		bySerial: map[uint64]*message{}, dedup: map[string]sent{}, attempts: map[string]*attempt{},
	}
	for k, rule := range queueAttributes {
		if rule.def != "" && (!rule.fifoOnly || fifo) {
			q.attrs[k] = rule.def
		}
	}
	for k, v := range given {
		if k != "FifoQueue" {
			q.attrs[k] = v
		}
	}
	q.apply()
	s.queues[name] = q
	return &sqs.CreateQueueOutput{QueueUrl: aws.String(q.url(base))}, nil
}

// GetQueueUrl returns the URL of the queue with the given name.
func (s *Server) GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, _ ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error) {
	return call(s, ctx, "GetQueueUrl", in, func(ctx context.Context, in *sqs.GetQueueUrlInput) (*sqs.GetQueueUrlOutput, error) {
		if in.QueueName == nil {
			return nil, missing("QueueName")
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		q, ok := s.queues[*in.QueueName]
		if !ok {
			return nil, errQueueDoesNotExist.errorf("The specified queue does not exist.")
		}
		return &sqs.GetQueueUrlOutput{QueueUrl: aws.String(q.url(urlBase(ctx)))}, nil
	})
}

// GetQueueAttributes returns the attributes named, or all of them for "All". No names
// returns no attributes, as SQS does.
func (s *Server) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, _ ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	return call(s, ctx, "GetQueueAttributes", in, s.getQueueAttributes)
}

// computedAttributes are the read-only attributes GetQueueAttributes reports.
var computedAttributes = []string{
	"QueueArn", "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
	"ApproximateNumberOfMessagesDelayed", "CreatedTimestamp", "LastModifiedTimestamp",
}

func (s *Server) getQueueAttributes(_ context.Context, in *sqs.GetQueueAttributesInput) (*sqs.GetQueueAttributesOutput, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queueByURL(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	q.expire(now)
	visible, inFlight, delayed := q.counts(now)
	all := map[string]string{
		"QueueArn":                              q.arn(),
		"ApproximateNumberOfMessages":           strconv.Itoa(visible),
		"ApproximateNumberOfMessagesNotVisible": strconv.Itoa(inFlight),
		"ApproximateNumberOfMessagesDelayed":    strconv.Itoa(delayed),
		"CreatedTimestamp":                      strconv.FormatInt(q.created.Unix(), 10),
		"LastModifiedTimestamp":                 strconv.FormatInt(q.modified.Unix(), 10),
	}
	for k, v := range q.attrs {
		if v != "" {
			all[k] = v
		}
	}
	if q.fifo {
		all["FifoQueue"] = "true"
	}
	out := map[string]string{}
	for _, name := range in.AttributeNames {
		n := string(name)
		if n == "All" {
			return &sqs.GetQueueAttributesOutput{Attributes: all}, nil
		}
		if _, ok := queueAttributes[n]; !ok && !slices.Contains(computedAttributes, n) {
			return nil, errInvalidAttributeName.errorf("Unknown Attribute %s.", n)
		}
		if v, ok := all[n]; ok {
			out[n] = v
		}
	}
	return &sqs.GetQueueAttributesOutput{Attributes: out}, nil
}

// SetQueueAttributes changes settable attributes; FifoQueue can be set only at creation. A
// RedrivePolicy of "" removes the policy.
func (s *Server) SetQueueAttributes(ctx context.Context, in *sqs.SetQueueAttributesInput, _ ...func(*sqs.Options)) (*sqs.SetQueueAttributesOutput, error) {
	return onQueue(s, ctx, "SetQueueAttributes", in, func(in *sqs.SetQueueAttributesInput) *string { return in.QueueUrl }, func(q *queue, in *sqs.SetQueueAttributesInput) (*sqs.SetQueueAttributesOutput, error) {
		given := map[string]string{}
		for k, v := range in.Attributes {
			if queueAttributes[k].createOnly {
				return nil, errInvalidAttributeName.errorf("Unknown Attribute %s.", k)
			}
			norm, err := normaliseAttribute(k, v, q.fifo)
			if err != nil {
				return nil, err
			}
			given[k] = norm
		}
		if err := s.checkRedrive(given["RedrivePolicy"], q.fifo); err != nil {
			return nil, err
		}
		for k, v := range given {
			q.attrs[k] = v
		}
		q.apply()
		q.modified = time.Now()
		q.notify() // a shorter delay may make messages ready sooner
		return &sqs.SetQueueAttributesOutput{}, nil
	})
}

// PurgeQueue deletes every message of the queue, in flight or not. A second purge within 60
// seconds is PurgeQueueInProgress ("PurgeQueue" in the SQS API Reference).
func (s *Server) PurgeQueue(ctx context.Context, in *sqs.PurgeQueueInput, _ ...func(*sqs.Options)) (*sqs.PurgeQueueOutput, error) {
	return onQueue(s, ctx, "PurgeQueue", in, func(in *sqs.PurgeQueueInput) *string { return in.QueueUrl }, func(q *queue, in *sqs.PurgeQueueInput) (*sqs.PurgeQueueOutput, error) {
		now := time.Now()
		if !q.lastPurge.IsZero() && now.Sub(q.lastPurge) < time.Minute {
			return nil, errPurgeQueueInProgress.errorf("Only one PurgeQueue operation on %s is allowed every 60 seconds.", q.name)
		}
		q.lastPurge = now
		for _, m := range q.msgs {
			if m.rcv != nil {
				m.rcv.modified = true
			}
		}
		q.msgs = nil
		q.bySerial = map[uint64]*message{}
		return &sqs.PurgeQueueOutput{}, nil
	})
}

// ListDeadLetterSourceQueues lists the URLs of the queues whose redrive policy names the
// given queue, sorted, in pages of MaxResults (1 to 1000; default all, at most 1000).
func (s *Server) ListDeadLetterSourceQueues(ctx context.Context, in *sqs.ListDeadLetterSourceQueuesInput, _ ...func(*sqs.Options)) (*sqs.ListDeadLetterSourceQueuesOutput, error) {
	return call(s, ctx, "ListDeadLetterSourceQueues", in, func(ctx context.Context, in *sqs.ListDeadLetterSourceQueuesInput) (*sqs.ListDeadLetterSourceQueuesOutput, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		dlq, err := s.queueByURL(in.QueueUrl)
		if err != nil {
			return nil, err
		}
		limit := 1000
		if in.MaxResults != nil {
			if *in.MaxResults < 1 || *in.MaxResults > 1000 {
				return nil, errInvalidParameterValue.errorf("Value %d for parameter MaxResults is invalid. Reason: MaxResults must be an integer between 1 and 1000.", *in.MaxResults)
			}
			limit = int(*in.MaxResults)
		}
		var urls []string
		for _, q := range s.queues {
			if q.settings.redrive != nil && q.settings.redrive.targetARN == dlq.arn() {
				urls = append(urls, q.url(urlBase(ctx)))
			}
		}
		slices.Sort(urls)
		start := 0
		if in.NextToken != nil {
			n, err := strconv.Atoi(*in.NextToken)
			if err != nil || n < 0 || n > len(urls) {
				return nil, errInvalidParameterValue.errorf("Invalid NextToken value.")
			}
			start = n
		}
		end := min(start+limit, len(urls))
		out := &sqs.ListDeadLetterSourceQueuesOutput{QueueUrls: urls[start:end]}
		if out.QueueUrls == nil {
			out.QueueUrls = []string{}
		}
		if end < len(urls) && in.MaxResults != nil {
			out.NextToken = aws.String(strconv.Itoa(end))
		}
		return out, nil
	})
}

// Compile-time checks that *Server offers what *sqs.Client offers for these operations.
type sqsAPI interface {
	CreateQueue(context.Context, *sqs.CreateQueueInput, ...func(*sqs.Options)) (*sqs.CreateQueueOutput, error)
	GetQueueUrl(context.Context, *sqs.GetQueueUrlInput, ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error)
	GetQueueAttributes(context.Context, *sqs.GetQueueAttributesInput, ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
	SetQueueAttributes(context.Context, *sqs.SetQueueAttributesInput, ...func(*sqs.Options)) (*sqs.SetQueueAttributesOutput, error)
	SendMessage(context.Context, *sqs.SendMessageInput, ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
	SendMessageBatch(context.Context, *sqs.SendMessageBatchInput, ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
	ReceiveMessage(context.Context, *sqs.ReceiveMessageInput, ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessage(context.Context, *sqs.DeleteMessageInput, ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
	DeleteMessageBatch(context.Context, *sqs.DeleteMessageBatchInput, ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
	ChangeMessageVisibility(context.Context, *sqs.ChangeMessageVisibilityInput, ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
	ChangeMessageVisibilityBatch(context.Context, *sqs.ChangeMessageVisibilityBatchInput, ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
	PurgeQueue(context.Context, *sqs.PurgeQueueInput, ...func(*sqs.Options)) (*sqs.PurgeQueueOutput, error)
	ListDeadLetterSourceQueues(context.Context, *sqs.ListDeadLetterSourceQueuesInput, ...func(*sqs.Options)) (*sqs.ListDeadLetterSourceQueuesOutput, error)
}

var (
	_ sqsAPI = (*sqs.Client)(nil)
	_ sqsAPI = (*Server)(nil)
)
