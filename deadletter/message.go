package deadletter

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/internal/sqsspec"
	"github.com/watchbot/watchbot/producer"
)

// The message attributes the supervisor adds when it dead-letters a message (the README's
// outcome table), and the one replay adds.
const (
	AttrReason      = "watchbot-reason"
	AttrSourceQueue = "watchbot-source-queue"
	AttrAttempts    = "watchbot-attempts"
	// AttrPacked holds the three above as JSON when fewer than three attribute slots were free.
	AttrPacked = "watchbot-deadletter"
	// AttrReplayedAt is the RFC 3339 UTC time a message was replayed.
	AttrReplayedAt = "watchbot-replayed-at"
	// AttrPrefix starts every attribute watchbot sets; replay drops them all.
	AttrPrefix = "watchbot-"
)

// Cause is why and from where the supervisor dead-lettered a message.
type Cause struct {
	Reason      string `json:"reason"`
	SourceQueue string `json:"sourceQueue,omitempty"`
	Attempts    int    `json:"attempts,omitempty"`
}

// CauseOf reads the supervisor's dead-letter attributes, in either form. ok is false for
// messages the redrive policy moved, which carry none.
func CauseOf(attrs map[string]types.MessageAttributeValue) (c Cause, ok bool) {
	if v, found := attrs[AttrPacked]; found {
		if err := json.Unmarshal([]byte(aws.ToString(v.StringValue)), &c); err == nil {
			return c, true
		}
	}
	str := func(name string) (string, bool) {
		v, found := attrs[name]
		return aws.ToString(v.StringValue), found
	}
	reason, r := str(AttrReason)
	source, s := str(AttrSourceQueue)
	attempts, a := str(AttrAttempts)
	c = Cause{Reason: reason, SourceQueue: source}
	c.Attempts, _ = strconv.Atoi(attempts)
	return c, r || s || a
}

// WithCause returns attrs without any watchbot-* attribute, plus c as the supervisor records
// it: three attributes, or, when fewer than three of SQS's ten slots are free, one
// AttrPacked attribute holding c as JSON. With no slot free it returns the attributes alone
// and false: the cause then lives only in the supervisor's log. CauseOf reads both forms.
func WithCause(attrs map[string]types.MessageAttributeValue, c Cause) (map[string]types.MessageAttributeValue, bool) {
	out := make(map[string]types.MessageAttributeValue, len(attrs)+3)
	for k, v := range attrs {
		if !strings.HasPrefix(k, AttrPrefix) {
			out[k] = v
		}
	}
	str := func(s string) types.MessageAttributeValue {
		return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(s)}
	}
	switch free := sqsspec.MaxMessageAttributes - len(out); {
	case free >= 3:
		out[AttrReason] = str(c.Reason)
		out[AttrSourceQueue] = str(c.SourceQueue)
		out[AttrAttempts] = types.MessageAttributeValue{DataType: aws.String("Number"), StringValue: aws.String(strconv.Itoa(c.Attempts))}
	case free >= 1:
		packed, _ := json.Marshal(c) // a struct of strings and an int always encodes
		out[AttrPacked] = str(string(packed))
	default:
		return out, false
	}
	return out, true
}

// Message is a message received from a DLQ.
type Message struct {
	ID         string
	Body       string
	Attributes map[string]types.MessageAttributeValue
	// System holds SQS's system attributes (SentTimestamp, ApproximateReceiveCount,
	// MessageGroupId, …) as SQS reported them.
	System  map[string]string
	receipt string
}

func messageFrom(m types.Message) Message {
	return Message{
		ID:         aws.ToString(m.MessageId),
		Body:       aws.ToString(m.Body),
		Attributes: m.MessageAttributes,
		System:     m.Attributes,
		receipt:    aws.ToString(m.ReceiptHandle),
	}
}

// GroupID is the FIFO MessageGroupId, or "".
func (m Message) GroupID() string {
	return m.System[string(types.MessageSystemAttributeNameMessageGroupId)]
}

