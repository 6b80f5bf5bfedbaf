// Package producer sends messages to SQS within SQS's limits: it checks each message before
// anything is sent (characters, size, attributes, FIFO rules), packs messages into
// SendMessageBatch calls of at most 10 entries and 1 MiB, and reports each entry's fate on its
// own. `watchbot send`, `watchbot dead-letter replay` and `import` all send through it, so they
// refuse the same input with the same words.
package producer

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/internal/sqsspec"
)

// API is the part of the SQS client this package calls.
type API interface {
	SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
}

var _ API = (*sqs.Client)(nil)

// Message is one message to send.
type Message struct {
	Body       string
	Attributes map[string]types.MessageAttributeValue
	// GroupID is the MessageGroupId: required on FIFO queues; on a standard queue it names
	// the message's tenant for SQS fair queues and implies no order.
	GroupID string
	// DeduplicationID is the FIFO MessageDeduplicationId; empty lets content-based
	// deduplication decide (see NewDeduplicationID for a fresh one).
	DeduplicationID string
	// Delay postpones delivery (standard queues only), rounded up to whole seconds.
	Delay time.Duration
}

// Limits are the properties of the target queue that decide what may be sent to it.
type Limits struct {
	// MaxSize is the queue's MaximumMessageSize in bytes (body plus attributes).
	MaxSize int
	// FIFO is true for .fifo queues.
	FIFO bool
}

// Size is the size SQS counts against MaximumMessageSize: the body plus, for each attribute,
// its name, data type and value.
func Size(m Message) int {
	n := len(m.Body)
	for name, v := range m.Attributes {
		n += len(name) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue)) + len(v.BinaryValue)
	}
	return n
}

// Check reports why SQS would refuse m on a queue with limits l, or nil.
func Check(m Message, l Limits) error {
	if m.Body == "" {
		return errors.New("the body is empty (SQS refuses empty messages)")
	}
	if err := CheckText(m.Body); err != nil {
		return fmt.Errorf("body: %w", err)
	}
	if err := CheckAttributes(m.Attributes); err != nil {
		return err
	}
	if max := l.MaxSize; max > 0 && Size(m) > max {
		return fmt.Errorf("message is %d bytes (body and attributes), more than the queue's MaximumMessageSize of %d", Size(m), max)
	}
	switch {
	case l.FIFO && m.GroupID == "":
		return errors.New("the queue is FIFO: a message group id is required")
	case !l.FIFO && m.DeduplicationID != "":
		return errors.New("a deduplication id is only for FIFO queues")
	case l.FIFO && m.Delay != 0:
		return errors.New("FIFO queues take no per-message delay")
	case m.Delay < 0 || m.Delay > sqsspec.MaxDelay:
		return fmt.Errorf("delay %v is outside 0..%v", m.Delay, sqsspec.MaxDelay)
	}
	if len(m.GroupID) > 128 || len(m.DeduplicationID) > 128 {
		return errors.New("group and deduplication ids are at most 128 characters")
	}
	return nil
}

// CheckText reports the first character SQS refuses in s: invalid UTF-8, or a character outside
// #x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD | #x10000-#x10FFFF (XML's characters).
func CheckText(s string) error {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				return fmt.Errorf("invalid UTF-8 at byte %d (SQS takes text only; base64-encode binary data)", i)
			}
		}
		if !validRune(r) {
			return fmt.Errorf("character %U at byte %d is not allowed by SQS", r, i)
		}
	}
	return nil
}

func validRune(r rune) bool {
	return r == 0x9 || r == 0xA || r == 0xD ||
		(r >= 0x20 && r <= 0xD7FF) || (r >= 0xE000 && r <= 0xFFFD) || (r >= 0x10000 && r <= 0x10FFFF)
}

// CheckAttributes reports why SQS would refuse attrs.
func CheckAttributes(attrs map[string]types.MessageAttributeValue) error {
	if len(attrs) > sqsspec.MaxMessageAttributes {
		return fmt.Errorf("%d message attributes, more than SQS's %d", len(attrs), sqsspec.MaxMessageAttributes)
	}
	for name, v := range attrs {
		if err := checkAttributeName(name); err != nil {
			return err
		}
		typ := aws.ToString(v.DataType)
		base, _, _ := strings.Cut(typ, ".")
		switch base {
		case "String", "Number":
			if v.StringValue == nil || *v.StringValue == "" {
				return fmt.Errorf("attribute %s: a %s attribute needs a non-empty value", name, typ)
			}
			if err := CheckText(*v.StringValue); err != nil {
				return fmt.Errorf("attribute %s: %w", name, err)
			}
			if base == "Number" {
				if _, err := strconv.ParseFloat(*v.StringValue, 64); err != nil {
					return fmt.Errorf("attribute %s: %q is not a number", name, *v.StringValue)
				}
			}
		case "Binary":
			if len(v.BinaryValue) == 0 {
				return fmt.Errorf("attribute %s: a Binary attribute needs a non-empty value", name)
			}
		default:
			return fmt.Errorf("attribute %s: data type %q is not String, Number or Binary", name, typ)
		}
	}
	return nil
}

func checkAttributeName(name string) error {
	if name == "" || len(name) > 256 {
		return fmt.Errorf("attribute name %q must be 1 to 256 characters", name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return fmt.Errorf("attribute name %q: only letters, digits, '_', '-' and '.' are allowed", name)
		}
	}
	lower := strings.ToLower(name)
	if strings.HasPrefix(lower, "aws.") || strings.HasPrefix(lower, "amazon.") {
		return fmt.Errorf("attribute name %q: the AWS. and Amazon. prefixes are reserved", name)
	}
	if strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".") || strings.Contains(name, "..") {
		return fmt.Errorf("attribute name %q may not start or end with '.' or hold '..'", name)
	}
	return nil
}

