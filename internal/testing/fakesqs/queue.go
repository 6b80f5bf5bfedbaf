package fakesqs

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Account, region and the hosts that queue URLs and ARNs are built from.
const (
	accountID  = "000000000000"
	region     = "us-east-1"
	memoryBase = "http://sqs." + region + ".localhost"
)

// SQS limits, from the API reference page of the call or attribute named.
const (
	maxMessageSize   = 1 << 20                     // MaximumMessageSize: the largest, and the default
	maxDelay         = 900                         // DelaySeconds, in seconds
	maxWait          = 20                          // WaitTimeSeconds, in seconds
	maxVisibility    = 43200                       // VisibilityTimeout, in seconds
	maxInFlight      = maxVisibility * time.Second // ChangeMessageVisibility: in flight since the receive
	maxReceive       = 10                          // ReceiveMessage: MaxNumberOfMessages
	maxAttributes    = 10                          // SendMessage: message attributes per message
	maxAttributeName = 256                         // SendMessage: length of an attribute name or data type
	maxIDLength      = 128                         // MessageGroupId, MessageDeduplicationId, ReceiveRequestAttemptId
	maxBatchEntries  = 10                          // the batch calls: entries per call
	maxBatchPayload  = 1 << 20                     // SendMessageBatch: the sum of its messages
	dedupInterval    = 5 * time.Minute             // SendMessage: MessageDeduplicationId
	attemptRetention = 5 * time.Minute             // ReceiveMessage: ReceiveRequestAttemptId
)

// Sequence numbers are 20 digits, increasing and not consecutive, like SQS's.
const (
	sequenceBase = uint64(10_000_000_000_000_000_000)
	sequenceStep = 4096
)

// queue is one queue: its settings and the messages it holds. Every field is guarded by
// Server.mu.
type queue struct {
	name     string
	fifo     bool
	inFlight time.Duration // the Server's in-flight limit
	created  time.Time
	modified time.Time
	attrs    map[string]string // every settable attribute, normalised, defaults included
	settings settings          // attrs, parsed

	msgs      []*message          // in the order they entered the queue (send or redrive)
	bySerial  map[uint64]*message // the same messages, for receipt handles
	dedup     map[string]sent     // FIFO: deduplication key -> the send it answers for
	attempts  map[string]*attempt // FIFO: ReceiveRequestAttemptId -> what that receive returned
	lastPurge time.Time

	// changed is closed when something a waiting receive could take may have appeared. It is
	// made by the first waiter (so it belongs to that waiter's synctest bubble) and dropped
	// when the last waiter leaves.
	changed chan struct{}
	waiters int
}

// settings are a queue's attributes as the Server uses them.
type settings struct {
	visibility    time.Duration
	delay         time.Duration
	wait          time.Duration
	retention     time.Duration
	maxSize       int
	redrive       *redrivePolicy // nil: none
	contentDedup  bool
	dedupPerGroup bool // DeduplicationScope=messageGroup
}

func (q *queue) arn() string { return "arn:aws:sqs:" + region + ":" + accountID + ":" + q.name }

func (q *queue) url(base string) string { return base + "/" + accountID + "/" + q.name }

// message is one message in a queue.
type message struct {
	serial     uint64 // unique in the Server; names the message in receipt handles
	id         string
	body       string
	attrs      map[string]types.MessageAttributeValue
	sysAttrs   map[string]types.MessageSystemAttributeValue
	md5Body    string
	md5Attrs   string
	md5SysAttr string
	group      string
	dedupID    string
	seq        string
	sent       time.Time // SentTimestamp; kept through a redrive
	enqueued   time.Time // start of the retention period
	available  time.Time // end of the delay
	sourceARN  string    // the queue it was redriven from, if any

	receives     int
	firstReceive time.Time
	rcv          *receipt  // the latest receive; nil until the first
	visibleAt    time.Time // end of the latest receive's visibility timeout
}

// receipt is one receive of a message; its handle is valid for this receive only.
type receipt struct {
	serial   uint64
	handle   string
	at       time.Time
	modified bool // deleted or visibility changed, which ends ReceiveRequestAttemptId replays
}

// sent is what a FIFO send answered, kept for the deduplication interval.
type sent struct {
	messageID string
	seq       string
	until     time.Time
}

// attempt is what a FIFO receive with a ReceiveRequestAttemptId returned.
type attempt struct {
	until time.Time
	items []attemptItem
}

type attemptItem struct{ msg, rcv uint64 }

func (m *message) inFlight(now time.Time) bool { return m.rcv != nil && now.Before(m.visibleAt) }

func (m *message) delayed(now time.Time) bool { return now.Before(m.available) }

