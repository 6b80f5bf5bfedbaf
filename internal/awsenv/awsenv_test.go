package awsenv

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/watchbot/watchbot/internal/reqbody"
)

// testCredentials sets credentials, so that Load needs nothing from this machine.
func testCredentials(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
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
	if !reqbody.Guarded(SQS(cfg, opts).Options().HTTPClient) {
		t.Error("the SQS client's HTTP client is not reqbody's")
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
	if !reqbody.Guarded(client.Options().HTTPClient) {
		t.Error("the DynamoDB client's HTTP client is not reqbody's")
	}
}
