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
// APIOption hides WriteTo from the Transport: the request stream handed to the SDK's HTTP handler
// offers only Read and Seek, so the SDK wraps it in its plain Read-only closer and the Transport's
// last check, when it comes after the SDK's close, sees a clean end of body. Nothing else changes:
// the bytes sent, their length, signing, and rewinding the stream for a retry.
package reqbody

import (
	"context"
	"io"

	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// APIOption adds the middleware to an operation's stack. Use it in aws.Config.APIOptions so
// that every client built from the configuration gets it.
func APIOption(stack *middleware.Stack) error {
	return stack.Finalize.Add(readOnlyStream{}, middleware.After)
}

type readOnlyStream struct{}

// ID names the middleware in the stack.
func (readOnlyStream) ID() string { return "WatchbotReadOnlyRequestStream" }

// HandleFinalize runs last before the HTTP handler, on every attempt, after signing has read
// (and rewound) the stream.
func (readOnlyStream) HandleFinalize(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (
	middleware.FinalizeOutput, middleware.Metadata, error,
) {
	req, ok := in.Request.(*smithyhttp.Request)
	if !ok {
		return next.HandleFinalize(ctx, in)
	}
	stream := req.GetStream()
	if _, ok := stream.(io.WriterTo); !ok {
		return next.HandleFinalize(ctx, in)
	}
	rs, ok := stream.(io.ReadSeeker)
	if !ok {
		return next.HandleFinalize(ctx, in) // not seen with SQS or CloudWatch: their bodies are byte readers
	}
	// SetStream returns a copy, so the request the retry loop keeps (and rewinds) is untouched.
	wrapped, err := req.SetStream(readSeeker{rs})
	if err != nil {
		return middleware.FinalizeOutput{}, middleware.Metadata{}, err
	}
	in.Request = wrapped
	return next.HandleFinalize(ctx, in)
}

// readSeeker exposes Read and Seek only, so neither io.NopCloser nor the SDK's closer wrapper
// finds a WriteTo on it.
type readSeeker struct{ r io.ReadSeeker }

func (s readSeeker) Read(p []byte) (int, error)                { return s.r.Read(p) }
func (s readSeeker) Seek(off int64, whence int) (int64, error) { return s.r.Seek(off, whence) }
