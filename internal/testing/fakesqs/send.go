package fakesqs

import (
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// outgoing is one message as a send names it, from SendMessage or one batch entry.
type outgoing struct {
	body     *string
	attrs    map[string]types.MessageAttributeValue
	sysAttrs map[string]types.MessageSystemAttributeValue
	delay    int32
	group    *string
	dedupID  *string
}

// accepted is what a send answers for one message.
type accepted struct {
	messageID, md5Body, md5Attrs, md5SysAttrs, seq string
}

// SendMessage enqueues one message.
func (s *Server) SendMessage(ctx context.Context, in *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	return onQueue(s, ctx, "SendMessage", in, func(in *sqs.SendMessageInput) *string { return in.QueueUrl }, func(q *queue, in *sqs.SendMessageInput) (*sqs.SendMessageOutput, error) {
		a, err := s.enqueue(q, time.Now(), outgoing{
			body: in.MessageBody, attrs: in.MessageAttributes, sysAttrs: in.MessageSystemAttributes,
			delay: in.DelaySeconds, group: in.MessageGroupId, dedupID: in.MessageDeduplicationId,
		})
		if err != nil {
			return nil, err
		}
		return &sqs.SendMessageOutput{
			MessageId: &a.messageID, MD5OfMessageBody: &a.md5Body, MD5OfMessageAttributes: optional(a.md5Attrs),
			MD5OfMessageSystemAttributes: optional(a.md5SysAttrs), SequenceNumber: optional(a.seq),
		}, nil
	})
}

// SendMessageBatch enqueues up to ten messages; each entry succeeds or fails on its own.
func (s *Server) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	return onQueue(s, ctx, "SendMessageBatch", in, func(in *sqs.SendMessageBatchInput) *string { return in.QueueUrl }, func(q *queue, in *sqs.SendMessageBatchInput) (*sqs.SendMessageBatchOutput, error) {
		if err := checkBatch(entryIDs(in.Entries, sendID)); err != nil {
			return nil, err
		}
		total := 0
		for _, e := range in.Entries {
			total += messageSize(aws.ToString(e.MessageBody), e.MessageAttributes)
		}
		if total > maxBatchPayload {
			return nil, errBatchRequestTooLong.errorf("Batch requests cannot be longer than %d bytes. You have sent %d bytes.", maxBatchPayload, total)
		}
		now := time.Now()
		ok, failed, err := eachEntry(in.Entries, sendID, func(e types.SendMessageBatchRequestEntry) (types.SendMessageBatchResultEntry, error) {
			a, err := s.enqueue(q, now, outgoing{
				body: e.MessageBody, attrs: e.MessageAttributes, sysAttrs: e.MessageSystemAttributes,
				delay: e.DelaySeconds, group: e.MessageGroupId, dedupID: e.MessageDeduplicationId,
			})
			return types.SendMessageBatchResultEntry{
				Id: e.Id, MessageId: &a.messageID, MD5OfMessageBody: &a.md5Body,
				MD5OfMessageAttributes: optional(a.md5Attrs), MD5OfMessageSystemAttributes: optional(a.md5SysAttrs),
				SequenceNumber: optional(a.seq),
			}, err
		})
		if err != nil {
			return nil, err
		}
		return &sqs.SendMessageBatchOutput{Successful: ok, Failed: failed}, nil
	})
}

func sendID(e types.SendMessageBatchRequestEntry) *string { return e.Id }

