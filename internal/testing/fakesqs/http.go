package fakesqs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// maxRequestBody bounds what the HTTP face reads of one request: a full batch of 1 MiB
// messages, JSON-escaped, fits.
const maxRequestBody = 8 << 20

// operation decodes one operation's JSON input and runs it on the Server.
type operation func(s *Server, ctx context.Context, body []byte) (any, error)

// serve adapts a Server method to the HTTP face: the request body decodes into the SDK's own
// input type, whose field names are the API's member names.
func serve[In, Out any](method func(*Server, context.Context, *In, ...func(*sqs.Options)) (*Out, error)) operation {
	return func(s *Server, ctx context.Context, body []byte) (any, error) {
		in := new(In)
		if len(bytes.TrimSpace(body)) > 0 {
			if err := json.Unmarshal(body, in); err != nil {
				return nil, errSerializationException.errorf("The request body could not be read: %v", err)
			}
		}
		return method(s, ctx, in)
	}
}

// operations are the SQS operations the Server serves, by the name X-Amz-Target carries.
var operations = map[string]operation{
	"CreateQueue":                  serve((*Server).CreateQueue),
	"GetQueueUrl":                  serve((*Server).GetQueueUrl),
	"GetQueueAttributes":           serve((*Server).GetQueueAttributes),
	"SetQueueAttributes":           serve((*Server).SetQueueAttributes),
	"SendMessage":                  serve((*Server).SendMessage),
	"SendMessageBatch":             serve((*Server).SendMessageBatch),
	"ReceiveMessage":               serve((*Server).ReceiveMessage),
	"DeleteMessage":                serve((*Server).DeleteMessage),
	"DeleteMessageBatch":           serve((*Server).DeleteMessageBatch),
	"ChangeMessageVisibility":      serve((*Server).ChangeMessageVisibility),
	"ChangeMessageVisibilityBatch": serve((*Server).ChangeMessageVisibilityBatch),
	"PurgeQueue":                   serve((*Server).PurgeQueue),
	"ListDeadLetterSourceQueues":   serve((*Server).ListDeadLetterSourceQueues),
}

var requestSeq atomic.Uint64

// ServeHTTP answers SQS requests in the AWS JSON 1.0 protocol as the AWS SDK for Go v2 sends
// them: a POST whose X-Amz-Target header is "AmazonSQS.<Operation>" and whose body is the
// input as JSON. Answers are JSON with the API's member names; errors carry the "__type"
// body field, the x-amzn-query-error header and status 400 (sender) or 500 (receiver), as
// "Interpreting Amazon SQS JSON API responses" describes. Signatures are not checked. Queue
// URLs in answers carry the request's port: http://sqs.us-east-1.localhost:PORT/000000000000/NAME.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("x-amzn-RequestId", "fakesqs-"+strconv.FormatUint(requestSeq.Add(1), 10))
	opName, ok := strings.CutPrefix(r.Header.Get("X-Amz-Target"), "AmazonSQS.")
	op := operations[opName]
	if r.Method != http.MethodPost || !ok || op == nil {
		writeError(w, errInvalidAction.errorf("Unknown operation %q.", r.Header.Get("X-Amz-Target")), false)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBody))
	if err != nil {
		writeError(w, errSerializationException.errorf("The request body could not be read: %v", err), false)
		return
	}
	base := "http://sqs." + region + ".localhost"
	if _, port, err := net.SplitHostPort(r.Host); err == nil {
		base += ":" + port
	}
	shapes := Dialect(s.dialect.Load()) == ShapeCodes
	out, err := op(s, context.WithValue(r.Context(), baseKey{}, base), body)
	if err != nil {
		writeError(w, err, shapes)
		return
	}
	if shapes {
		shapeCoded(out)
	}
	b, err := wireJSON(out)
	if err != nil {
		writeError(w, err, shapes)
		return
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}

// writeError answers err; with shapes, in the ShapeCodes dialect.
func writeError(w http.ResponseWriter, err error, shapes bool) {
	kind, message := wireError(err)
	b, _ := json.Marshal(map[string]string{"__type": "com.amazonaws.sqs#" + kind.shape, "message": message})
	fault := "Sender"
	if kind.status >= 500 {
		fault = "Receiver"
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	if !shapes {
		w.Header().Set("x-amzn-query-error", kind.code+";"+fault)
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(kind.status)
	_, _ = w.Write(b)
}

// shapeCoded gives each failed entry of a batch answer its error's shape's name for Code, as
// in the ShapeCodes dialect.
func shapeCoded(out any) {
	var failed []types.BatchResultErrorEntry
	switch o := out.(type) {
	case *sqs.SendMessageBatchOutput:
		failed = o.Failed
	case *sqs.DeleteMessageBatchOutput:
		failed = o.Failed
	case *sqs.ChangeMessageVisibilityBatchOutput:
		failed = o.Failed
	}
	for i := range failed {
		if k, ok := kindsByCode[aws.ToString(failed[i].Code)]; ok {
			failed[i].Code = aws.String(k.shape)
		}
	}
}

// wireJSON encodes an SDK output as SQS answers it: the members set, under their API names.
// The SDK's types carry the member names as field names, so encoding/json gives them; what
// is left is to drop unset members (nil pointers, maps and slices come out as null), the
// SDK's ResultMetadata, and to spell ListDeadLetterSourceQueues' member "queueUrls" as the
// API does.
func wireJSON(out any) ([]byte, error) {
	b, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v map[string]any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	delete(v, "ResultMetadata")
	if urls, ok := v["QueueUrls"]; ok {
		delete(v, "QueueUrls")
		v["queueUrls"] = urls
	}
	return json.Marshal(prune(v))
}

// prune removes null members from decoded JSON, at every depth.
func prune(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			if x == nil {
				delete(t, k)
				continue
			}
			t[k] = prune(x)
		}
	case []any:
		for i, x := range t {
			t[i] = prune(x)
		}
	}
	return v
}

// Listen serves s over HTTP on a free port of 127.0.0.1 and returns its endpoint
// ("http://127.0.0.1:PORT") and a function that stops it: it ends the long polls in
// progress, waits for the requests being answered (at most 10 s) and for the server's
// goroutine. Calling it again returns the first call's result.
func (s *Server) Listen() (endpoint string, closeFn func() error, err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	base, cancel := context.WithCancel(context.Background())
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return base },
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	closeFn = sync.OnceValue(func() error {
		cancel() // ends every request context, so long polls return at once
		ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
		defer stop()
		err := srv.Shutdown(ctx)
		if err != nil {
			err = errors.Join(err, srv.Close())
		}
		if serveErr := <-served; !errors.Is(serveErr, http.ErrServerClosed) {
			err = errors.Join(err, serveErr)
		}
		return err
	})
	return "http://" + l.Addr().String(), closeFn, nil
}
