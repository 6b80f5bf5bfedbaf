package testenv

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/internal/reqbody"
)

// config is the SDK configuration of every test client: fixed test credentials and Region,
// and the request-body guard watchbot's own configuration carries (awsenv.Load), so that
// test clients do not lose answers the product would not (see internal/reqbody).
func config() aws.Config {
	return aws.Config{
		Region:      Region,
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
		HTTPClient:  reqbody.HTTPClient(awshttp.NewBuildableClient()),
	}
}

// ClientFor returns a real SQS client that sends every request to endpoint (the emulator,
// fakesqs, or a proxy in front of either) with the test credentials and Region; opts adjust
// it further, e.g. its retryer.
func ClientFor(endpoint string, opts ...func(*sqs.Options)) *sqs.Client {
	return sqs.NewFromConfig(config(), append([]func(*sqs.Options){func(o *sqs.Options) {
		o.BaseEndpoint = aws.String(endpoint)
	}}, opts...)...)
}

// CreateQueue creates the queue name (".fifo" added for a FIFO queue) and, when
// o.MaxReceiveCount > 0, its dead-letter queue name-dlq with the redrive policy. It needs no
// test, so the benchmark creates its queues with it too; tests call Emulator.NewQueue.
func CreateQueue(ctx context.Context, c *sqs.Client, name string, o QueueOptions) (Queue, error) {
	suffix := ""
	attrs := maps.Clone(o.Attributes)
	if attrs == nil {
		attrs = map[string]string{}
	}
	if o.FIFO {
		suffix = ".fifo"
		attrs["FifoQueue"] = "true"
		attrs["ContentBasedDeduplication"] = "true"
	}
	q := Queue{Name: name + suffix}
	if o.MaxReceiveCount > 0 {
		var err error
		if q.DLQURL, q.DLQARN, err = createQueue(ctx, c, name+"-dlq"+suffix, maps.Clone(attrs)); err != nil {
			return Queue{}, err
		}
		attrs["RedrivePolicy"] = fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":"%d"}`, q.DLQARN, o.MaxReceiveCount)
	}
	vis := o.VisibilityTimeout
	if vis == 0 {
		vis = 30 * time.Second
	}
	attrs["VisibilityTimeout"] = strconv.Itoa(int(vis / time.Second))
	var err error
	if q.URL, q.ARN, err = createQueue(ctx, c, q.Name, attrs); err != nil {
		return Queue{}, err
	}
	return q, nil
}

// createQueue creates one queue and returns its URL and ARN.
func createQueue(ctx context.Context, c *sqs.Client, name string, attrs map[string]string) (url, arn string, err error) {
	out, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		return "", "", fmt.Errorf("create queue %s: %w", name, err)
	}
	info, err := queueattr.Describe(ctx, c, aws.ToString(out.QueueUrl))
	if err != nil {
		return "", "", fmt.Errorf("read queue %s: %w", name, err)
	}
	return aws.ToString(out.QueueUrl), info.ARN, nil
}

