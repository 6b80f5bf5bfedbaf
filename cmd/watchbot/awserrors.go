package main

import (
	"cmp"
	"context"
	"errors"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/watchbot/watchbot/internal/awsenv"
)

// noQueueGiven is the answer to a command given no queue, listen's and the operator commands'
// alike.
func noQueueGiven(c *cli.Context) error {
	return usagef("give the queue: --queue-url URL, or WATCHBOT_QUEUE_URL in the environment (watchbot %s --help shows every flag)", c.Command.FullName())
}

// explainAWS turns the AWS errors a user fixes by changing the command or its environment into
// one line naming the queue and the fix (awsenv.ExplainSQS, which listen's startup check uses
// too): a queue that does not exist and credentials missing or refused are bad usage (exit 2);
// a permission refused to an operator's command is not (exit 1), the command being right.
// (listen refuses a queue it may not read at its start itself.)
func explainAWS(err error, queueURL string) error {
	if _, ok := errors.AsType[usageError](err); ok {
		return err
	}
	if _, ok := errors.AsType[*awsenv.QueueError](err); ok {
		return err // explained already, by listen's startup check, in an error of its exit code
	}
	qe := awsenv.ExplainSQS(err, queueURL, "docs/operator-tools.md#iam-permissions")
	switch {
	case qe == nil:
		return err
	case qe.Cause == awsenv.CauseNoQueue, qe.Cause == awsenv.CauseCredentials:
		return usageError{qe}
	}
	return qe
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
		if strings.ContainsAny(queue, " ,") {
			// Several queues (status's --queue-url repeated, a list): a command names the one a
			// failure is about itself; "the queue" is said here.
			queue = ""
		}
		return explainAWS(err, queue)
	}
}
