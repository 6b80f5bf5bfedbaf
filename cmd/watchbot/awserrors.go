package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/urfave/cli/v2"

	"github.com/watchbot/watchbot/internal/awsenv"
)

// withSQSEndpoint sets opts.Endpoint as awsenv.SQSEndpoint decides, logging when it comes from
// the queue URL; a queue URL that is not AWS's and has no endpoint is bad usage.
func withSQSEndpoint(opts *awsenv.Options, log *slog.Logger) error {
	endpoint, fromURL, err := awsenv.SQSEndpoint(*opts, os.Getenv)
	if err != nil {
		return usagef("--queue-url %s: %v", opts.QueueURL, err)
	}
	opts.Endpoint = endpoint
	if fromURL && log != nil {
		log.Info("SQS endpoint taken from the queue URL, whose host is a loopback address (--endpoint-url sets another)", "endpoint", endpoint)
	}
	return nil
}

// explainAWS turns the AWS errors a user fixes by changing the command or its environment into
// one line naming the queue and the fix: a queue that does not exist and credentials missing or
// refused are bad usage (exit 2); a permission refused to an operator's command is not (exit 1),
// the command being right. (listen refuses a queue it may not read at its start itself.)
func explainAWS(err error, queueURL string) error {
	if err == nil {
		return nil
	}
	var u usageError
	if errors.As(err, &u) {
		return err
	}
	queue := "the queue"
	if queueURL != "" {
		queue = "queue " + queueURL
	}
	// The SDK gives a missing queue this type whichever of its two names SQS answers with
	// (QueueDoesNotExist, or the query protocol's AWS.SimpleQueueService.NonExistentQueue).
	var missing *types.QueueDoesNotExist
	if errors.As(err, &missing) {
		return usagef("%s does not exist: check its name, account and region in the URL (and --endpoint-url for an emulator)", queue)
	}
	// No answer at all: the endpoint is wrong, or nothing listens there. The SDK has retried.
	var send *smithyhttp.RequestSendError
	if errors.As(err, &send) {
		return fmt.Errorf("%s: SQS could not be reached (%v): check --endpoint-url or AWS_ENDPOINT_URL_SQS, the network, and for an emulator that it runs", queue, rootCause(send))
	}
	if _, ok := awsenv.Denied(err); ok {
		var api smithy.APIError
		errors.As(err, &api)
		return fmt.Errorf("%s: permission denied (%s): grant the credentials in use the SQS actions listed in docs/operator-tools.md#iam-permissions, or use others (AWS_PROFILE)", queue, api.ErrorMessage())
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "InvalidClientTokenId", "UnrecognizedClientException", "SignatureDoesNotMatch", "InvalidAccessKeyId", "ExpiredToken":
			return usagef("%s: AWS refused the credentials (%s): check AWS_PROFILE or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or renew them", queue, api.ErrorCode())
		}
	}
	if msg := err.Error(); strings.Contains(msg, "failed to refresh cached credentials") || strings.Contains(msg, "get identity: get credentials") {
		return usagef("%s: no AWS credentials found: set AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or run where a role provides them (an emulator takes any, such as test/test)", queue)
	}
	return err
}

// rootCause is the innermost error err wraps, such as "dial tcp 127.0.0.1:9: connect:
// connection refused" under the SDK's layers of context.
func rootCause(err error) error {
	for {
		var op *net.OpError
		if errors.As(err, &op) {
			return op
		}
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}

// explained runs action and explains the AWS errors it returns, naming the queue its flags give;
// an action a signal cancelled is interrupted (exit 130), not a failure.
func explained(action cli.ActionFunc) cli.ActionFunc {
	return func(c *cli.Context) error {
		err := action(c)
		if err == nil {
			return nil
		}
		var stop interrupted
		if errors.Is(err, context.Canceled) && c.Context.Err() != nil && !errors.As(err, &stop) {
			// The walks give back what they hold before they return, whatever stopped them.
			return interrupted{"stopped by a signal; nothing it held is left in flight"}
		}
		queue := cmp.Or(opFlag(c, "dlq-url"), opFlag(c, "queue-url"), c.String("queue-url"), queueURLFromEnv())
		return explainAWS(err, queue)
	}
}
