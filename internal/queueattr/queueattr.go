// Package queueattr reads what watchbot needs to know about an SQS queue: its attributes, its
// redrive policy and the dead-letter queue that policy names. Every command that touches a
// queue (listen, dead-letter, status) shares it, so they agree on what a queue's settings mean.
package queueattr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/internal/sqsspec"
)

// API is the part of the SQS client this package calls.
type API interface {
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
	GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, opts ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error)
}

var _ API = (*sqs.Client)(nil)

// ErrNoRedrivePolicy is returned by DeadLetterQueue when the queue has no redrive policy.
var ErrNoRedrivePolicy = errors.New("queue has no redrive policy")

// RedrivePolicy is a queue's RedrivePolicy attribute.
type RedrivePolicy struct {
	DeadLetterTargetARN string `json:"deadLetterTargetArn"`
	MaxReceiveCount     int    `json:"maxReceiveCount"`
}

// ParseRedrivePolicy parses the RedrivePolicy attribute. SQS writes maxReceiveCount as a
// number or as a string, depending on who set it; both are accepted.
func ParseRedrivePolicy(s string) (RedrivePolicy, error) {
	var raw struct {
		DeadLetterTargetARN string          `json:"deadLetterTargetArn"`
		MaxReceiveCount     json.RawMessage `json:"maxReceiveCount"`
	}
	if err := json.Unmarshal([]byte(s), &raw); err != nil {
		return RedrivePolicy{}, fmt.Errorf("parse redrive policy: %w", err)
	}
	if raw.DeadLetterTargetARN == "" {
		return RedrivePolicy{}, errors.New("parse redrive policy: deadLetterTargetArn is missing")
	}
	n, err := strconv.Atoi(strings.Trim(string(raw.MaxReceiveCount), `"`))
	if err != nil || n < 1 {
		return RedrivePolicy{}, fmt.Errorf("parse redrive policy: maxReceiveCount %s is not a positive integer", raw.MaxReceiveCount)
	}
	return RedrivePolicy{DeadLetterTargetARN: raw.DeadLetterTargetARN, MaxReceiveCount: n}, nil
}

// Info is what watchbot reads from GetQueueAttributes.
type Info struct {
	URL                string
	ARN                string
	VisibilityTimeout  time.Duration
	MaximumMessageSize int
	RetentionPeriod    time.Duration
	FIFO               bool
	Redrive            *RedrivePolicy // nil when the queue has none
	Visible            int64
	InFlight           int64
	Delayed            int64
}

// Describe reads a queue's attributes. A queue that does not exist or cannot be reached is an
// error that names the URL.
func Describe(ctx context.Context, api API, queueURL string) (Info, error) {
	out, err := api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(queueURL),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll},
	})
	if err != nil {
		return Info{}, fmt.Errorf("read attributes of %s: %w", queueURL, err)
	}
	return parseInfo(queueURL, out.Attributes)
}

func parseInfo(queueURL string, attrs map[string]string) (Info, error) {
	info := Info{URL: queueURL, ARN: attrs["QueueArn"], FIFO: attrs["FifoQueue"] == "true"}
	seconds := func(name string) time.Duration {
		n, _ := strconv.ParseInt(attrs[name], 10, 64)
		return time.Duration(n) * time.Second
	}
	count := func(name string) int64 {
		n, _ := strconv.ParseInt(attrs[name], 10, 64)
		return n
	}
	info.VisibilityTimeout = seconds("VisibilityTimeout")
	info.RetentionPeriod = seconds("MessageRetentionPeriod")
	info.MaximumMessageSize = int(count("MaximumMessageSize"))
	if info.MaximumMessageSize == 0 {
		info.MaximumMessageSize = sqsspec.MaxMessageSize
	}
	info.Visible = count("ApproximateNumberOfMessages")
	info.InFlight = count("ApproximateNumberOfMessagesNotVisible")
	info.Delayed = count("ApproximateNumberOfMessagesDelayed")
	if s := attrs["RedrivePolicy"]; s != "" {
		p, err := ParseRedrivePolicy(s)
		if err != nil {
			return Info{}, fmt.Errorf("queue %s: %w", queueURL, err)
		}
		info.Redrive = &p
	}
	return info, nil
}

// DeadLetterQueue returns the URL of the queue named by info's redrive policy.
func DeadLetterQueue(ctx context.Context, api API, info Info) (string, error) {
	if info.Redrive == nil {
		return "", fmt.Errorf("%s: %w", info.URL, ErrNoRedrivePolicy)
	}
	arn, err := ParseARN(info.Redrive.DeadLetterTargetARN)
	if err != nil {
		return "", err
	}
	in := &sqs.GetQueueUrlInput{QueueName: aws.String(arn.Resource)}
	if arn.Account != "" {
		in.QueueOwnerAWSAccountId = aws.String(arn.Account)
	}
	out, err := api.GetQueueUrl(ctx, in)
	if err != nil {
		return "", fmt.Errorf("find dead-letter queue %s: %w", arn.Resource, err)
	}
	return aws.ToString(out.QueueUrl), nil
}

// DescribeDeadLetterQueue reads the attributes of the queue named by info's redrive policy.
func DescribeDeadLetterQueue(ctx context.Context, api API, info Info) (Info, error) {
	url, err := DeadLetterQueue(ctx, api, info)
	if err != nil {
		return Info{}, err
	}
	return Describe(ctx, api, url)
}

// ARN is a parsed Amazon Resource Name.
type ARN struct {
	Partition, Service, Region, Account, Resource string
}

// ParseARN splits "arn:partition:service:region:account:resource".
func ParseARN(s string) (ARN, error) {
	parts := strings.SplitN(s, ":", 6)
	if len(parts) != 6 || parts[0] != "arn" || parts[5] == "" {
		return ARN{}, fmt.Errorf("%q is not an ARN", s)
	}
	return ARN{Partition: parts[1], Service: parts[2], Region: parts[3], Account: parts[4], Resource: parts[5]}, nil
}

// NameFromURL returns the queue name, the last path segment of a queue URL.
func NameFromURL(queueURL string) string {
	u, err := url.Parse(queueURL)
	if err != nil || u.Path == "" {
		return queueURL
	}
	return u.Path[strings.LastIndex(u.Path, "/")+1:]
}

// RegionFromURL returns the region of an AWS queue URL such as
// https://sqs.eu-west-1.amazonaws.com/123456789012/jobs, or "" when the URL does not name one.
func RegionFromURL(queueURL string) string {
	u, err := url.Parse(queueURL)
	if err != nil {
		return ""
	}
	labels := strings.Split(u.Hostname(), ".")
	if len(labels) >= 3 && labels[0] == "sqs" {
		return labels[1]
	}
	return ""
}

// ValidateURL checks that s looks like a queue URL: absolute http(s) with a queue name.
func ValidateURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("%q is not a queue URL (want https://sqs.REGION.amazonaws.com/ACCOUNT/NAME)", s)
	}
	if NameFromURL(s) == "" {
		return fmt.Errorf("%q names no queue", s)
	}
	return nil
}
