package supervisor

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// The attributes watchbot adds to a message it dead-letters.
const (
	AttrReason      = "watchbot-reason"
	AttrSourceQueue = "watchbot-source-queue"
	AttrAttempts    = "watchbot-attempts"
	// AttrPacked holds the three as JSON when the message has fewer than three attribute
	// slots free (SQS allows ten).
	AttrPacked = "watchbot-deadletter"
)

// maxMessageAttributes is SQS's limit on message attributes.
const maxMessageAttributes = 10

// deadLetterAttributes returns the message's attributes plus watchbot's, packed into one
// attribute when fewer than three slots are free. With no slot free at all the original
// attributes are kept and ok is false: the reason then lives only in the log.
func deadLetterAttributes(orig map[string]types.MessageAttributeValue, reason, source string, attempts int) (attrs map[string]types.MessageAttributeValue, ok bool) {
	attrs = make(map[string]types.MessageAttributeValue, len(orig)+3)
	for k, v := range orig {
		if !strings.HasPrefix(k, "watchbot-") {
			attrs[k] = v
		}
	}
	str := func(s string) types.MessageAttributeValue {
		return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(s)}
	}
	switch free := maxMessageAttributes - len(attrs); {
	case free >= 3:
		attrs[AttrReason] = str(reason)
		attrs[AttrSourceQueue] = str(source)
		attrs[AttrAttempts] = types.MessageAttributeValue{DataType: aws.String("Number"), StringValue: aws.String(strconv.Itoa(attempts))}
	case free >= 1:
		packed, _ := json.Marshal(struct {
			Reason      string `json:"reason"`
			SourceQueue string `json:"sourceQueue"`
			Attempts    int    `json:"attempts"`
		}{reason, source, attempts})
		attrs[AttrPacked] = str(string(packed))
	default:
		return attrs, false
	}
	return attrs, true
}

// sendToDLQ sends the message, as received (an SNS envelope stays an envelope), with its
// attributes and watchbot's to the dead-letter queue. The caller deletes it from the source
// only when this returns nil.
func (s *Supervisor) sendToDLQ(ctx context.Context, j *job, reason string) error {
	m := j.msg
	attrs, ok := deadLetterAttributes(m.SQSAttributes, reason, s.cfg.QueueURL, m.Attempt)
	if !ok {
		j.log.Warn("message has 10 attributes, no room for watchbot's: the dead-letter reason is only in this log", "reason", reason)
	}
	in := &sqs.SendMessageInput{
		QueueUrl:          aws.String(s.dlqURL),
		MessageBody:       aws.String(m.Raw),
		MessageAttributes: attrs,
	}
	if strings.HasSuffix(s.dlqURL, ".fifo") {
		group := m.GroupID
		if group == "" {
			group = "watchbot"
		}
		in.MessageGroupId = aws.String(group)
		in.MessageDeduplicationId = aws.String(m.ID)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.AckTimeout)
	defer cancel()
	if _, err := s.api.SendMessage(ctx, in); err != nil {
		return fmt.Errorf("send to dead-letter queue: %w", err)
	}
	return nil
}
