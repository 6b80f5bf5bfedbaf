// Package reqbody keeps the AWS SDK from cutting the connection a response is still being read
// from.
//
// smithy-go's ClientHandler (transport/http/client.go) closes the request body as soon as
// http.Client.Do returns, which net/http allows ("the Body may be closed asynchronously after
// Do returns"). But the Transport's writing goroutine reads a body once more after its
// Content-Length bytes, to check nothing is left; when that read comes after the close, the
// SDK's body (safeWriteToReadCloser, transport/http/internal/io/safe.go) answers WriteTo with
// io.EOF as an error, and the Transport closes the connection the response is being read from.
// The SDK then retries the call ("use of closed network connection", aws/aws-sdk-go-v2#2737,
// retried since #2949), and a retried ReceiveMessage loses the messages its first attempt
// took: they stay invisible for their visibility timeout with nobody holding them.
//
// HTTPClient hands the Transport an in-memory copy of each request body, whose last read ends
// cleanly whatever the SDK closes; the bytes sent, signing and retries are unchanged, and the
// headers and body go out in one write. It can go once smithy-go no longer closes the body
// before the response is read, or its body answers a WriteTo after Close without an error:
// TestWithoutGuardTheSDKCutsTheConnection then fails.
package reqbody

import (
	"bytes"
	"io"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
)

// HTTPClient returns next, handing it every request body of known length as bytes in memory.
// Use it as aws.Config.HTTPClient, so that every client built from the configuration has it.
// A nil next stands for the SDK's default client: config.LoadDefaultConfig leaves
// aws.Config.HTTPClient nil unless something (such as AWS_CA_BUNDLE) makes it build one, and
// each service client then builds its own awshttp.NewBuildableClient.
func HTTPClient(next aws.HTTPClient) aws.HTTPClient {
	if next == nil {
		next = awshttp.NewBuildableClient()
	}
	return client{next}
}

type client struct{ next aws.HTTPClient }

func (c client) Do(req *http.Request) (*http.Response, error) {
	if req.Body == nil || req.Body == http.NoBody || req.ContentLength <= 0 {
		return c.next.Do(req)
	}
	body := make([]byte, req.ContentLength)
	_, err := io.ReadFull(req.Body, body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return c.next.Do(req)
}

// Guarded reports whether c is an HTTPClient of this package's.
func Guarded(c aws.HTTPClient) bool {
	_, ok := c.(client)
	return ok
}

// Unguarded returns the client c hands requests to when c is one of this package's, and c
// otherwise. A client that uploads large objects uses it: copying a body of hundreds of MiB into
// memory would defeat streaming it from a file, and such a call, unlike a ReceiveMessage, loses
// nothing when it is retried.
func Unguarded(c aws.HTTPClient) aws.HTTPClient {
	if g, ok := c.(client); ok {
		return g.next
	}
	return c
}
