package supervisor

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// maxEnvMessage is the largest body placed in the Message variable. Linux limits one
// environment string to 128 KiB; larger bodies are read from WATCHBOT_MESSAGE_FILE or stdin.
const maxEnvMessage = 64 * 1024

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
	// GroupID, DedupID and Sequence are a FIFO message's MessageGroupId,
	// MessageDeduplicationId and SequenceNumber.
	GroupID  string
	DedupID  string
	Sequence string
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

// jobEnv is what a worker's environment is built from, beyond the message itself.
type jobEnv struct {
	// Attempt is the attempt number: the receive count, plus the runs watchbot gave the
	// message in place on a FIFO queue.
	Attempt     int
	QueueURL    string
	MaxAttempts int
	MessageFile string
	ResultFile  string
	Deadline    time.Time // zero: none
}

// buildEnv returns the worker's variables (docs/worker-contract.md), to be appended to
// the supervisor's own environment. Values never pass through a shell.
func buildEnv(m message, j jobEnv) []string {
	env := []string{
		"MessageId=" + m.ID,
		"ApproximateReceiveCount=" + strconv.Itoa(m.Attempt),
		"WATCHBOT_MESSAGE_FILE=" + j.MessageFile,
		"WATCHBOT_RESULT_FILE=" + j.ResultFile,
		"WATCHBOT_ATTEMPT=" + strconv.Itoa(j.Attempt),
		"WATCHBOT_MAX_ATTEMPTS=" + strconv.Itoa(j.MaxAttempts),
		"WATCHBOT_QUEUE_URL=" + j.QueueURL,
	}
	if len(m.Body) <= maxEnvMessage && envSafe(m.Body) {
		env = append(env, "Message="+m.Body)
	}
	if m.Subject != "" && envSafe(m.Subject) {
		env = append(env, "Subject="+m.Subject)
	}
	if !m.SentAt.IsZero() {
		env = append(env, "SentTimestamp="+m.SentAt.Format(time.RFC3339Nano))
	}
	if !m.FirstReceive.IsZero() {
		env = append(env, "ApproximateFirstReceiveTimestamp="+m.FirstReceive.Format(time.RFC3339Nano))
	}
	if !j.Deadline.IsZero() {
		env = append(env, "WATCHBOT_DEADLINE="+j.Deadline.UTC().Format(time.RFC3339))
	}
	if m.GroupID != "" {
		env = append(env, "WATCHBOT_GROUP_ID="+m.GroupID)
	}
	// Names that differ only in case or punctuation map to one variable: the first name in
	// byte order wins, so the worker sees the same value on every delivery.
	seen := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(m.Attributes)) {
		v, key := m.Attributes[name], "WATCHBOT_ATTR_"+envName(name)
		if seen[key] || !envSafe(v) || len(v) > maxEnvMessage {
			continue
		}
		seen[key] = true
		env = append(env, key+"="+v)
	}
	return env
}

// envName upper-cases an attribute name and replaces every non-alphanumeric byte with _.
func envName(name string) string {
	b := []byte(strings.ToUpper(name))
	for i, c := range b {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			b[i] = '_'
		}
	}
	return string(b)
}

// envSafe reports whether s can be an environment value (no NUL byte).
func envSafe(s string) bool { return !strings.ContainsRune(s, 0) }
