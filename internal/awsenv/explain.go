package awsenv

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// Cause is what an SQS call's failure says about the command or its environment.
type Cause int

// The causes ExplainSQS tells apart.
const (
	// CauseNoQueue: SQS, at the endpoint the request went to, knows no such queue.
	CauseNoQueue Cause = iota + 1
	// CauseUnreachable: nothing answered at the endpoint (the SDK has retried).
	CauseUnreachable
	// CauseDenied: the credentials in use may not call the action.
	CauseDenied
	// CauseCredentials: AWS refused the credentials, or none were found.
	CauseCredentials
)

// QueueError is an SQS call's failure told in the user's terms, in one line: the queue, what
// went wrong and what to check. listen at its start and the operator commands explain their
// failures with it alike; each decides its exit code from Cause.
type QueueError struct {
	Cause Cause
	// QueueURL is the queue the call was about.
	QueueURL string
	// Endpoint is where the request went, when that is not the queue URL's own host (an
	// --endpoint-url or AWS_ENDPOINT_URL_SQS naming another emulator, say); "" otherwise.
	Endpoint string
	text     string
	err      error
}

func (e *QueueError) Error() string { return e.text }

// Unwrap returns the SDK's error.
func (e *QueueError) Unwrap() error { return e.err }

// ExplainSQS returns err, from a call about queueURL, as a *QueueError when its cause is one a
// user mends, and nil otherwise (nil included). permissions names the page that lists the
// actions the caller needs (docs/listen.md#iam-permissions for listen).
func ExplainSQS(err error, queueURL, permissions string) *QueueError {
	if err == nil {
		return nil
	}
	if qe, ok := errors.AsType[*QueueError](err); ok {
		return qe
	}
	queue := "the queue"
	if queueURL != "" {
		queue = "queue " + queueURL
	}
	e := &QueueError{QueueURL: queueURL, Endpoint: foreignEndpoint(err, queueURL), err: err}
	// Where requests went, said when it is not the URL's host: then it is the first thing to
	// check.
	at, check := "", "check --endpoint-url or AWS_ENDPOINT_URL_SQS"
	if e.Endpoint != "" {
		at = " at " + e.Endpoint + ", which is not the URL's host"
		check = "check --endpoint-url and AWS_ENDPOINT_URL_SQS (without either, each queue's requests go to its URL's host)"
	}
	var api smithy.APIError
	errors.As(err, &api)
	switch {
	case errors.As(err, new(*types.QueueDoesNotExist)):
		// The SDK gives a missing queue this type whichever of its two names SQS answers with
		// (QueueDoesNotExist, or the query protocol's AWS.SimpleQueueService.NonExistentQueue).
		e.Cause = CauseNoQueue
		e.text = queue + " does not exist: check its name, account and region in the URL"
		if e.Endpoint != "" {
			e.text = queue + " does not exist" + at + ": " + check + ", then the queue's name, account and region"
		}
	case errors.As(err, new(*smithyhttp.RequestSendError)):
		e.Cause = CauseUnreachable
		e.text = fmt.Sprintf("%s: SQS could not be reached%s (%v): %s, the network, and for an emulator that it runs", queue, at, rootCause(err), check)
	case isDenied(err):
		e.Cause = CauseDenied
		e.text = fmt.Sprintf("%s: permission denied (%s): grant the credentials in use the SQS actions listed in %s, or use others (AWS_PROFILE)", queue, api.ErrorMessage(), permissions)
	case api != nil && refusedCredentials[api.ErrorCode()]:
		e.Cause = CauseCredentials
		e.text = fmt.Sprintf("%s: AWS refused the credentials (%s): check AWS_PROFILE or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or renew them", queue, api.ErrorCode())
	case strings.Contains(err.Error(), "failed to refresh cached credentials") || strings.Contains(err.Error(), "get identity: get credentials"):
		e.Cause = CauseCredentials
		e.text = queue + ": no AWS credentials found: set AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or run where a role provides them (an emulator takes any, such as test/test)"
	default:
		return nil
	}
	return e
}

func isDenied(err error) bool { _, ok := Denied(err); return ok }

// refusedCredentials are the codes AWS answers credentials it does not accept with.
var refusedCredentials = map[string]bool{"InvalidClientTokenId": true, "UnrecognizedClientException": true,
	"SignatureDoesNotMatch": true, "InvalidAccessKeyId": true, "ExpiredToken": true}

// rootCause is the innermost error err wraps, such as "dial tcp 127.0.0.1:9: connect:
// connection refused" under the SDK's layers of context.
func rootCause(err error) error {
	if op, ok := errors.AsType[*net.OpError](err); ok {
		return op
	}
	for next := errors.Unwrap(err); next != nil; next = errors.Unwrap(err) {
		err = next
	}
	return err
}

// foreignEndpoint returns the endpoint err's request went to (from the SDK's response, or the
// HTTP client's error when nothing answered), when its host is not queueURL's own; else "",
// and "" too when queueURL is not known (a command given several queues), whose host no
// endpoint can be said to differ from.
func foreignEndpoint(err error, queueURL string) string {
	var sent string
	if re, ok := errors.AsType[*smithyhttp.ResponseError](err); ok && re.Response != nil && re.Response.Request != nil {
		sent = re.Response.Request.URL.String()
	} else if ue, ok := errors.AsType[*url.Error](err); ok {
		sent = ue.URL
	}
	to, err1 := url.Parse(sent)
	queue, err2 := url.Parse(queueURL)
	if sent == "" || err1 != nil || err2 != nil || to.Host == "" || queue.Host == "" || sameHost(to, queue) {
		return ""
	}
	return to.Scheme + "://" + to.Host
}

// sameHost reports whether a and b name one server: one host, or two names of the loopback
// address, on one port.
func sameHost(a, b *url.URL) bool {
	host := func(u *url.URL) string {
		if lo, ok := loopback(u); ok {
			return lo
		}
		port := u.Port()
		if port == "" {
			port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
		}
		return strings.ToLower(u.Hostname()) + ":" + port
	}
	return host(a) == host(b)
}
