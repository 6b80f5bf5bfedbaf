package lambda

import (
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Event is the SQS event, as Lambda's event source mapping builds it
// (https://docs.aws.amazon.com/lambda/latest/dg/with-sqs.html): the records of one invocation.
type Event struct {
	Records []Record `json:"Records"`
}

// Record is one message of an SQS event, its fields in Lambda's order.
type Record struct {
	MessageID     string `json:"messageId"`
	ReceiptHandle string `json:"receiptHandle"`
	Body          string `json:"body"`
	// Attributes are the message's system attributes that Lambda passes on.
	Attributes        map[string]string           `json:"attributes"`
	MessageAttributes map[string]MessageAttribute `json:"messageAttributes"`
	MD5OfBody         string                      `json:"md5OfBody"`
	EventSource       string                      `json:"eventSource"`
	EventSourceARN    string                      `json:"eventSourceARN"`
	AWSRegion         string                      `json:"awsRegion"`
}

// MessageAttribute is a message attribute as the event carries it: binary values in base64
// (encoding/json's []byte), and the list fields always present, empty, as Lambda sends them.
type MessageAttribute struct {
	StringValue      *string  `json:"stringValue,omitempty"`
	BinaryValue      []byte   `json:"binaryValue,omitempty"`
	StringListValues []string `json:"stringListValues"`
	BinaryListValues [][]byte `json:"binaryListValues"`
	DataType         string   `json:"dataType"`
}

// Source is the queue the records come from.
type Source struct {
	// QueueARN is the event's eventSourceARN; Region its awsRegion.
	QueueARN, Region string
}

// systemAttributes are the SQS system attributes an SQS event's records carry, when the
// message has them: every message has the first four, a FIFO message the next three.
var systemAttributes = []types.MessageSystemAttributeName{
	types.MessageSystemAttributeNameApproximateReceiveCount,
	types.MessageSystemAttributeNameSentTimestamp,
	types.MessageSystemAttributeNameSenderId,
	types.MessageSystemAttributeNameApproximateFirstReceiveTimestamp,
	types.MessageSystemAttributeNameSequenceNumber,
	types.MessageSystemAttributeNameMessageGroupId,
	types.MessageSystemAttributeNameMessageDeduplicationId,
	types.MessageSystemAttributeNameAWSTraceHeader,
	types.MessageSystemAttributeNameDeadLetterQueueSourceArn,
}

// NewRecord is the record of m, received from src, with body as its body: the message's
// own, or the payload its pointer names.
func NewRecord(m types.Message, body string, src Source) Record {
	r := Record{
		MessageID: aws.ToString(m.MessageId), ReceiptHandle: aws.ToString(m.ReceiptHandle), Body: body,
		Attributes: map[string]string{}, MessageAttributes: map[string]MessageAttribute{},
		MD5OfBody: aws.ToString(m.MD5OfBody), EventSource: "aws:sqs", EventSourceARN: src.QueueARN, AWSRegion: src.Region,
	}
	if r.MD5OfBody == "" || body != aws.ToString(m.Body) {
		sum := md5.Sum([]byte(body))
		r.MD5OfBody = hex.EncodeToString(sum[:])
	}
	for _, name := range systemAttributes {
		if v, ok := m.Attributes[string(name)]; ok {
			r.Attributes[string(name)] = v
		}
	}
	for name, v := range m.MessageAttributes {
		r.MessageAttributes[name] = MessageAttribute{StringValue: v.StringValue, BinaryValue: v.BinaryValue,
			StringListValues: nonNil(v.StringListValues), BinaryListValues: nonNil(v.BinaryListValues), DataType: aws.ToString(v.DataType)}
	}
	return r
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// Events packs records, in their order, into as few events as fit within limit bytes each
// (MaxResponse: Lambda's invocation limit). A record too large for an event of its own is
// returned apart: no invocation can carry it. Each event is returned with the records it
// holds.
func Events(records []Record, limit int) (events [][]byte, held [][]Record, tooLarge []Record) {
	const frame = len(`{"Records":[]}`)
	var buf bytes.Buffer
	var in []Record
	flush := func() {
		if len(in) > 0 {
			events = append(events, append(append([]byte(`{"Records":[`), buf.Bytes()...), ']', '}'))
			held = append(held, in)
		}
		buf.Reset()
		in = nil
	}
	for _, r := range records {
		enc := encodeRecord(r)
		if frame+len(enc) > limit {
			tooLarge = append(tooLarge, r)
			continue
		}
		if frame+buf.Len()+1+len(enc) > limit {
			flush()
		}
		if buf.Len() > 0 {
			buf.WriteByte(',')
		}
		buf.Write(enc)
		in = append(in, r)
	}
	flush()
	return events, held, tooLarge
}

// encodeRecord encodes r as the event carries it, without HTML escapes, which Lambda does
// not write.
func encodeRecord(r Record) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(r) // strings, maps of strings and byte slices always encode
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// FunctionARN is the invoked function's ARN: arn:PARTITION:lambda:REGION:ACCOUNT:function:NAME,
// with the partition, region and account of the queue's ARN.
func FunctionARN(queueARN, name string) string {
	parts := strings.SplitN(queueARN, ":", 6)
	if len(parts) < 6 {
		return "arn:aws:lambda:::function:" + name
	}
	return "arn:" + parts[1] + ":lambda:" + parts[3] + ":" + parts[4] + ":function:" + name
}

// TraceID is an invocation's X-Ray trace header: the message's AWSTraceHeader, or else its
// W3C traceparent in X-Ray's form; "" when it has neither.
//
//	00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01
//	→ Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1
func TraceID(awsTraceHeader, traceparent string) string {
	if awsTraceHeader != "" {
		return awsTraceHeader
	}
	p := strings.Split(traceparent, "-")
	if len(p) != 4 || len(p[1]) != 32 || len(p[2]) != 16 || len(p[3]) != 2 || !isHex(p[1]+p[2]+p[3]) {
		return ""
	}
	flags, _ := hex.DecodeString(p[3])
	return "Root=1-" + p[1][:8] + "-" + p[1][8:] + ";Parent=" + p[2] + ";Sampled=" + string('0'+flags[0]&1)
}

func isHex(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil && strings.ToLower(s) == s
}
