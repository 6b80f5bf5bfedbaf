package deadletter

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"strings"
	"unicode/utf8"

	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/payload"
)

// A dead-lettered message may carry, instead of its body, a pointer to the body in S3, as AWS's
// SQS Extended Client libraries and `watchbot send --payload-bucket` write it
// (docs/payloads.md). The operator tools show the pointer and, asked to, fetch the body. They
// fetch with the operator's own credentials, from whichever bucket the pointer names: listen's
// bucket allowlist guards what a task's role may be made to read by a message, and an operator
// reading a dead-letter queue chooses to read what its messages point at.

// PayloadRecord is what a Record says of a body kept in S3.
type PayloadRecord struct {
	// URI, Bucket and Key name the object (s3://BUCKET/KEY).
	URI    string `json:"uri"`
	Bucket string `json:"bucket"`
	Key    string `json:"key"`
	// Size is the body's size in bytes as the size attribute (SizeAttribute) gives it; nil
	// when the message has none, or a value that is not a byte count.
	Size          *int64 `json:"size,omitempty"`
	SizeAttribute string `json:"sizeAttribute,omitempty"`
	// Resolved says the Record's body is the object's content, fetched from S3, and no longer
	// the pointer; the size attribute is then left out of its message attributes, so that an
	// import sends it as the ordinary message it now is.
	Resolved bool `json:"resolved,omitempty"`
	// Error says why the body could not be fetched; the Record keeps the pointer.
	Error string `json:"error,omitempty"`
}

// textAttributes returns the String and Number attributes of m by name, as payload.SizeOf
// reads them.
func (m Message) textAttributes() map[string]string {
	out := map[string]string{}
	for name, v := range m.Attributes {
		if v.StringValue != nil {
			out[name] = *v.StringValue
		}
	}
	return out
}

// Payload returns the pointer m carries, its size attribute, and whether m is a pointer
// message; err says why a message whose size attribute says it is one has a body that is not
// a pointer (listen dead-letters such a message for that reason).
func (m Message) Payload() (p payload.Pointer, size payload.Size, ok bool, err error) {
	size = payload.SizeOf(m.textAttributes())
	p, ok, err = payload.Detect(m.Body, size)
	return p, size, ok, err
}

// payloadRecord returns what a Record says of m's pointer, or nil.
func payloadRecord(m Message) *PayloadRecord {
	p, size, ok, _ := m.Payload()
	if !ok {
		return nil
	}
	r := &PayloadRecord{URI: p.URI(), Bucket: p.Bucket, Key: p.Key, SizeAttribute: size.Name}
	if size.Present() && size.Bytes >= 0 {
		n := size.Bytes
		r.Size = &n
	}
	return r
}

// Resolve replaces the pointer in r by the body it names, fetched with api: r.Body becomes the
// object's content, the size attribute leaves r.MessageAttributes, and r.Payload.Resolved is
// set. A failure leaves r's body and attributes as they were, records why in r.Payload.Error,
// and is returned. A record without a pointer is left alone. The body is held in memory. A
// body that is not valid UTF-8 cannot be a JSON string: each invalid byte is written as
// U+FFFD, as encoding/json writes it.
func (r *Record) Resolve(ctx context.Context, api payload.Getter) error {
	if r.Payload == nil || r.Payload.Resolved {
		return nil
	}
	p := payload.Pointer{Bucket: r.Payload.Bucket, Key: r.Payload.Key}
	var body bytes.Buffer
	if r.Payload.Size != nil && *r.Payload.Size > 0 && *r.Payload.Size < 1<<30 {
		body.Grow(int(*r.Payload.Size))
	}
	if _, err := payload.Fetch(ctx, api, p, &body); err != nil {
		if reason, ok := payload.Permanent(err); ok {
			err = fmt.Errorf("%s: %w", reason, err)
		}
		r.Payload.Error = err.Error()
		return err
	}
	r.Body = body.String()
	r.Payload.Resolved = true
	r.Payload.Error = ""
	if r.MessageAttributes != nil {
		attrs := maps.Clone(r.MessageAttributes)
		delete(attrs, payload.SizeAttribute)
		delete(attrs, payload.LegacySizeAttribute)
		if len(attrs) == 0 {
			attrs = nil
		}
		r.MessageAttributes = attrs
	}
	return nil
}

// listingBody is the body a listing shows for r: the fetched body when r was resolved, else
// the message's own.
func listingBody(m Message, r *Record) string {
	if r != nil && r.Payload != nil && r.Payload.Resolved {
		return r.Body
	}
	return m.Body
}

// writePayloadLines writes the listing's lines about m's pointer, if any: the object and its
// size, and, when r says so, whether its body was fetched.
func writePayloadLines(b *strings.Builder, m Message, r *Record) {
	p, size, ok, err := m.Payload()
	if err != nil {
		fmt.Fprintf(b, "payload:  %s is set, but %v\n", size.Name, err)
		return
	}
	if !ok {
		return
	}
	switch {
	case !size.Present():
		fmt.Fprintf(b, "payload:  %s (no size attribute)\n", p)
	case size.Bytes < 0:
		fmt.Fprintf(b, "payload:  %s (%s is not a byte count)\n", p, size.Name)
	default:
		fmt.Fprintf(b, "payload:  %s, %d bytes (%s)\n", p, size.Bytes, size.Name)
	}
	switch {
	case r == nil || r.Payload == nil || !r.Payload.Resolved && r.Payload.Error == "":
		fmt.Fprintf(b, "          the body below is the pointer: --resolve-payloads fetches the object\n")
	case r.Payload.Resolved:
		note := ""
		if !utf8.ValidString(r.Body) {
			note = ", not valid UTF-8"
		}
		fmt.Fprintf(b, "          the body below is the object's content, fetched from S3 (%d bytes%s)\n", len(r.Body), note)
	case r.Payload.Error != "":
		fmt.Fprintf(b, "          not fetched: %s\n", r.Payload.Error)
	}
}

// PayloadSample counts the pointer messages among a sample of a dead-letter queue's messages.
type PayloadSample struct {
	// Peeked is how many messages were looked at (Peek: each look is a receive).
	Peeked int `json:"peeked"`
	// Pointers is how many of them carry a pointer to a body in S3.
	Pointers int `json:"pointers"`
	// Bytes adds up the pointers' size attributes: the bytes their bodies hold in S3.
	Bytes int64 `json:"payloadBytes"`
}

// SamplePayloads peeks at up to limit messages of the dead-letter queue dlqURL, as Peek does,
// and counts the pointer messages among them. Nothing is fetched from S3.
func SamplePayloads(ctx context.Context, api API, dlqURL string, limit int) (PayloadSample, error) {
	var s PayloadSample
	_, err := Peek(ctx, api, Queues{DLQ: queueattr.Info{URL: dlqURL}}, limit, func(m Message) error {
		s.Peeked++
		if _, size, ok, _ := m.Payload(); ok {
			s.Pointers++
			if size.Bytes > 0 {
				s.Bytes += size.Bytes
			}
		}
		return nil
	})
	return s, err
}