// SentAt is when the message was first sent (a dead-lettered message keeps its original time).
func (m Message) SentAt() time.Time {
	ms, err := strconv.ParseInt(m.System[string(types.MessageSystemAttributeNameSentTimestamp)], 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// ReceiveCount is SQS's ApproximateReceiveCount, including the receives in the source queue
// for messages the redrive policy moved.
func (m Message) ReceiveCount() int {
	n, _ := strconv.Atoi(m.System[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
	return n
}

// attrString is an attribute's value as text: String and Number values as they are, Binary
// values base64-encoded.
func attrString(v types.MessageAttributeValue) string {
	if v.StringValue != nil {
		return *v.StringValue
	}
	return base64.StdEncoding.EncodeToString(v.BinaryValue)
}

// attrValue returns the named attribute's value as text; the supervisor's three attributes are
// also found inside the packed form.
func (m Message) attrValue(name string) (string, bool) {
	if v, ok := m.Attributes[name]; ok {
		return attrString(v), true
	}
	c, ok := CauseOf(m.Attributes)
	if !ok {
		return "", false
	}
	switch name {
	case AttrReason:
		return c.Reason, c.Reason != ""
	case AttrSourceQueue:
		return c.SourceQueue, c.SourceQueue != ""
	case AttrAttempts:
		return strconv.Itoa(c.Attempts), c.Attempts != 0
	}
	return "", false
}

// replayMessage is m as it is sent back to its source queue: the same body and attributes,
// without watchbot's own (watchbot-*) and with watchbot-replayed-at, which is left out when the
// message already has all of SQS's 10 attribute slots taken or would outgrow maxSize. On a
// FIFO target the group id is kept and the deduplication id is fresh, so a replay is never
// dropped as a duplicate of the original.
func replayMessage(m Message, fifo bool, maxSize int, now time.Time) producer.Message {
	attrs := make(map[string]types.MessageAttributeValue, len(m.Attributes)+1)
	for name, v := range m.Attributes {
		if !strings.HasPrefix(name, AttrPrefix) {
			attrs[name] = v
		}
	}
	out := producer.Message{Body: m.Body, Attributes: attrs}
	if fifo {
		out.GroupID = m.GroupID()
		if out.GroupID == "" {
			out.GroupID = "watchbot-replay"
		}
		out.DeduplicationID = producer.NewDeduplicationID()
	}
	if len(attrs) < sqsspec.MaxMessageAttributes {
		attrs[AttrReplayedAt] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(now.UTC().Format(time.RFC3339))}
		if maxSize > 0 && producer.Size(out) > maxSize {
			delete(attrs, AttrReplayedAt)
		}
	}
	if len(attrs) == 0 {
		out.Attributes = nil
	}
	return out
}

// Record is one line of an export file and of `peek --json`: everything SQS tells about a
// message. Import reads Body, MessageAttributes and GroupID (or attributes.MessageGroupId);
// MessageID, Attributes and DeadLetter are kept for the reader and ignored on import.
type Record struct {
	MessageID         string                     `json:"messageId"`
	Body              string                     `json:"body"`
	MessageAttributes map[string]AttributeRecord `json:"messageAttributes,omitempty"`
	// Attributes are SQS's system attributes.
	Attributes map[string]string `json:"attributes,omitempty"`
	GroupID    string            `json:"groupId,omitempty"`
	// DeadLetter is the supervisor's dead-letter cause, decoded from the attributes.
	DeadLetter *Cause `json:"deadLetter,omitempty"`
}

// AttributeRecord is a message attribute in a Record. BinaryValue is base64 in JSON.
type AttributeRecord struct {
	DataType    string  `json:"dataType"`
	StringValue *string `json:"stringValue,omitempty"`
	BinaryValue []byte  `json:"binaryValue,omitempty"`
}

// RecordOf returns m as a Record.
func RecordOf(m Message) Record {
	r := Record{MessageID: m.ID, Body: m.Body, Attributes: m.System, GroupID: m.GroupID()}
	if len(m.Attributes) > 0 {
		r.MessageAttributes = make(map[string]AttributeRecord, len(m.Attributes))
		for name, v := range m.Attributes {
			r.MessageAttributes[name] = AttributeRecord{DataType: aws.ToString(v.DataType), StringValue: v.StringValue, BinaryValue: v.BinaryValue}
		}
	}
	if c, ok := CauseOf(m.Attributes); ok {
		r.DeadLetter = &c
	}
	return r
}

// attributes returns r's message attributes in the SDK's form.
func (r Record) attributes() map[string]types.MessageAttributeValue {
	if len(r.MessageAttributes) == 0 {
		return nil
	}
	out := make(map[string]types.MessageAttributeValue, len(r.MessageAttributes))
	for name, v := range r.MessageAttributes {
		out[name] = types.MessageAttributeValue{DataType: aws.String(v.DataType), StringValue: v.StringValue, BinaryValue: v.BinaryValue}
	}
	return out
}

// groupID is the group id import uses: the groupId field, else the exported system attribute.
func (r Record) groupID() string {
	if r.GroupID != "" {
		return r.GroupID
	}
	return r.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]
}

// WriteListing writes m for a reader: id, sent time, receive count, dead-letter cause, the other
// attributes and the body, cut to maxBody bytes when maxBody > 0.
func WriteListing(w io.Writer, m Message, maxBody int) error {
	var b strings.Builder
	fmt.Fprintf(&b, "id:       %s\n", m.ID)
	if t := m.SentAt(); !t.IsZero() {
		fmt.Fprintf(&b, "sent:     %s\n", t.Format(time.RFC3339))
	}
	fmt.Fprintf(&b, "receives: %d\n", m.ReceiveCount())
	if g := m.GroupID(); g != "" {
		fmt.Fprintf(&b, "group:    %s\n", g)
	}
	if c, ok := CauseOf(m.Attributes); ok {
		fmt.Fprintf(&b, "reason:   %s\n", c.Reason)
		if c.SourceQueue != "" {
			fmt.Fprintf(&b, "source:   %s\n", c.SourceQueue)
		}
		if c.Attempts != 0 {
			fmt.Fprintf(&b, "attempts: %d\n", c.Attempts)
		}
	} else {
		fmt.Fprintf(&b, "reason:   (none recorded: moved by the redrive policy)\n")
	}
	for _, name := range slices.Sorted(maps.Keys(m.Attributes)) {
		switch name {
		case AttrReason, AttrSourceQueue, AttrAttempts, AttrPacked:
			continue
		}
		v := m.Attributes[name]
		fmt.Fprintf(&b, "attr:     %s (%s) = %s\n", name, aws.ToString(v.DataType), attrString(v))
	}
	body := m.Body
	if maxBody > 0 && len(body) > maxBody {
		cut := maxBody
		for cut > 0 && !utf8.RuneStart(body[cut]) {
			cut--
		}
		body = fmt.Sprintf("%s… (%d more bytes; --json shows the whole body)", body[:cut], len(m.Body)-cut)
	}
	fmt.Fprintf(&b, "body:     %s\n\n", body)
	_, err := io.WriteString(w, b.String())
	return err
}
