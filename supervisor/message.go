package supervisor

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/internal/tracing"
)

// message is a received SQS message as the worker sees it.
type message struct {
	ID            string
	ReceiptHandle string
	// Raw is the body exactly as received.
	Raw string
	// Body is what the worker gets: Raw, or the inner Message of an SNS notification.
	Body    string
	Subject string
	// Attributes are the String and Number message attributes (SNS's when unwrapped).
	Attributes map[string]string
	// SQSAttributes are the message attributes as received, kept for dead-lettering.
	SQSAttributes map[string]types.MessageAttributeValue
	// Attempt is ApproximateReceiveCount, as SQS reports it.
	Attempt      int
	SentAt       time.Time
	FirstReceive time.Time
	SenderID     string
	// GroupID is the MessageGroupId: a FIFO message's group, or on a standard queue a fair
	// queue's tenant, which orders nothing. DedupID and Sequence are a FIFO message's
	// MessageDeduplicationId and SequenceNumber.
	GroupID  string
	DedupID  string
	Sequence string
	// TraceHeader is the AWSTraceHeader system attribute (X-Ray's), "" if absent.
	TraceHeader string
	// System is the system attributes as received.
	System map[string]string
	// Trace is the message's trace context (tracing.Extract); TraceMalformed the carriers
	// that were present but could not be read.
	Trace          tracing.Remote
	TraceMalformed []tracing.Malformed
}

// parseMessage turns an SQS message into a message. It never fails: a body that is not an
// SNS envelope, or an envelope that is malformed, is passed on as it is.
func parseMessage(m types.Message) message {
	msg := message{
		ID:            aws.ToString(m.MessageId),
		ReceiptHandle: aws.ToString(m.ReceiptHandle),
		Raw:           aws.ToString(m.Body),
		SQSAttributes: m.MessageAttributes,
		Attributes:    map[string]string{},
	}
	msg.Body = msg.Raw
	sys := m.Attributes
	msg.System = sys
	msg.Attempt, _ = strconv.Atoi(sys[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
	if msg.Attempt < 1 {
		msg.Attempt = 1
	}
	msg.SentAt = epochMillis(sys[string(types.MessageSystemAttributeNameSentTimestamp)])
	msg.FirstReceive = epochMillis(sys[string(types.MessageSystemAttributeNameApproximateFirstReceiveTimestamp)])
	msg.SenderID = sys[string(types.MessageSystemAttributeNameSenderId)]
	msg.GroupID = sys[string(types.MessageSystemAttributeNameMessageGroupId)]
	msg.DedupID = sys[string(types.MessageSystemAttributeNameMessageDeduplicationId)]
	msg.Sequence = sys[string(types.MessageSystemAttributeNameSequenceNumber)]
	msg.TraceHeader = sys[string(types.MessageSystemAttributeNameAWSTraceHeader)]
	for name, v := range m.MessageAttributes {
		if v.StringValue != nil && !strings.HasPrefix(aws.ToString(v.DataType), "Binary") {
			msg.Attributes[name] = *v.StringValue
		}
	}
	if env, ok := parseSNS(msg.Raw); ok {
		msg.Body = *env.Message
		msg.Subject = env.Subject
		for name, a := range env.MessageAttributes {
			if a.Type == "String" || a.Type == "Number" || strings.HasPrefix(a.Type, "String.") || strings.HasPrefix(a.Type, "Number.") {
				msg.Attributes[name] = a.Value
			}
		}
	}
	msg.Trace, _, msg.TraceMalformed = tracing.Extract(msg.Attributes, msg.TraceHeader)
	return msg
}

// snsEnvelope is the JSON SNS delivers to an SQS subscription without raw delivery.
type snsEnvelope struct {
	Type              string  `json:"Type"`
	TopicArn          string  `json:"TopicArn"`
	Subject           string  `json:"Subject"`
	Message           *string `json:"Message"`
	MessageAttributes map[string]struct {
		Type  string `json:"Type"`
		Value string `json:"Value"`
	} `json:"MessageAttributes"`
}

// parseSNS recognises an SNS notification envelope: a JSON object with Type "Notification",
// a TopicArn and a string Message. Anything else is not unwrapped.
func parseSNS(body string) (snsEnvelope, bool) {
	var env snsEnvelope
	if !strings.HasPrefix(strings.TrimSpace(body), "{") || !strings.Contains(body, "Notification") {
		return env, false
	}
	if err := json.Unmarshal([]byte(body), &env); err != nil {
		return env, false
	}
	return env, env.Type == "Notification" && env.TopicArn != "" && env.Message != nil
}

func epochMillis(s string) time.Time {
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil || ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}
