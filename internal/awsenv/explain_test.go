package awsenv

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// ExplainSQS tells the causes apart from the SDK's real errors, and names the endpoint the
// request went to only when it is not the queue URL's own host.
func TestExplainSQS(t *testing.T) {
	testCredentials(t)
	noQueue := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"__type":"com.amazonaws.sqs#QueueDoesNotExist","message":"The specified queue does not exist."}`))
	}))
	defer noQueue.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	port := noQueue.URL[strings.LastIndex(noQueue.URL, ":"):]
	tests := []struct {
		name, endpoint, queueURL string
		cause                    Cause
		foreign                  string // the endpoint named, "" for none
	}{
		{"no queue at the URL's host", noQueue.URL, noQueue.URL + "/000000000000/q", CauseNoQueue, ""},
		{"no queue at the URL's host by a loopback name", noQueue.URL, "http://sqs.us-east-1.localhost" + port + "/000000000000/q", CauseNoQueue, ""},
		{"no queue at another endpoint", noQueue.URL, "http://127.0.0.1:1/000000000000/q", CauseNoQueue, noQueue.URL},
		{"no queue at another endpoint than AWS's", noQueue.URL, "https://sqs.us-east-1.amazonaws.com/000000000000/q", CauseNoQueue, noQueue.URL},
		{"nothing answers at the URL's host", closed.URL, closed.URL + "/000000000000/q", CauseUnreachable, ""},
		{"nothing answers at another endpoint", closed.URL, "http://127.0.0.1:1/000000000000/q", CauseUnreachable, closed.URL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := Options{Endpoint: tt.endpoint, QueueURL: tt.queueURL}
			cfg, err := Load(t.Context(), opts)
			if err != nil {
				t.Fatal(err)
			}
			client := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(tt.endpoint); o.RetryMaxAttempts = 1 })
			_, err = client.GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(tt.queueURL)})
			qe := ExplainSQS(err, tt.queueURL, "docs/listen.md#iam-permissions")
			if qe == nil {
				t.Fatalf("ExplainSQS(%v) = nil", err)
			}
			if qe.Cause != tt.cause || qe.Endpoint != tt.foreign || qe.QueueURL != tt.queueURL {
				t.Errorf("cause %d, endpoint %q, queue %q; want %d, %q, %q", qe.Cause, qe.Endpoint, qe.QueueURL, tt.cause, tt.foreign, tt.queueURL)
			}
			if !errors.Is(qe, err) || ExplainSQS(qe, tt.queueURL, "") != qe {
				t.Error("the explanation does not wrap the SDK's error, or is explained twice")
			}
			if unknown := ExplainSQS(err, "", ""); unknown == nil || unknown.Cause != tt.cause || unknown.Endpoint != "" {
				t.Errorf("told no queue URL, explained as %+v; want cause %d and no endpoint named", unknown, tt.cause)
			}
		})
	}
	if qe := ExplainSQS(errors.New("something else"), "", ""); qe != nil {
		t.Errorf("an unknown error explained as %v", qe)
	}
}
