package reqbody_test

import (
	"context"
	"fmt"
	"net/http/httptrace"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go/logging"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/watchbot/watchbot/internal/testing/testenv"
)

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// TestStressDeadLetterWalks walks DLQs the way deadletter's scanner does (receive up to 10 with a
// hold until the queue answers empty, then release) from many goroutines through shared clients
// against one emulator, with busy goroutines loading the CPU, and counts what the race of package
// reqbody costs: request writes the Transport reported failed (each one cuts a connection) and
// walks that saw fewer messages than the queue holds (a receive answer lost, its messages hidden).
//
//	WATCHBOT_STRESS=1 go test -race -run StressDeadLetterWalks -v ./internal/reqbody/
//
// WATCHBOT_STRESS_NO_GUARD=1 builds the clients without HTTPClient, as before it existed.
// STRESS_WORKERS (8), STRESS_ROUNDS (20), STRESS_BURNERS (2 per CPU) and STRESS_BODY_BYTES (about
// 600 per message; larger answers take longer to read, which widens the race) size the run.
func TestStressDeadLetterWalks(t *testing.T) {
	if os.Getenv("WATCHBOT_STRESS") == "" {
		t.Skip("a stress run: set WATCHBOT_STRESS=1")
	}
	emu := testenv.SQS(t)
	workers, rounds := envInt("STRESS_WORKERS", 8), envInt("STRESS_ROUNDS", 20)
	guarded := os.Getenv("WATCHBOT_STRESS_NO_GUARD") == ""

	var writeErrs, warnings, retries, walks, short atomic.Int64
	var firstWarn sync.Once
	logger := logging.LoggerFunc(func(c logging.Classification, format string, v ...any) {
		if c == logging.Warn {
			warnings.Add(1)
			firstWarn.Do(func() { t.Logf("SDK WARN %s", fmt.Sprintf(format, v...)) })
		}
	})
	countRetries := middleware.DeserializeMiddlewareFunc("countRetries", func(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (middleware.DeserializeOutput, middleware.Metadata, error) {
		if req, ok := in.Request.(*smithyhttp.Request); ok && !strings.HasPrefix(req.Header.Get("Amz-Sdk-Request"), "attempt=1;") {
			retries.Add(1)
		}
		return next.HandleDeserialize(ctx, in)
	})
	// Test clients carry the guard (testenv.ClientFor); without it, as before it existed.
	configure := func(o *sqs.Options) {
		if !guarded {
			o.HTTPClient = awshttp.NewBuildableClient()
		}
		o.Logger = logger
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error { return s.Deserialize.Add(countRetries, middleware.Before) })
	}
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) {
			if i.Err != nil {
				writeErrs.Add(1)
			}
		},
	})

	stop := make(chan struct{})
	var burners sync.WaitGroup
	for range envInt("STRESS_BURNERS", 2) * runtime.NumCPU() {
		burners.Add(1)
		go func() {
			defer burners.Done()
			for x := 0; ; x++ {
				select {
				case <-stop:
					return
				default:
				}
				for i := range 200_000 {
					x ^= i
				}
			}
		}()
	}

	const n = 25
	pad := strings.Repeat("ü", envInt("STRESS_BODY_BYTES", 600)/2)
	// Two workers share each client, as goroutines of the CLI and of the supervisor do.
	clients := make([]*sqs.Client, (workers+1)/2)
	for i := range clients {
		clients[i] = testenv.ClientFor(emu.Endpoint, configure)
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clients[w/2]
			fill := func() string {
				q := emu.NewQueue(t, testenv.QueueOptions{})
				for start := 0; start < n; start += 10 {
					var entries []types.SendMessageBatchRequestEntry
					for i := start; i < min(start+10, n); i++ {
						entries = append(entries, types.SendMessageBatchRequestEntry{
							Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(fmt.Sprintf("job %d — %s", i, pad)),
							MessageAttributes: map[string]types.MessageAttributeValue{"kind": {DataType: aws.String("String"), StringValue: aws.String("ok")}},
						})
					}
					if _, err := c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(q.URL), Entries: entries}); err != nil {
						t.Errorf("fill: %v", err)
					}
				}
				return q.URL
			}
			url := fill()
			for r := range rounds {
				var handles []string
				for {
					out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
						QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 300,
						MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
						MessageAttributeNames:       []string{"All"},
					})
					if err != nil {
						t.Errorf("worker %d: receive: %v", w, err)
						return
					}
					if len(out.Messages) == 0 {
						break
					}
					for _, m := range out.Messages {
						handles = append(handles, aws.ToString(m.ReceiptHandle))
					}
				}
				walks.Add(1)
				if len(handles) != n {
					short.Add(1)
					t.Logf("worker %d round %d: the walk saw %d of %d messages", w, r, len(handles), n)
					url = fill() // the lost ones stay hidden for the hold: start afresh
					continue
				}
				for start := 0; start < n; start += 10 {
					var entries []types.ChangeMessageVisibilityBatchRequestEntry
					for i, h := range handles[start:min(start+10, n)] {
						entries = append(entries, types.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(h)})
					}
					if _, err := c.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(url), Entries: entries}); err != nil {
						t.Errorf("worker %d: release: %v", w, err)
					}
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	burners.Wait()
	t.Logf("guarded=%v: %d walks, %d short (answers lost); %d request writes failed (connections cut), %d SDK retries, %d SDK warnings",
		guarded, walks.Load(), short.Load(), writeErrs.Load(), retries.Load(), warnings.Load())
	if short.Load() > 0 || writeErrs.Load() > 0 {
		t.Errorf("%d of %d walks lost a receive answer; %d request writes failed", short.Load(), walks.Load(), writeErrs.Load())
	}
}