func (m *message) ready(now time.Time) bool { return !m.inFlight(now) && !m.delayed(now) }

// candidates lists, in the order a receive takes them, the messages a receive at now may
// return, before redrive and MaxNumberOfMessages apply. msgs is a queue's messages in the
// order they entered it.
//
// Standard queue: every ready message (neither in flight nor delayed), oldest first.
//
// FIFO queue ("FIFO queue delivery logic" in the SQS Developer Guide): a message group with
// any message in flight is blocked and gives nothing. The other groups come in the order of
// their oldest message, and each gives its messages in order up to the first one that is
// not ready (delayed), so a group never gives a message before one sent earlier.
func candidates(msgs []*message, now time.Time, fifo bool) []*message {
	var out []*message
	if !fifo {
		for _, m := range msgs {
			if m.ready(now) {
				out = append(out, m)
			}
		}
		return out
	}
	type group struct {
		blocked bool
		msgs    []*message
	}
	groups := map[string]*group{}
	var order []string
	for _, m := range msgs {
		g := groups[m.group]
		if g == nil {
			g = &group{}
			groups[m.group] = g
			order = append(order, m.group)
		}
		if m.inFlight(now) {
			g.blocked = true
		}
		g.msgs = append(g.msgs, m)
	}
	for _, name := range order {
		g := groups[name]
		if g.blocked {
			continue
		}
		for _, m := range g.msgs {
			if !m.ready(now) {
				break
			}
			out = append(out, m)
		}
	}
	return out
}

