// Package payload is the wire format of AWS's SQS Extended Client libraries, which keep a body
// too large for SQS in S3 and send a pointer to it instead: the Java
// amazon-sqs-java-extended-client-lib (through payload-offloading-java-common-lib-for-aws), the
// Python amazon-sqs-python-extended-client-lib, and the community ports that copy them. listen
// resolves those pointers for its workers, send writes them, and the operator tools show them;
// all three read and write the format here, so it cannot drift between them (docs/payloads.md).
//
// A pointer message carries, as its body, a two-element JSON array: the name of the Java class
// the pointer deserialises to, then an object naming the bucket and key,
//
//	["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"b","s3Key":"k"}]
//
// and a message attribute of data type Number, ExtendedPayloadSize (SQSLargePayloadSize from
// older senders), holding the body's size in bytes. The key is a random UUID unless the sender
// chose one.
package payload

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"

	"strconv"
	"strings"
)

// The pointer classes: the first element of a pointer body names the Java class it deserialises
// to.
const (
	// PointerClass is what the Java library (1.1 and later) and the Python library write.
	PointerClass = "software.amazon.payloadoffloading.PayloadS3Pointer"
	// LegacyPointerClass is what the Java library 1.0.x writes, and the Python library when told
	// to use the legacy attribute.
	LegacyPointerClass = "com.amazon.sqs.javamessaging.MessageS3Pointer"
)

// The size attributes: the libraries reserve both names and set one of them, of data type
// SizeAttributeType, to the body's size in bytes on every pointer message. The Java library
// writes LegacySizeAttribute unless configured otherwise (testdata/README.md); the Python
// library writes SizeAttribute, and asks SQS for that one alone unless told to use the legacy
// name.
const (
	SizeAttribute       = "ExtendedPayloadSize"
	LegacySizeAttribute = "SQSLargePayloadSize"
	SizeAttributeType   = "Number"
)

// Pointer names the S3 object that holds a message's body.
type Pointer struct {
	Bucket string
	Key    string
}

// URI is the object's address as s3://bucket/key, the form WATCHBOT_PAYLOAD_S3_URI carries.
func (p Pointer) URI() string { return "s3://" + p.Bucket + "/" + p.Key }

// String is URI.
func (p Pointer) String() string { return p.URI() }

// pointerFields is the object of a pointer body. Unknown fields are ignored, as the Java
// library's Jackson mapper ignores them (FAIL_ON_UNKNOWN_PROPERTIES off).
type pointerFields struct {
	Bucket *string `json:"s3BucketName"`
	Key    *string `json:"s3Key"`
}

// Encode returns the pointer body exactly as the Java library writes it: no spaces, and no
// escaping beyond what JSON requires (Jackson escapes neither <, > nor &).
func (p Pointer) Encode() string {
	var b bytes.Buffer
	b.WriteString(`["` + PointerClass + `",{"s3BucketName":`)
	writeString(&b, p.Bucket)
	b.WriteString(`,"s3Key":`)
	writeString(&b, p.Key)
	b.WriteString("}]")
	return b.String()
}

func writeString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	b.Truncate(b.Len() - 1)
}

// ErrNotPointer is wrapped by every error of Parse.
var ErrNotPointer = errors.New("not an S3 payload pointer")

// maxPointerLen bounds what Parse reads: a pointer is two short names and a class, and no
// bucket name exceeds 63 bytes nor key 1024.
const maxPointerLen = 4096

// errNotArray is Parse's answer to nearly every ordinary body: made once, since listen asks
// it of every message.
var errNotArray = fmt.Errorf("%w: the body is not a JSON array", ErrNotPointer)

