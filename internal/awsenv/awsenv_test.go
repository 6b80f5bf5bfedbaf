package awsenv

import (
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"
)

// testCredentials sets credentials, so that Load needs nothing from this machine.
func testCredentials(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

// guarded reports whether the stack of the operation call makes carries reqbody's middleware.
// call must make one operation with the API option it is given; the option stops it before
// anything is sent.
func guarded(t *testing.T, call func(inspect func(*middleware.Stack) error) error) bool {
	t.Helper()
	stop := errors.New("stack inspected")
	found := false
	err := call(func(s *middleware.Stack) error {
		_, found = s.Finalize.Get("WatchbotReadOnlyRequestStream")
		return stop
	})
	if !errors.Is(err, stop) {
		t.Fatalf("the call = %v, want the inspection to stop it", err)
	}
	return found
}

// Every client built from Load's configuration carries the request-body guard of package
// reqbody; without it a loaded machine can lose ReceiveMessage answers.
func TestLoadGuardsRequestBodies(t *testing.T) {
	testCredentials(t)
	opts := Options{Endpoint: "http://127.0.0.1:1", QueueURL: "https://sqs.eu-west-1.amazonaws.com/123456789012/q"}
	cfg, err := Load(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if !guarded(t, func(inspect func(*middleware.Stack) error) error {
		_, err := SQS(cfg, opts).ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(opts.QueueURL)}, func(o *sqs.Options) {
			o.APIOptions = append(o.APIOptions, inspect)
		})
		return err
	}) {
		t.Error("the SQS client's stack lacks reqbody's middleware")
	}
}

// A DynamoDB table's ARN names the region the table is in, whatever the environment says; the
// DynamoDB client tries longer than the SDK's default and carries the request-body guard too.
func TestDynamoDB(t *testing.T) {
	testCredentials(t)
	t.Setenv("AWS_REGION", "us-west-2")
	opts := Options{Endpoint: "http://127.0.0.1:1", Region: "eu-central-1"}
	cfg, err := Load(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Region != "eu-central-1" {
		t.Errorf("region = %q, want the ARN's eu-central-1", cfg.Region)
	}
	client := DynamoDB(cfg, opts)
	if got := client.Options().RetryMaxAttempts; got != DynamoDBMaxAttempts {
		t.Errorf("RetryMaxAttempts = %d, want %d", got, DynamoDBMaxAttempts)
	}
	if got := aws.ToString(client.Options().BaseEndpoint); got != opts.Endpoint {
		t.Errorf("endpoint = %q, want %q", got, opts.Endpoint)
	}
	if !guarded(t, func(inspect func(*middleware.Stack) error) error {
		_, err := client.GetItem(t.Context(), &dynamodb.GetItemInput{TableName: aws.String("t")}, func(o *dynamodb.Options) {
			o.APIOptions = append(o.APIOptions, inspect)
		})
		return err
	}) {
		t.Error("the DynamoDB client's stack lacks reqbody's middleware")
	}
}