// nextChange is the earliest time after now at which a message of q may become ready, or
// the zero time if none will without a call.
func (q *queue) nextChange(now time.Time) time.Time {
	var next time.Time
	consider := func(t time.Time) {
		if t.After(now) && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for _, m := range q.msgs {
		consider(m.available)
		if m.rcv != nil {
			consider(m.visibleAt)
		}
	}
	return next
}

// expire drops the messages whose retention period has ended ("MessageRetentionPeriod" in
// the CreateQueue API reference).
func (q *queue) expire(now time.Time) {
	q.msgs = slices.DeleteFunc(q.msgs, func(m *message) bool {
		if now.Before(m.enqueued.Add(q.settings.retention)) {
			return false
		}
		delete(q.bySerial, m.serial)
		return true
	})
	for key, s := range q.dedup {
		if !now.Before(s.until) {
			delete(q.dedup, key)
		}
	}
	for id, a := range q.attempts {
		if !now.Before(a.until) {
			delete(q.attempts, id)
		}
	}
}

func (q *queue) add(m *message) {
	q.msgs = append(q.msgs, m)
	q.bySerial[m.serial] = m
	q.notify()
}

func (q *queue) remove(m *message) {
	q.msgs = slices.DeleteFunc(q.msgs, func(x *message) bool { return x == m })
	delete(q.bySerial, m.serial)
	if m.rcv != nil {
		m.rcv.modified = true
	}
	q.notify() // a FIFO group may have been unblocked
}

// notify wakes the receives waiting on q.
func (q *queue) notify() {
	if q.changed != nil {
		close(q.changed)
		q.changed = nil
	}
}

// counts returns ApproximateNumberOfMessages, ...NotVisible and ...Delayed.
func (q *queue) counts(now time.Time) (visible, inFlight, delayed int) {
	for _, m := range q.msgs {
		switch {
		case m.inFlight(now):
			inFlight++
		case m.delayed(now):
			delayed++
		default:
			visible++
		}
	}
	return visible, inFlight, delayed
}

// attrRule says what values one settable queue attribute takes ("CreateQueue" and
// "SetQueueAttributes" in the SQS API Reference).
type attrRule struct {
	min, max   int      // integer attributes: the range, inclusive
	enum       []string // enumerated attributes: the values
	isInt      bool
	free       bool // any string (policies, key ids)
	fifoOnly   bool
	createOnly bool
	def        string // default, "" for none
}

var boolValues = []string{"true", "false"}

var queueAttributes = map[string]attrRule{
	"DelaySeconds":                  {isInt: true, min: 0, max: maxDelay, def: "0"},
	"MaximumMessageSize":            {isInt: true, min: 1024, max: maxMessageSize, def: strconv.Itoa(maxMessageSize)},
	"MessageRetentionPeriod":        {isInt: true, min: 60, max: 1209600, def: "345600"},
	"ReceiveMessageWaitTimeSeconds": {isInt: true, min: 0, max: maxWait, def: "0"},
	"VisibilityTimeout":             {isInt: true, min: 0, max: maxVisibility, def: "30"},
	"KmsDataKeyReusePeriodSeconds":  {isInt: true, min: 60, max: 86400},
	"Policy":                        {free: true},
	"KmsMasterKeyId":                {free: true},
	"RedriveAllowPolicy":            {free: true},
	"RedrivePolicy":                 {free: true}, // checked by Server.checkRedrive
	"SqsManagedSseEnabled":          {enum: boolValues, def: "true"},
	"FifoQueue":                     {enum: boolValues, createOnly: true},
	"ContentBasedDeduplication":     {enum: boolValues, fifoOnly: true, def: "false"},
	"DeduplicationScope":            {enum: []string{"messageGroup", "queue"}, fifoOnly: true, def: "queue"},
	"FifoThroughputLimit":           {enum: []string{"perMessageGroupId", "perQueue"}, fifoOnly: true, def: "perQueue"},
}

// normaliseAttribute checks one attribute for a queue of the given type and returns its
// value as GetQueueAttributes reports it.
func normaliseAttribute(name, value string, fifo bool) (string, error) {
	rule, ok := queueAttributes[name]
	if !ok || rule.fifoOnly && !fifo {
		return "", errInvalidAttributeName.errorf("Unknown Attribute %s.", name)
	}
	switch {
	case rule.isInt:
		n, err := strconv.Atoi(strings.TrimSpace(value))
		if err != nil || n < rule.min || n > rule.max {
			return "", errInvalidAttributeValue.errorf("Invalid value for the parameter %s. Reason: Must be an integer from %d to %d.", name, rule.min, rule.max)
		}
		return strconv.Itoa(n), nil
	case rule.enum != nil:
		if !slices.Contains(rule.enum, value) {
			return "", errInvalidAttributeValue.errorf("Invalid value for the parameter %s. Reason: Must be one of %s.", name, strings.Join(rule.enum, ", "))
		}
	case name == "RedrivePolicy" && value != "":
		p, err := parseRedrivePolicy(value)
		if err != nil {
			return "", err
		}
		return p.String(), nil
	}
	return value, nil
}

// apply parses q.attrs into q.settings; the values were checked by normaliseAttribute.
func (q *queue) apply() {
	secs := func(name string) time.Duration {
		n, _ := strconv.Atoi(q.attrs[name])
		return time.Duration(n) * time.Second
	}
	q.settings.visibility = secs("VisibilityTimeout")
	q.settings.delay = secs("DelaySeconds")
	q.settings.wait = secs("ReceiveMessageWaitTimeSeconds")
	q.settings.retention = secs("MessageRetentionPeriod")
	q.settings.maxSize, _ = strconv.Atoi(q.attrs["MaximumMessageSize"])
	q.settings.contentDedup = q.attrs["ContentBasedDeduplication"] == "true"
	q.settings.dedupPerGroup = q.attrs["DeduplicationScope"] == "messageGroup"
	q.settings.redrive = nil
	if s := q.attrs["RedrivePolicy"]; s != "" {
		p, _ := parseRedrivePolicy(s)
		q.settings.redrive = &p
	}
}

// redrivePolicy is a queue's RedrivePolicy attribute ("Using dead-letter queues in Amazon
// SQS" in the SQS Developer Guide).
type redrivePolicy struct {
	targetARN       string
	maxReceiveCount int
}

// parseRedrivePolicy reads a RedrivePolicy; maxReceiveCount may be a JSON number or a
// string, as SQS accepts both.
func parseRedrivePolicy(s string) (redrivePolicy, error) {
	invalid := func(reason string) error {
		return errInvalidParameterValue.errorf("Value %s for parameter RedrivePolicy is invalid. Reason: %s", s, reason)
	}
	var raw struct {
		Target *string          `json:"deadLetterTargetArn"`
		Max    *json.RawMessage `json:"maxReceiveCount"`
	}
	if err := json.Unmarshal([]byte(s), &raw); err != nil {
		return redrivePolicy{}, invalid("Redrive policy is not a valid JSON map.")
	}
	if raw.Target == nil || *raw.Target == "" {
		return redrivePolicy{}, invalid("Redrive policy does not contain mandatory attribute: deadLetterTargetArn.")
	}
	if raw.Max == nil {
		return redrivePolicy{}, invalid("Redrive policy does not contain mandatory attribute: maxReceiveCount.")
	}
	n, err := strconv.Atoi(strings.Trim(string(*raw.Max), `"`))
	if err != nil || n < 1 || n > 1000 {
		return redrivePolicy{}, invalid("Invalid value for maxReceiveCount: " + string(*raw.Max) + ", valid values are from 1 to 1000 both inclusive.")
	}
	return redrivePolicy{targetARN: *raw.Target, maxReceiveCount: n}, nil
}

// String is the policy as GetQueueAttributes returns it.
func (p redrivePolicy) String() string {
	return fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":%d}`, p.targetARN, p.maxReceiveCount)
}
