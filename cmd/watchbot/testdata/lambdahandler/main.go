// Command lambdahandler is an SQS handler on aws-lambda-go, unmodified, for the tests of
// listen --lambda. It writes what it sees to $HANDLER_DIR and answers by each body's first
// word:
//
//	ok        success
//	fail-once reported in batchItemFailures on its first receive
//	error     the handler returns an error on its first receive (the whole batch fails)
//	unknown   batchItemFailures names a record not in the batch, on its first receive
//	crash     the process exits mid-invocation on its first receive
//	timeout   sleeps an hour on its first receive
//	sleep D   sleeps D (a Go duration)
//
// While $HANDLER_DIR/fail-init exists, a runtime exits before asking for work: its init fails.
// Without HANDLER_DIR (make bench) it returns at once, every record done.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
)

// Invocation is one line of $HANDLER_DIR/invocations-PID.jsonl, written as it starts.
type Invocation struct {
	PID         int               `json:"pid"`
	RequestID   string            `json:"requestId"`
	FunctionARN string            `json:"functionArn"`
	Deadline    time.Time         `json:"deadline"`
	TraceID     string            `json:"traceId"`
	Start       time.Time         `json:"start"`
	Event       events.SQSEvent   `json:"event"`
	Env         map[string]string `json:"env"`
}

var dir = os.Getenv("HANDLER_DIR")

func handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	if dir == "" {
		return events.SQSEventResponse{}, nil // the bench's: every record done, at once
	}
	lc, _ := lambdacontext.FromContext(ctx)
	deadline, _ := ctx.Deadline()
	inv := Invocation{PID: os.Getpid(), Deadline: deadline, Start: time.Now(), Event: ev, TraceID: os.Getenv("_X_AMZN_TRACE_ID"), Env: map[string]string{}}
	if lc != nil {
		inv.RequestID, inv.FunctionARN = lc.AwsRequestID, lc.InvokedFunctionArn
	}
	for _, name := range []string{"AWS_LAMBDA_FUNCTION_NAME", "AWS_LAMBDA_FUNCTION_VERSION", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
		"AWS_LAMBDA_LOG_GROUP_NAME", "AWS_LAMBDA_LOG_STREAM_NAME", "AWS_REGION", "LAMBDA_TASK_ROOT", "_HANDLER", "AWS_LAMBDA_RUNTIME_API"} {
		inv.Env[name] = os.Getenv(name)
	}
	appendLine(fmt.Sprintf("invocations-%d.jsonl", os.Getpid()), inv)
	var resp events.SQSEventResponse
	for _, r := range ev.Records {
		first := r.Attributes["ApproximateReceiveCount"] == "1"
		word, arg, _ := strings.Cut(r.Body, " ")
		switch {
		case word == "fail-once" && first:
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: r.MessageId})
		case word == "error" && first:
			return resp, errors.New("the handler failed")
		case word == "unknown" && first:
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: "not-in-the-batch"})
		case word == "crash" && first:
			os.Exit(7)
		case word == "timeout" && first:
			time.Sleep(time.Hour)
		case word == "sleep":
			d, _ := time.ParseDuration(strings.Fields(arg)[0])
			time.Sleep(d)
		}
	}
	return resp, nil
}

func appendLine(name string, v any) {
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		panic(err)
	}
	defer f.Close()
	b, _ := json.Marshal(v)
	if _, err := f.Write(append(b, '\n')); err != nil {
		panic(err)
	}
}

func main() {
	if _, err := os.Stat(filepath.Join(dir, "fail-init")); dir != "" && err == nil {
		os.Exit(3)
	}
	lambda.StartWithOptions(handle, lambda.WithEnableSIGTERM(func() {
		if dir != "" { // the bench's runtimes write nothing
			appendLine(fmt.Sprintf("sigterm-%d", os.Getpid()), time.Now())
		}
	}))
}
