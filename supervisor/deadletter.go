package supervisor

import (
	"context"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/watchbot/watchbot/deadletter"
)

// sendToDLQ sends the message, as received (an SNS envelope stays an envelope), with its
// attributes and watchbot's to the dead-letter queue. The caller deletes it from the source
// only when this returns nil.
func (s *Supervisor) sendToDLQ(ctx context.Context, j *job, reason string) error {
	m := j.msg
	attrs, ok := deadletter.WithCause(m.SQSAttributes, deadletter.Cause{Reason: reason, SourceQueue: s.cfg.QueueURL, Attempts: m.Attempt})
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
