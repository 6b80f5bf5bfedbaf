package supervisor

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/watchbot/watchbot/internal/setting"
	"github.com/watchbot/watchbot/internal/testing/fakesqs"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// dialects are the two ways SQS names one error, as the SDK reports them in ErrorCode(): the
// query protocol's code (what SQS sends, in the x-amzn-query-error header) and the JSON
// protocol's shape name (a server that sends no such header).
var dialects = []struct {
	name        string
	dialect     fakesqs.Dialect
	notInflight string // MessageNotInflight's ErrorCode()
	noQueue     string // QueueDoesNotExist's ErrorCode()
}{
	{"query protocol codes", fakesqs.QueryCodes, "AWS.SimpleQueueService.MessageNotInflight", "AWS.SimpleQueueService.NonExistentQueue"},
	{"JSON protocol shape names", fakesqs.ShapeCodes, "MessageNotInflight", "QueueDoesNotExist"},
}

// dialectSQS is fakesqs over HTTP in dialect d, reached through the real SDK, with a queue and
// its dead-letter queue.
func dialectSQS(t *testing.T, d fakesqs.Dialect) (*fakesqs.Server, *sqs.Client, testenv.Queue) {
	t.Helper()
	srv := fakesqs.New()
	srv.SetDialect(d)
	endpoint, closeFn, err := srv.Listen()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = closeFn() })
	// One attempt a call: an injected fault reaches the product without the SDK's backoff.
	c := testenv.ClientFor(endpoint, func(o *sqs.Options) { o.RetryMaxAttempts = 1 })
	q, err := testenv.CreateQueue(t.Context(), c, "jobs", testenv.QueueOptions{MaxReceiveCount: 3})
	if err != nil {
		t.Fatal(err)
	}
	return srv, c, q
}

// Each path that decides by an SQS error decides the same whichever name SQS gives it: a
// renewal or a delete whose handle no longer holds the message, alone and in a batch, is a
// lost lease; a server fault is not; a queue or dead-letter queue that does not exist is a
// setting refused at startup (exit 2), not an unreachable service.
func TestSQSErrorDialects(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(d.name, func(t *testing.T) {
			srv, c, q := dialectSQS(t, d.dialect)
			ctx := t.Context()
			if _, err := testenv.Send(ctx, c, q.URL, []string{"a", "b"}, nil); err != nil {
				t.Fatal(err)
			}
			out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.URL), MaxNumberOfMessages: 10})
			if err != nil || len(out.Messages) != 2 {
				t.Fatalf("receive: %v, %d messages", err, len(out.Messages))
			}
			// returned is a handle whose message is visible again: no longer in flight.
			returned, held := aws.ToString(out.Messages[0].ReceiptHandle), aws.ToString(out.Messages[1].ReceiptHandle)
			if _, err := c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(q.URL), ReceiptHandle: aws.String(returned)}); err != nil {
				t.Fatal(err)
			}

			a := newAcker(c, q.URL, time.Millisecond, 10*time.Second, nil, nil)
			send := func(ops ...ackOp) []error {
				for i := range ops {
					ops[i].done = make(chan error, 1)
				}
				a.send(ctx, ops[0].kind, ops)
				errs := make([]error, len(ops))
				for i, op := range ops {
					errs[i] = <-op.done
				}
				return errs
			}
			renew := func(handle string) ackOp { return ackOp{kind: ackVisibility, handle: handle, visibility: 30} }
			del := func(handle string) ackOp { return ackOp{kind: ackDelete, handle: handle} }
			tests := []struct {
				name     string
				ops      []ackOp
				gone     []bool
				code     string // the first error's ErrorCode(), when it shows the dialect
				injected string // an operation failed with InternalFailure first
			}{
				{"renewal of a message no longer in flight", []ackOp{renew(returned)}, []bool{true}, d.notInflight, ""},
				{"renewals in a batch", []ackOp{renew(returned), renew("never-issued"), renew(held)}, []bool{true, true, false}, d.notInflight, ""},
				{"delete of a handle never issued", []ackOp{del("never-issued")}, []bool{true}, "ReceiptHandleIsInvalid", ""},
				{"deletes in a batch", []ackOp{del("never-issued"), del("never-issued-either")}, []bool{true, true}, "ReceiptHandleIsInvalid", ""},
				{"a server fault", []ackOp{renew(held)}, []bool{false}, "InternalFailure", "ChangeMessageVisibility"},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					if tt.injected != "" {
						srv.Fail(tt.injected, 1, fakesqs.Before)
					}
					errs := send(tt.ops...)
					for i, err := range errs {
						if got := leaseGone(err); got != tt.gone[i] {
							t.Errorf("op %d: leaseGone(%v) = %v, want %v", i, err, got, tt.gone[i])
						}
					}
					var api smithy.APIError
					if !errors.As(errs[0], &api) || api.ErrorCode() != tt.code {
						t.Errorf("the first error %v has ErrorCode() %q, want %q: the dialect is not the one under test", errs[0], codeOf(errs[0]), tt.code)
					}
				})
			}

			t.Run("startup", func(t *testing.T) {
				missing := strings.TrimSuffix(q.URL, "jobs") + "no-such-queue"
				_, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(missing)})
				if code := codeOf(err); code != d.noQueue {
					t.Fatalf("GetQueueAttributes of a missing queue: ErrorCode() %q, want %q", code, d.noQueue)
				}
				for _, tt := range []struct {
					name string
					api  sqsAPI
					url  string
					want string
				}{
					{"missing queue", c, missing, "queue " + missing + " does not exist: check its name, account and region in the URL"},
					{"missing dead-letter queue", missingDLQ{c}, q.URL, "QueueURL: the dead-letter queue that the queue's redrive policy names (" + q.DLQARN + ") does not exist"},
				} {
					cfg := DefaultConfig()
					cfg.QueueURL, cfg.Command, cfg.TempDir = tt.url, []string{"true"}, t.TempDir()
					err := Run(ctx, cfg, Deps{SQS: tt.api})
					var refused setting.Error
					if !errors.As(err, &refused) || refused.Err != nil || !strings.Contains(err.Error(), tt.want) {
						t.Errorf("%s: Run = %v; want a refused setting (exit 2) saying %q", tt.name, err, tt.want)
					}
				}
			})
		})
	}
}

// codeOf is err's ErrorCode(), or "" when err is no API error.
func codeOf(err error) string {
	var api smithy.APIError
	if errors.As(err, &api) {
		return api.ErrorCode()
	}
	return ""
}

// missingDLQ looks up every queue by a name that does not exist, as when the dead-letter queue
// a redrive policy names was deleted.
type missingDLQ struct{ sqsAPI }

func (m missingDLQ) GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, opts ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error) {
	in.QueueName = aws.String("deleted-dlq")
	return m.sqsAPI.GetQueueUrl(ctx, in, opts...)
}