// Parse reads a pointer body, as the Java and Python libraries write it (whitespace between
// tokens is allowed: Python's json.dumps puts a space after each separator). It accepts both
// pointer classes, and an object with further fields. It refuses anything else, saying why, in
// an error that wraps ErrNotPointer: a body that merely looks alike is not a pointer.
func Parse(body string) (Pointer, error) {
	trimmed := strings.TrimSpace(body)
	if !strings.HasPrefix(trimmed, "[") {
		return Pointer{}, errNotArray
	}
	if len(trimmed) > maxPointerLen {
		return Pointer{}, fmt.Errorf("%w: %d bytes is too long for a pointer", ErrNotPointer, len(trimmed))
	}
	var parts []json.RawMessage
	if err := json.Unmarshal([]byte(trimmed), &parts); err != nil {
		return Pointer{}, fmt.Errorf("%w: %v", ErrNotPointer, err)
	}
	if len(parts) != 2 {
		return Pointer{}, fmt.Errorf("%w: the array has %d elements, not 2", ErrNotPointer, len(parts))
	}
	var class string
	if err := json.Unmarshal(parts[0], &class); err != nil {
		return Pointer{}, fmt.Errorf("%w: the first element is not a class name", ErrNotPointer)
	}
	if class != PointerClass && class != LegacyPointerClass {
		return Pointer{}, fmt.Errorf("%w: unknown pointer class %q", ErrNotPointer, class)
	}
	var f pointerFields
	if !bytes.HasPrefix(bytes.TrimSpace(parts[1]), []byte("{")) {
		return Pointer{}, fmt.Errorf("%w: the second element is not an object", ErrNotPointer)
	}
	if err := json.Unmarshal(parts[1], &f); err != nil {
		return Pointer{}, fmt.Errorf("%w: %v", ErrNotPointer, err)
	}
	switch {
	case f.Bucket == nil || *f.Bucket == "":
		return Pointer{}, fmt.Errorf("%w: no s3BucketName", ErrNotPointer)
	case f.Key == nil || *f.Key == "":
		return Pointer{}, fmt.Errorf("%w: no s3Key", ErrNotPointer)
	}
	return Pointer{Bucket: *f.Bucket, Key: *f.Key}, nil
}

// ParseURI reads s3://bucket/key.
func ParseURI(uri string) (Pointer, error) {
	rest, ok := strings.CutPrefix(uri, "s3://")
	bucket, key, found := strings.Cut(rest, "/")
	if !ok || !found || bucket == "" || key == "" {
		return Pointer{}, fmt.Errorf("%q is not s3://BUCKET/KEY", uri)
	}
	return Pointer{Bucket: bucket, Key: key}, nil
}

// Size is what a message's size attribute says.
type Size struct {
	// Name is the attribute's name, SizeAttribute or LegacySizeAttribute; "" when the message
	// has neither.
	Name string
	// Bytes is its value; -1 when it is not a whole number of bytes.
	Bytes int64
}

// Present reports whether the message carries a size attribute.
func (s Size) Present() bool { return s.Name != "" }

// SizeOf reads the size attribute among a message's String and Number attributes (name to
// value). The current name wins over the legacy one, as in both libraries.
func SizeOf(attrs map[string]string) Size {
	for _, name := range []string{SizeAttribute, LegacySizeAttribute} {
		if v, ok := attrs[name]; ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil || n < 0 {
				n = -1
			}
			return Size{Name: name, Bytes: n}
		}
	}
	return Size{}
}

// Detect decides what a received body is: a pointer (ok), an ordinary body (neither ok nor
// err), or a pointer that does not parse (err, which says why). A body that does not parse is
// ordinary unless the message carries a size attribute: then its sender meant a pointer, and
// passing the pointer text to a worker as if it were the payload would be wrong.
func Detect(body string, size Size) (p Pointer, ok bool, err error) {
	p, err = Parse(body)
	switch {
	case err == nil:
		return p, true, nil
	case size.Present():
		return Pointer{}, false, fmt.Errorf("the message has %s but its body is not a pointer: %w", size.Name, err)
	default:
		return Pointer{}, false, nil
	}
}

// NewKey returns a random (version 4) UUID, the key the libraries give an object by default.
func NewKey() string {
	var u [16]byte
	_, _ = rand.Read(u[:]) // crypto/rand.Read never fails
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}
