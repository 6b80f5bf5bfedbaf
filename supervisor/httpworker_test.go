package supervisor

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/worker"
)

// TestHTTPWorkerPostsWhatSQSDelivered: an SNS notification is POSTed as received, and its
// headers carry the SQS message's attributes, not the unwrapped notification's.
func TestHTTPWorkerPostsWhatSQSDelivered(t *testing.T) {
	t.Parallel()
	var body string
	var header http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		body, header = string(b), r.Header.Clone()
	}))
	defer srv.Close()
	envelope := `{"Type":"Notification","MessageId":"n1","TopicArn":"arn:aws:sns:us-east-1:000000000000:t","Message":"inner","MessageAttributes":{"sns-only":{"Type":"String","Value":"x"}}}`
	msg := parseMessage(types.Message{MessageId: aws.String("m"), Body: aws.String(envelope),
		MessageAttributes: map[string]types.MessageAttributeValue{"tenant": {DataType: aws.String("String"), StringValue: aws.String("acme")}}})
	if msg.Body != "inner" {
		t.Fatalf("the envelope was not unwrapped for command workers: %q", msg.Body)
	}
	cfg := worker.DefaultHTTPWorker()
	cfg.URL = srv.URL
	wj := worker.Job{QueueURL: "http://127.0.0.1:1/000000000000/jobs", Messages: []worker.Message{workerMessage(&job{msg: msg})},
		Log: slog.New(slog.DiscardHandler)}
	if run := worker.NewHTTP(cfg, 1, 0, nil, wj.Log).Run(t.Context(), wj); run.End != worker.Succeeded {
		t.Fatalf("run %+v", run)
	}
	if body != envelope {
		t.Errorf("body %q, want the envelope as received", body)
	}
	if header.Get("X-Aws-Sqsd-Attr-Tenant") != "acme" || header.Get("X-Aws-Sqsd-Attr-Sns-Only") != "" {
		t.Errorf("attribute headers %v", header)
	}
	if _, ok := header["X-Aws-Sqsd-Group-Id"]; ok {
		t.Errorf("a message without a group id got X-Aws-Sqsd-Group-Id %q", header.Get("X-Aws-Sqsd-Group-Id"))
	}
}
