// Package dlqattr is the format of a message that watchbot dead-lettered or replayed: the
// message attributes the supervisor adds when it sends a message to the dead-letter queue
// (docs/outcomes.md), and those replay adds to the copy it sends back. The
// supervisor writes them and the dead-letter tools read and write them; neither imports the
// other, and both import this leaf.
package dlqattr

import (
	"encoding/json"
	"maps"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/internal/sqsspec"
)

// The attribute names: those the supervisor adds when it dead-letters a message
// (docs/outcomes.md), and those replay adds.
const (
	Reason      = "watchbot-reason"
	SourceQueue = "watchbot-source-queue"
	Attempts    = "watchbot-attempts"
	// OriginalMessageID is the message id the message had in its source queue before it was first
	// dead-lettered; replays and later dead-letters keep it, so a message can be followed.
	OriginalMessageID = "watchbot-original-message-id"
	// ReplayedFrom is, on a replayed copy, the id of the DLQ message it was replayed from.
	ReplayedFrom = "watchbot-replayed-from"
	// Packed holds the dead-letter attributes as one JSON object when too few of SQS's ten
	// attribute slots were free for them one by one.
	Packed = "watchbot-deadletter"
	// ReplayedAt is the RFC 3339 UTC time a message was replayed.
	ReplayedAt = "watchbot-replayed-at"
	// ReplayPacked holds a replayed copy's attributes as one JSON object when too few
	// attribute slots were free for them one by one.
	ReplayPacked = "watchbot-replay"
	// Prefix starts every attribute watchbot sets; replay drops them all.
	Prefix = "watchbot-"
)

// Cause is why and from where the supervisor dead-lettered a message.
type Cause struct {
	Reason      string `json:"reason"`
	SourceQueue string `json:"sourceQueue,omitempty"`
	Attempts    int    `json:"attempts,omitempty"`
	Lineage
}

// Lineage follows a message across dead-letters and replays.
type Lineage struct {
	// OriginalMessageID is the id the message had in its source queue before it was first
	// dead-lettered.
	OriginalMessageID string `json:"originalMessageId,omitempty"`
	// ReplayedFrom is the DLQ message id a replayed copy was sent from.
	ReplayedFrom string `json:"replayedFrom,omitempty"`
	// ReplayedAt is when the copy was replayed, RFC 3339 in UTC.
	ReplayedAt string `json:"replayedAt,omitempty"`
}

// attrText returns a String attribute's value and whether it is there.
func attrText(attrs map[string]types.MessageAttributeValue, name string) (string, bool) {
	v, found := attrs[name]
	return aws.ToString(v.StringValue), found
}

// Read reads the supervisor's dead-letter attributes, in either form. ok is false for
// messages the redrive policy moved, which carry none.
func Read(attrs map[string]types.MessageAttributeValue) (c Cause, ok bool) {
	if v, found := attrText(attrs, Packed); found {
		if err := json.Unmarshal([]byte(v), &c); err == nil {
			return c, true
		}
	}
	reason, r := attrText(attrs, Reason)
	source, s := attrText(attrs, SourceQueue)
	attempts, a := attrText(attrs, Attempts)
	c = Cause{Reason: reason, SourceQueue: source, Lineage: ReadLineage(attrs)}
	c.Attempts, _ = strconv.Atoi(attempts)
	return c, r || s || a
}

// ReadLineage reads a message's lineage from any of the forms watchbot writes: attributes one by
// one, or packed in watchbot-deadletter or watchbot-replay.
func ReadLineage(attrs map[string]types.MessageAttributeValue) Lineage {
	var l Lineage
	for _, packed := range []string{Packed, ReplayPacked} {
		if v, found := attrText(attrs, packed); found {
			var p Lineage
			if json.Unmarshal([]byte(v), &p) == nil {
				l = p
			}
		}
	}
	if v, ok := attrText(attrs, OriginalMessageID); ok {
		l.OriginalMessageID = v
	}
	if v, ok := attrText(attrs, ReplayedFrom); ok {
		l.ReplayedFrom = v
	}
	if v, ok := attrText(attrs, ReplayedAt); ok {
		l.ReplayedAt = v
	}
	return l
}

