package awsenv

import (
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"
)

// Every client built from Load's configuration carries the request-body guard of package
// reqbody; without it a loaded machine can lose ReceiveMessage answers.
func TestLoadGuardsRequestBodies(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	opts := Options{Endpoint: "http://127.0.0.1:1", QueueURL: "https://sqs.eu-west-1.amazonaws.com/123456789012/q"}
	cfg, err := Load(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	stop := errors.New("stack inspected")
	found := false
	_, err = SQS(cfg, opts).ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(opts.QueueURL)}, func(o *sqs.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			_, found = s.Finalize.Get("WatchbotReadOnlyRequestStream")
			return stop
		})
	})
	if !errors.Is(err, stop) {
		t.Fatalf("ReceiveMessage = %v, want the inspection to stop it", err)
	}
	if !found {
		t.Error("the SQS client's stack lacks reqbody's middleware")
	}
}
