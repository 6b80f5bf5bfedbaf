package deadletter

import (
	"encoding/base64"
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

	"github.com/watchbot/watchbot/internal/dlqattr"
	"github.com/watchbot/watchbot/producer"
)

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

// GroupID is the MessageGroupId (a FIFO group, or a fair queue's tenant), or "".
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
	c, ok := dlqattr.Read(m.Attributes)
	if !ok {
		return "", false
	}
	switch name {
	case dlqattr.Reason:
		return c.Reason, c.Reason != ""
	case dlqattr.SourceQueue:
		return c.SourceQueue, c.SourceQueue != ""
	case dlqattr.Attempts:
		return strconv.Itoa(c.Attempts), c.Attempts != 0
	}
	return "", false
}

// replayMessage is m as it is sent back to its source queue: the same body and attributes,
// without watchbot's own (watchbot-*), and with its lineage: watchbot-replayed-from (m's DLQ id),
// watchbot-original-message-id and watchbot-replayed-at, one by one or packed in
// watchbot-replay when SQS's 10 attribute slots leave too little room. The lineage is left out
// when no slot is free or it would make the message outgrow maxSize. The group id is kept: on a
// FIFO target it orders the group, and the deduplication id is fresh, so a replay is never
// dropped as a duplicate of the original; on a standard target it names the message's tenant
// ("Amazon SQS fair queues", SQS Developer Guide).
func replayMessage(m Message, fifo bool, maxSize int, now time.Time) producer.Message {
	l := dlqattr.Lineage{OriginalMessageID: dlqattr.OriginalID(m.ID, m.Attributes), ReplayedFrom: m.ID, ReplayedAt: now.UTC().Format(time.RFC3339)}
	attrs, withLineage := dlqattr.WithReplay(m.Attributes, l)
	out := producer.Message{Body: m.Body, Attributes: attrs}
	out.GroupID = m.GroupID()
	if fifo {
		if out.GroupID == "" {
			out.GroupID = "watchbot-replay"
		}
		out.DeduplicationID = producer.NewDeduplicationID()
	}
	if withLineage && maxSize > 0 && producer.Size(out) > maxSize {
		out.Attributes = dlqattr.Without(m.Attributes)
	}
	if len(out.Attributes) == 0 {
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
	// OriginalMessageID is the id the message had in its source queue, when it differs from
	// MessageID (the supervisor's dead-letter send gives the copy a new id).
	OriginalMessageID string `json:"originalMessageId,omitempty"`
	// DeadLetter is the supervisor's dead-letter cause, decoded from the attributes.
	DeadLetter *dlqattr.Cause `json:"deadLetter,omitempty"`
	// Payload names the S3 object of a pointer message's body; see Record.Resolve.
	Payload *PayloadRecord `json:"payload,omitempty"`
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
	if o := dlqattr.OriginalID(m.ID, m.Attributes); o != m.ID {
		r.OriginalMessageID = o
	}
	if len(m.Attributes) > 0 {
		r.MessageAttributes = make(map[string]AttributeRecord, len(m.Attributes))
		for name, v := range m.Attributes {
			r.MessageAttributes[name] = AttributeRecord{DataType: aws.ToString(v.DataType), StringValue: v.StringValue, BinaryValue: v.BinaryValue}
		}
	}
	if c, ok := dlqattr.Read(m.Attributes); ok {
		r.DeadLetter = &c
	}
	r.Payload = payloadRecord(m)
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

// WriteListing writes m for a reader: id, original id, sent time, receive count, dead-letter
// cause, the other attributes and the body, cut to maxBody bytes when maxBody > 0. Looking is a
// receive, so the receive count shown is the one before this look (SQS's count less one).
func WriteListing(w io.Writer, m Message, maxBody int) error {
	return writeListing(w, m, nil, maxBody)
}

// WriteResolvedListing is WriteListing for a message whose Record r went through Resolve: the
// body shown is the one fetched from S3, or, when that failed, the pointer and why.
func WriteResolvedListing(w io.Writer, m Message, r Record, maxBody int) error {
	return writeListing(w, m, &r, maxBody)
}

func writeListing(w io.Writer, m Message, r *Record, maxBody int) error {
	var b strings.Builder
	fmt.Fprintf(&b, "id:       %s\n", m.ID)
	if t := m.SentAt(); !t.IsZero() {
		fmt.Fprintf(&b, "sent:     %s\n", t.Format(time.RFC3339))
	}
	fmt.Fprintf(&b, "receives: %d before this look\n", max(0, m.ReceiveCount()-1))
	if g := m.GroupID(); g != "" {
		fmt.Fprintf(&b, "group:    %s\n", g)
	}
	if o := dlqattr.OriginalID(m.ID, m.Attributes); o != m.ID {
		fmt.Fprintf(&b, "original: %s\n", o)
	}
	if l := dlqattr.ReadLineage(m.Attributes); l.ReplayedFrom != "" {
		fmt.Fprintf(&b, "replayed: from %s %s\n", l.ReplayedFrom, l.ReplayedAt)
	}
	if c, ok := dlqattr.Read(m.Attributes); ok {
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
		case dlqattr.Reason, dlqattr.SourceQueue, dlqattr.Attempts, dlqattr.Packed, dlqattr.OriginalMessageID, dlqattr.ReplayedFrom, dlqattr.ReplayPacked:
			continue
		}
		v := m.Attributes[name]
		fmt.Fprintf(&b, "attr:     %s (%s) = %s\n", name, aws.ToString(v.DataType), attrString(v))
	}
	writePayloadLines(&b, m, r)
	body := listingBody(m, r)
	if maxBody > 0 && len(body) > maxBody {
		cut := maxBody
		for cut > 0 && !utf8.RuneStart(body[cut]) {
			cut--
		}
		body = fmt.Sprintf("%s… (%d more bytes; --json shows the whole body)", body[:cut], len(body)-cut)
	}
	fmt.Fprintf(&b, "body:     %s\n\n", body)
	_, err := io.WriteString(w, b.String())
	return err
}