// Send sends bodies to the queue url in batches of ten and returns their message ids, in the
// order of bodies. With group set, body i goes to the FIFO message group group(i). A standard
// queue takes four batches at once; a FIFO queue's batches go one after another, so each
// group's messages arrive in the order of bodies. Like CreateQueue it needs no test.
func Send(ctx context.Context, c *sqs.Client, url string, bodies []string, group func(i int) string) ([]string, error) {
	ids := make([]string, len(bodies))
	senders := 4
	if strings.HasSuffix(url, ".fifo") {
		senders = 1
	}
	starts := make(chan int)
	errs := make(chan error, senders)
	var wg sync.WaitGroup
	for range senders {
		wg.Go(func() {
			for first := range starts {
				if err := sendBatch(ctx, c, url, bodies, first, group, ids); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	for first := 0; first < len(bodies); first += 10 {
		starts <- first
	}
	close(starts)
	wg.Wait()
	select {
	case err := <-errs:
		return nil, err
	default:
		return ids, nil
	}
}

// sendBatch sends bodies[first:first+10] and records their ids in ids.
func sendBatch(ctx context.Context, c *sqs.Client, url string, bodies []string, first int, group func(int) string, ids []string) error {
	var entries []types.SendMessageBatchRequestEntry
	for i := first; i < min(first+10, len(bodies)); i++ {
		e := types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(bodies[i])}
		if group != nil {
			e.MessageGroupId = aws.String(group(i))
		}
		entries = append(entries, e)
	}
	out, err := c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
	if err != nil {
		return fmt.Errorf("send: %w", err)
	}
	if len(out.Failed) > 0 {
		return fmt.Errorf("send: %d entries failed: %s", len(out.Failed), aws.ToString(out.Failed[0].Message))
	}
	for _, s := range out.Successful {
		i, _ := strconv.Atoi(aws.ToString(s.Id))
		ids[i] = aws.ToString(s.MessageId)
	}
	return nil
}

// Counts are a queue's messages as SQS approximates them.
type Counts struct {
	Visible, InFlight, Delayed int64
}

// Total is every message the queue holds, visible or not.
func (c Counts) Total() int64 { return c.Visible + c.InFlight + c.Delayed }

// Depth reads the queue url's counts with queueattr.Describe, as watchbot does.
func Depth(tb testing.TB, c queueattr.API, url string) Counts {
	tb.Helper()
	info, err := queueattr.Describe(context.Background(), c, url)
	if err != nil {
		tb.Fatalf("queue depth: %v", err)
	}
	return Counts{Visible: info.Visible, InFlight: info.InFlight, Delayed: info.Delayed}
}

// Drain receives and deletes every message of the queue url, with all its attributes, and
// returns them in the order received. It waits up to limit for messages in flight or delayed
// to come back, and reports those still away after it as a test error. What it receives stays
// invisible for only 5 s: when a receive's answer is lost (fauxqs has lost some under load),
// its messages come back within limit; a message received twice is returned once.
func Drain(tb testing.TB, c *sqs.Client, url string, limit time.Duration) []types.Message {
	tb.Helper()
	ctx := context.Background()
	var got []types.Message
	seen := map[string]bool{}
	deadline := time.Now().Add(limit)
	for {
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 10, VisibilityTimeout: 5,
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		if err != nil {
			tb.Fatalf("drain: %v", err)
		}
		for _, m := range out.Messages {
			if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
				tb.Fatalf("drain: delete: %v", err)
			}
			if id := aws.ToString(m.MessageId); !seen[id] {
				seen[id] = true
				got = append(got, m)
			}
		}
		if len(out.Messages) > 0 {
			continue
		}
		left := Depth(tb, c, url).Total()
		if left == 0 {
			return got
		}
		if time.Now().After(deadline) {
			tb.Errorf("drain: %d messages still in flight or delayed after %v", left, limit)
			return got
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Letter is a message for DeadLetter. Its Attributes are the message's own plus its
// dead-letter cause, written by dlqattr.With as the supervisor writes them (testenv
// cannot call it: the tests of deadletter and of the packages it imports use testenv).
type Letter struct {
	Body       string
	Attributes map[string]types.MessageAttributeValue
	// Group is the MessageGroupId, required by a FIFO DLQ.
	Group string
}

// DeadLetter sends letters straight into q's dead-letter queue, as the supervisor sends a
// message there.
func DeadLetter(tb testing.TB, c *sqs.Client, q Queue, letters ...Letter) {
	tb.Helper()
	for i, l := range letters {
		in := &sqs.SendMessageInput{QueueUrl: aws.String(q.DLQURL), MessageBody: aws.String(l.Body), MessageAttributes: l.Attributes}
		if l.Group != "" {
			in.MessageGroupId = aws.String(l.Group)
		}
		if _, err := c.SendMessage(context.Background(), in); err != nil {
			tb.Fatalf("dead-letter message %d: %v", i, err)
		}
	}
}