// ParseAttribute parses NAME=VALUE (a String), NAME:Number=VALUE, NAME:String=VALUE or
// NAME:Binary=BASE64, as `watchbot send --attr` takes them.
func ParseAttribute(s string) (string, types.MessageAttributeValue, error) {
	key, value, ok := strings.Cut(s, "=")
	if !ok {
		return "", types.MessageAttributeValue{}, fmt.Errorf("%q: want NAME=VALUE or NAME:Number=VALUE", s)
	}
	name, typ, typed := strings.Cut(key, ":")
	if !typed {
		typ = "String"
	}
	v := types.MessageAttributeValue{DataType: aws.String(typ)}
	base, _, _ := strings.Cut(typ, ".")
	switch base {
	case "String", "Number":
		v.StringValue = aws.String(value)
	case "Binary":
		b, err := base64.StdEncoding.DecodeString(value)
		if err != nil {
			return "", types.MessageAttributeValue{}, fmt.Errorf("%q: a Binary value is base64: %w", s, err)
		}
		v.BinaryValue = b
	default:
		return "", types.MessageAttributeValue{}, fmt.Errorf("%q: type %q is not String, Number or Binary", s, typ)
	}
	if err := CheckAttributes(map[string]types.MessageAttributeValue{name: v}); err != nil {
		return "", types.MessageAttributeValue{}, fmt.Errorf("%q: %w", s, err)
	}
	return name, v, nil
}

// NewDeduplicationID returns a random FIFO deduplication id, for sends that must never be
// dropped as duplicates of an earlier message (a replay, an import).
func NewDeduplicationID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	return hex.EncodeToString(b[:])
}

// Batches splits messages into SendMessageBatch calls: at most sqsspec.MaxBatchEntries entries
// and sqsspec.MaxBatchBytes bytes each, in order. It returns index ranges [start, end) into msgs.
func Batches(msgs []Message) [][2]int {
	var out [][2]int
	start, bytes := 0, 0
	for i, m := range msgs {
		n := Size(m)
		if i > start && (i-start == sqsspec.MaxBatchEntries || bytes+n > sqsspec.MaxBatchBytes) {
			out = append(out, [2]int{start, i})
			start, bytes = i, 0
		}
		bytes += n
	}
	if start < len(msgs) {
		out = append(out, [2]int{start, len(msgs)})
	}
	return out
}

// Result is the fate of one message.
type Result struct {
	MessageID string
	Err       error
	// Warning says what was left out of a message sent anyway (its trace context), or "".
	Warning string
}

// SendBatch sends msgs (at most sqsspec.MaxBatchEntries) in one SendMessageBatch call and
// returns one Result per message, in order. A failed call fails every entry with the call's
// error; an entry SQS refused fails with an *sqsspec.EntryError.
func SendBatch(ctx context.Context, api API, queueURL string, msgs []Message) []Result {
	results := make([]Result, len(msgs))
	if len(msgs) == 0 {
		return results
	}
	if len(msgs) > sqsspec.MaxBatchEntries {
		for i := range results {
			results[i].Err = fmt.Errorf("send batch: %d entries, more than %d", len(msgs), sqsspec.MaxBatchEntries)
		}
		return results
	}
	entries := make([]types.SendMessageBatchRequestEntry, len(msgs))
	for i, m := range msgs {
		e := types.SendMessageBatchRequestEntry{
			Id:                sqsspec.EntryID(i),
			MessageBody:       aws.String(m.Body),
			MessageAttributes: m.Attributes,
		}
		if m.GroupID != "" {
			e.MessageGroupId = aws.String(m.GroupID)
		}
		if m.DeduplicationID != "" {
			e.MessageDeduplicationId = aws.String(m.DeduplicationID)
		}
		if m.Delay > 0 {
			e.DelaySeconds = sqsspec.Seconds(m.Delay)
		}
		entries[i] = e
	}
	out, err := api.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(queueURL), Entries: entries})
	if err != nil {
		for i := range results {
			results[i].Err = fmt.Errorf("send batch: %w", err)
		}
		return results
	}
	done := make([]bool, len(msgs))
	index := func(id *string) (int, bool) {
		i, ok := sqsspec.EntryIndex(id, len(msgs))
		if !ok || done[i] {
			return 0, false
		}
		done[i] = true
		return i, true
	}
	for _, s := range out.Successful {
		if i, ok := index(s.Id); ok {
			results[i].MessageID = aws.ToString(s.MessageId)
		}
	}
	for _, f := range out.Failed {
		if i, ok := index(f.Id); ok {
			results[i].Err = &sqsspec.EntryError{Code: aws.ToString(f.Code), Message: aws.ToString(f.Message), SenderFault: f.SenderFault}
		}
	}
	for i := range results {
		if !done[i] {
			results[i].Err = errors.New("send batch: SQS returned no result for this entry")
		}
	}
	return results
}

// Send sends msgs in as few batch calls as the limits allow and calls report once per message,
// in order, as its batch completes. It stops early only when ctx is cancelled; the messages not
// attempted are reported with ctx's error.
func Send(ctx context.Context, api API, queueURL string, msgs []Message, report func(i int, r Result)) {
	for _, b := range Batches(msgs) {
		if err := ctx.Err(); err != nil {
			for i := b[0]; i < len(msgs); i++ {
				report(i, Result{Err: err})
			}
			return
		}
		for j, r := range SendBatch(ctx, api, queueURL, msgs[b[0]:b[1]]) {
			report(b[0]+j, r)
		}
	}
}
