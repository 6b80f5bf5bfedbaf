// Package reqbody keeps the AWS SDK from cutting the connection a response is still being read
// from.
//
// The SDK's HTTP handler (smithy-go's ClientHandler) closes the request body as soon as
// http.Client.Do returns, that is as soon as the response headers are in. net/http's Transport
// writes the request in a goroutine of its own, and after it has sent the Content-Length bytes of
// a body it reads the body once more to check that nothing is left over (transferWriter.writeBody).
// By then the request is on the wire (the headers are flushed first and the body is written
// straight to the connection), so the server may already have answered. When that goroutine runs
// late (a loaded machine, a short round trip), it makes this last read after the SDK's close.
// The SDK's body (smithy-go's safeWriteToReadCloser) answers a WriteTo after Close with the error
// io.EOF instead of "nothing more", the Transport takes that for a failed write, and closes the
// connection, while the caller is reading the response body from it. The body read then fails
// with "use of closed network connection", which the SDK logs ("failed to discard remaining HTTP
// response body") and retries. For ReceiveMessage that retry is not harmless: SQS has already
// handed the first attempt's messages out, so they stay invisible for the visibility timeout and
// nobody holds their receipt handles (Amazon SQS Developer Guide, "Amazon SQS visibility timeout").
//
// net/http's documentation allows this ordering: "The request Body, if non-nil, will be closed by
// the underlying Transport, even on errors. The Body may be closed asynchronously after Do
// returns" (http.Client.Do), and a RoundTripper's caller "should not mutate or reuse the request
// until the Response's Body has been closed" (http.RoundTripper). The SDK's early close is the
// part that breaks the rule; its body wrapper makes the break fatal only through WriteTo, because
// a plain Read after Close reports io.EOF, which the Transport's check accepts as "no extra bytes".
//
// HTTPClient fixes this where it starts: it reads the request body (the SDK has it in memory
// already, serialized) and hands the Transport a copy of its own, as an in-memory reader. The
// SDK may close its body when it likes; the Transport's last check reads the copy, which ends
// cleanly. Nothing else changes: the bytes sent, their length, signing, and rewinding the
// stream for a retry, which the SDK does on its own stream.
//
// The copy also sends each request in one write. A body net/http does not know to be in memory
// makes the Transport flush the headers first and write the body after them (transferWriter's
// FlushHeaders), so every call cost two writes and two segments on the connection; an
// in-memory body is written with its headers.
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
