package fakesqs

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
)

// createQueue creates a queue on api and returns its URL.
func createQueue(t *testing.T, api sqsAPI, name string, attrs map[string]string) string {
	t.Helper()
	out, err := api.CreateQueue(context.Background(), &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		t.Fatalf("create queue %s: %v", name, err)
	}
	return aws.ToString(out.QueueUrl)
}

// queueARN reads a queue's ARN.
func queueARN(t *testing.T, api sqsAPI, url string) string {
	t.Helper()
	out, err := api.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	if err != nil {
		t.Fatalf("queue arn of %s: %v", url, err)
	}
	return out.Attributes["QueueArn"]
}

// withDLQ creates a dead-letter queue for name and returns the attributes that make a queue
// redrive to it after maxReceiveCount receives, with the DLQ's URL.
func withDLQ(t *testing.T, api sqsAPI, name string, maxReceiveCount string, fifo bool) (map[string]string, string) {
	t.Helper()
	attrs := map[string]string{}
	dlqName := name + "-dlq"
	if fifo {
		dlqName += ".fifo"
		attrs["FifoQueue"] = "true"
	}
	dlq := createQueue(t, api, dlqName, attrs)
	src := map[string]string{"RedrivePolicy": `{"deadLetterTargetArn":"` + queueARN(t, api, dlq) + `","maxReceiveCount":` + maxReceiveCount + `}`}
	if fifo {
		src["FifoQueue"] = "true"
	}
	return src, dlq
}

// send sends body to a standard queue and returns the message id.
func send(t *testing.T, api sqsAPI, url, body string) string {
	t.Helper()
	out, err := api.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body)})
	if err != nil {
		t.Fatalf("send %q: %v", body, err)
	}
	return aws.ToString(out.MessageId)
}

// sendFIFO sends body in group to a FIFO queue, deduplicated by its body.
func sendFIFO(t *testing.T, api sqsAPI, url, group, body string) string {
	t.Helper()
	out, err := api.SendMessage(context.Background(), &sqs.SendMessageInput{
		QueueUrl: aws.String(url), MessageBody: aws.String(body),
		MessageGroupId: aws.String(group), MessageDeduplicationId: aws.String(body),
	})
	if err != nil {
		t.Fatalf("send %q: %v", body, err)
	}
	return aws.ToString(out.MessageId)
}

// receive receives up to max messages without waiting.
func receive(t *testing.T, api sqsAPI, url string, max int32) []types.Message {
	t.Helper()
	out, err := api.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(url), MaxNumberOfMessages: max,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		MessageAttributeNames:       []string{"All"},
	})
	if err != nil {
		t.Fatalf("receive: %v", err)
	}
	return out.Messages
}

func bodies(msgs []types.Message) []string {
	out := []string{}
	for _, m := range msgs {
		out = append(out, aws.ToString(m.Body))
	}
	return out
}

// errorCode is the ErrorCode() of err's smithy.APIError, "" for nil and "not an API error:
// ..." for anything else.
func errorCode(err error) string {
	if err == nil {
		return ""
	}
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode()
	}
	return "not an API error: " + err.Error()
}

// inFlightBodies returns the bodies of the queue's messages in flight.
func inFlightBodies(s *Server, url string) []string {
	out := []string{}
	for _, m := range s.Messages(url) {
		if m.InFlight {
			out = append(out, m.Body)
		}
	}
	return out
}