// entryIDs lists the ids of a batch call's entries.
func entryIDs[E any](entries []E, id func(E) *string) []*string {
	ids := make([]*string, len(entries))
	for i, e := range entries {
		ids[i] = id(e)
	}
	return ids
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

var batchEntryID = regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}$`)

// checkBatch applies the rules every batch call shares: one to ten entries, each id made of
// alphanumerics, hyphens and underscores (at most 80), no id twice.
func checkBatch(ids []*string) error {
	if len(ids) == 0 {
		return errEmptyBatchRequest.errorf("The batch request doesn't contain any entries.")
	}
	if len(ids) > maxBatchEntries {
		return errTooManyEntries.errorf("Maximum number of entries per request are %d. You have sent %d.", maxBatchEntries, len(ids))
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if id == nil || !batchEntryID.MatchString(*id) {
			return errInvalidBatchEntryID.errorf("A batch entry id can only contain alphanumeric characters, hyphens and underscores. It can be at most 80 letters long.")
		}
		if seen[*id] {
			return errBatchIdsNotDistinct.errorf("Id %s repeated.", *id)
		}
		seen[*id] = true
	}
	return nil
}

// eachEntry checks a batch call's entries (checkBatch) and runs do on each, as the single
// call would run, in order; an entry whose do fails is answered in failed with the error the
// single call would give, the others in the order they succeeded.
func eachEntry[E, R any](entries []E, id func(E) *string, do func(E) (R, error)) (ok []R, failed []types.BatchResultErrorEntry, err error) {
	ids := entryIDs(entries, id)
	if err := checkBatch(ids); err != nil {
		return nil, nil, err
	}
	ok, failed = []R{}, []types.BatchResultErrorEntry{}
	for i, e := range entries {
		r, err := do(e)
		if err != nil {
			failed = append(failed, batchFailure(*ids[i], err))
			continue
		}
		ok = append(ok, r)
	}
	return ok, failed, nil
}

// enqueue checks o against q's rules and adds it, or answers a FIFO duplicate with the
// message it duplicates.
func (s *Server) enqueue(q *queue, now time.Time, o outgoing) (accepted, error) {
	if err := checkMessage(q, o); err != nil {
		return accepted{}, err
	}
	a := accepted{
		md5Body:     md5Hex([]byte(*o.body)),
		md5Attrs:    md5OfAttributes(o.attrs),
		md5SysAttrs: md5OfSystemAttributes(o.sysAttrs),
	}
	q.expire(now)
	m := &message{
		body: *o.body, attrs: map[string]types.MessageAttributeValue{}, sysAttrs: map[string]types.MessageSystemAttributeValue{},
		md5Body: a.md5Body, md5Attrs: a.md5Attrs, md5SysAttr: a.md5SysAttrs,
		group: aws.ToString(o.group), sent: now, enqueued: now, available: now.Add(q.settings.delay),
	}
	for name, v := range o.attrs {
		m.attrs[name] = cloneAttribute(v)
	}
	for name, v := range o.sysAttrs {
		m.sysAttrs[name] = types.MessageSystemAttributeValue{DataType: v.DataType, StringValue: aws.String(aws.ToString(v.StringValue))}
	}
	if o.delay != 0 {
		m.available = now.Add(time.Duration(o.delay) * time.Second)
	}
	var key string
	if q.fifo {
		m.dedupID = aws.ToString(o.dedupID)
		if m.dedupID == "" {
			sum := sha256.Sum256([]byte(*o.body))
			m.dedupID = hex.EncodeToString(sum[:])
		}
		key = m.dedupID
		if q.settings.dedupPerGroup {
			key = m.group + "\x00" + key
		}
		if prev, ok := q.dedup[key]; ok && now.Before(prev.until) {
			a.messageID, a.seq = prev.messageID, prev.seq
			return a, nil
		}
	}
	m.serial = s.next()
	m.id = fmt.Sprintf("00000000-0000-4000-8000-%012d", m.serial)
	if q.fifo {
		m.seq = fmt.Sprintf("%020d", sequenceBase+m.serial*sequenceStep)
		q.dedup[key] = sent{messageID: m.id, seq: m.seq, until: now.Add(dedupInterval)}
	}
	q.add(m)
	a.messageID, a.seq = m.id, m.seq
	return a, nil
}

// checkMessage applies the SendMessage API reference's rules to one message.
func checkMessage(q *queue, o outgoing) error {
	if o.body == nil || *o.body == "" {
		return missing("MessageBody")
	}
	if r, ok := invalidChar(*o.body); !ok {
		return errInvalidMessageContents.errorf("Invalid binary character '#x%X' was found in the message body, the set of allowed characters is #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF", r)
	}
	if err := checkAttributes(o.attrs); err != nil {
		return err
	}
	for name, v := range o.sysAttrs {
		if name != "AWSTraceHeader" || aws.ToString(v.DataType) != "String" || aws.ToString(v.StringValue) == "" {
			return errInvalidParameterValue.errorf("Message system attribute %s is invalid: only AWSTraceHeader, of type String, can be sent.", name)
		}
	}
	if size := messageSize(*o.body, o.attrs); size > q.settings.maxSize {
		return errInvalidParameterValue.errorf("One or more parameters are invalid. Reason: Message must be shorter than %d bytes.", q.settings.maxSize)
	}
	if o.group != nil {
		if err := checkID("MessageGroupId", *o.group); err != nil {
			return err
		}
	}
	if !q.fifo {
		if o.delay < 0 || o.delay > maxDelay {
			return errInvalidParameterValue.errorf("Value %d for parameter DelaySeconds is invalid. Reason: DelaySeconds must be >= 0 and <= %d.", o.delay, maxDelay)
		}
		if o.dedupID != nil {
			return errInvalidParameterValue.errorf("Value %s for parameter MessageDeduplicationId is invalid. Reason: The request includes a parameter that is not valid for this queue type.", *o.dedupID)
		}
		return nil
	}
	if o.group == nil || *o.group == "" {
		return missing("MessageGroupId")
	}
	if o.delay != 0 {
		return errInvalidParameterValue.errorf("Value %d for parameter DelaySeconds is invalid. Reason: The request include parameter that is not valid for this queue type.", o.delay)
	}
	if o.dedupID != nil {
		return checkID("MessageDeduplicationId", *o.dedupID)
	}
	if !q.settings.contentDedup {
		return errInvalidParameterValue.errorf("The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly")
	}
	return nil
}

// checkID applies the rule for MessageGroupId, MessageDeduplicationId and
// ReceiveRequestAttemptId: 1 to 128 alphanumeric or punctuation characters.
func checkID(param, v string) error {
	ok := v != "" && len(v) <= maxIDLength
	for _, c := range v {
		if c < '!' || c > '~' {
			ok = false
		}
	}
	if !ok {
		return errInvalidParameterValue.errorf("Value %s for parameter %s is invalid. Reason: It must be 1 to %d alphanumeric or punctuation characters.", v, param, maxIDLength)
	}
	return nil
}

// invalidChar reports the first character SQS refuses in a message ("SendMessage" API
// reference: #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF).
// Invalid UTF-8 is refused as U+FFFD would hide it.
func invalidChar(s string) (rune, bool) {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				return rune(s[i]), false
			}
		}
		switch {
		case r == 0x9, r == 0xA, r == 0xD:
		case r >= 0x20 && r <= 0xD7FF:
		case r >= 0xE000 && r <= 0xFFFD:
		case r >= 0x10000 && r <= 0x10FFFF:
		default:
			return r, false
		}
	}
	return 0, true
}

var number = regexp.MustCompile(`^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$`)

// checkAttributes applies "Message metadata for Amazon SQS" (SQS Developer Guide): at most
// ten attributes; names of alphanumerics, '_', '-' and '.', not starting with "AWS." or
// "Amazon.", not starting or ending with '.', without "..", at most 256 characters; a data
// type of String, Number or Binary with an optional ".custom" suffix; a non-empty value of
// that type. List values are reserved by the API and refused.
func checkAttributes(attrs map[string]types.MessageAttributeValue) error {
	if len(attrs) > maxAttributes {
		return errInvalidParameterValue.errorf("Number of message attributes [%d] exceeds the allowed maximum [%d].", len(attrs), maxAttributes)
	}
	for name, v := range attrs {
		lower := strings.ToLower(name)
		validName := name != "" && len(name) <= maxAttributeName && !strings.HasPrefix(lower, "aws.") &&
			!strings.HasPrefix(lower, "amazon.") && !strings.HasPrefix(name, ".") &&
			!strings.HasSuffix(name, ".") && !strings.Contains(name, "..")
		for _, c := range name {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
				validName = false
			}
		}
		if !validName {
			return errInvalidParameterValue.errorf("Message (user) attribute name '%s' is invalid.", name)
		}
		dt := aws.ToString(v.DataType)
		base, _, _ := strings.Cut(dt, ".")
		if dt == "" || len(dt) > maxAttributeName || !slices.Contains([]string{"String", "Number", "Binary"}, base) {
			return errInvalidParameterValue.errorf("The type of message (user) attribute '%s' is invalid. You must use only the following supported type prefixes: Binary, Number, String.", name)
		}
		if v.StringListValues != nil || v.BinaryListValues != nil {
			return errInvalidParameterValue.errorf("Message (user) attribute '%s': list values are not supported.", name)
		}
		switch base {
		case "Binary":
			if len(v.BinaryValue) == 0 || v.StringValue != nil {
				return errInvalidParameterValue.errorf("The message (user) attribute '%s' must contain a non-empty binary value, and no string value, for message attribute type '%s'.", name, dt)
			}
		default:
			if aws.ToString(v.StringValue) == "" || v.BinaryValue != nil {
				return errInvalidParameterValue.errorf("The message (user) attribute '%s' must contain a non-empty message attribute value for message attribute type '%s'.", name, dt)
			}
			if _, ok := invalidChar(*v.StringValue); !ok {
				return errInvalidMessageContents.errorf("Message (user) attribute '%s' value contains invalid characters.", name)
			}
			if base == "Number" && !number.MatchString(*v.StringValue) {
				return errInvalidParameterValue.errorf("Can't cast the value of message (user) attribute '%s' to a number.", name)
			}
		}
	}
	return nil
}

// messageSize counts a message toward MaximumMessageSize: its body and, for each attribute,
// its name, data type and value ("Message metadata for Amazon SQS").
func messageSize(body string, attrs map[string]types.MessageAttributeValue) int {
	n := len(body)
	for name, v := range attrs {
		n += len(name) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue)) + len(v.BinaryValue)
	}
	return n
}

func md5Hex(b []byte) string {
	sum := md5.Sum(b)
	return hex.EncodeToString(sum[:])
}

// attributeDigest is what the digest of one message (or message system) attribute covers.
type attributeDigest struct {
	dataType string
	str      *string
	bin      []byte
}

// digest computes MD5OfMessageAttributes as "Calculating the MD5 message digest for message
// attributes" (SQS Developer Guide) specifies: attributes sorted by name; for each, the name,
// the data type, a transport byte (1 for String and Number, 2 for Binary) and the value,
// every variable part prefixed with its length as four big-endian bytes. No attributes: no
// digest.
func digest(attrs map[string]attributeDigest) string {
	if len(attrs) == 0 {
		return ""
	}
	var buf []byte
	put := func(b []byte) {
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(b)))
		buf = append(buf, b...)
	}
	names := make([]string, 0, len(attrs))
	for name := range attrs {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		a := attrs[name]
		put([]byte(name))
		put([]byte(a.dataType))
		if strings.HasPrefix(a.dataType, "Binary") {
			buf = append(buf, 2)
			put(a.bin)
		} else {
			buf = append(buf, 1)
			put([]byte(aws.ToString(a.str)))
		}
	}
	return md5Hex(buf)
}

func md5OfAttributes(attrs map[string]types.MessageAttributeValue) string {
	d := make(map[string]attributeDigest, len(attrs))
	for name, v := range attrs {
		d[name] = attributeDigest{aws.ToString(v.DataType), v.StringValue, v.BinaryValue}
	}
	return digest(d)
}

func md5OfSystemAttributes(attrs map[string]types.MessageSystemAttributeValue) string {
	d := make(map[string]attributeDigest, len(attrs))
	for name, v := range attrs {
		d[name] = attributeDigest{aws.ToString(v.DataType), v.StringValue, v.BinaryValue}
	}
	return digest(d)
}