// OriginalID is the message's original id: the one its attributes record, else id itself (a
// message never dead-lettered before).
func OriginalID(id string, attrs map[string]types.MessageAttributeValue) string {
	if o := ReadLineage(attrs).OriginalMessageID; o != "" {
		return o
	}
	return id
}

// stringAttr is a String message attribute.
func stringAttr(s string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(s)}
}

// without returns attrs without any watchbot-* attribute, with room for extra more.
func without(attrs map[string]types.MessageAttributeValue, extra int) map[string]types.MessageAttributeValue {
	out := make(map[string]types.MessageAttributeValue, len(attrs)+extra)
	for k, v := range attrs {
		if !strings.HasPrefix(k, Prefix) {
			out[k] = v
		}
	}
	return out
}

// With returns attrs without any watchbot-* attribute, plus c as the supervisor records
// it: one attribute per field that is set (reason, source queue and attempts always; the
// original message id and, for a replayed copy, the DLQ id it came from), or, when fewer slots
// of SQS's ten are free, one Packed attribute holding c as JSON. With no slot free it
// returns the attributes alone and false: the cause then lives only in the supervisor's log.
// Read and ReadLineage read both forms.
func With(attrs map[string]types.MessageAttributeValue, c Cause) (map[string]types.MessageAttributeValue, bool) {
	out := without(attrs, 5)
	own := map[string]types.MessageAttributeValue{
		Reason:      stringAttr(c.Reason),
		SourceQueue: stringAttr(c.SourceQueue),
		Attempts:    {DataType: aws.String("Number"), StringValue: aws.String(strconv.Itoa(c.Attempts))},
	}
	if c.OriginalMessageID != "" {
		own[OriginalMessageID] = stringAttr(c.OriginalMessageID)
	}
	if c.ReplayedFrom != "" {
		own[ReplayedFrom] = stringAttr(c.ReplayedFrom)
	}
	c.ReplayedAt = "" // the time of an earlier replay says nothing about this dead-letter
	return packInto(out, own, Packed, c)
}

// packInto adds own to out one by one when SQS's ten slots leave room for all of them, else
// packed as JSON in one attribute, else not at all (false).
func packInto[T any](out, own map[string]types.MessageAttributeValue, packedName string, packed T) (map[string]types.MessageAttributeValue, bool) {
	switch free := sqsspec.MaxMessageAttributes - len(out); {
	case free >= len(own):
		maps.Copy(out, own)
	case free >= 1:
		b, _ := json.Marshal(packed) // structs of strings and ints always encode
		out[packedName] = stringAttr(string(b))
	default:
		return out, false
	}
	return out, true
}

// Without returns attrs without any watchbot-* attribute: a message as its sender sent it.
func Without(attrs map[string]types.MessageAttributeValue) map[string]types.MessageAttributeValue {
	return without(attrs, 0)
}

// WithReplay returns attrs without any watchbot-* attribute, plus l as replay records it on
// the copy it sends back: OriginalMessageID, ReplayedFrom and ReplayedAt one by one, or, when
// fewer slots of SQS's ten are free, one ReplayPacked attribute holding l as JSON. With no
// slot free it returns the attributes alone and false.
func WithReplay(attrs map[string]types.MessageAttributeValue, l Lineage) (map[string]types.MessageAttributeValue, bool) {
	own := map[string]types.MessageAttributeValue{
		OriginalMessageID: stringAttr(l.OriginalMessageID),
		ReplayedFrom:      stringAttr(l.ReplayedFrom),
		ReplayedAt:        stringAttr(l.ReplayedAt),
	}
	return packInto(without(attrs, len(own)), own, ReplayPacked, l)
}
