package awsenv

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

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

// With a logger, what the SDK logs itself becomes an entry of watchbot's log. An answer cut
// short makes the SDK warn that it could not read the rest of the body: that warning used to
// reach stderr as a plain "SDK ..." line in the middle of listen's JSON log.
func TestLoadLogsTheSDKsEntries(t *testing.T) {
	testCredentials(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"Messages":[`))
		w.(http.Flusher).Flush()
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	defer srv.Close()
	var out bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	opts := Options{Endpoint: srv.URL, QueueURL: "https://sqs.eu-west-1.amazonaws.com/123456789012/q", Logger: log}
	cfg, err := Load(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	client := SQS(cfg, opts)
	if _, err := client.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(srv.URL + "/123456789012/q")}); err == nil {
		t.Fatal("a receive whose answer was cut short succeeded")
	}
	var entry struct{ Level, Msg, Detail string }
	for line := range strings.Lines(out.String()) {
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if entry.Level == "WARN" && entry.Msg == "AWS SDK" && strings.Contains(entry.Detail, "response body") {
			return
		}
	}
	t.Errorf("no warning of the SDK in the log:\n%s", out.String())
}

// A user's machine sets no AWS_CA_BUNDLE, so the SDK builds no HTTP client of its own into the
// configuration. A call through Load's configuration must then still go out, through the SDK's
// default client, not panic on a nil one.
func TestLoadWithoutCABundle(t *testing.T) {
	testCredentials(t)
	t.Setenv("AWS_CA_BUNDLE", "")
	os.Unsetenv("AWS_CA_BUNDLE")
	var got atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.Write([]byte(`{"QueueUrl":"http://127.0.0.1/000000000000/q"}`))
	}))
	defer srv.Close()
	opts := Options{Endpoint: srv.URL}
	cfg, err := Load(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := SQS(cfg, opts).GetQueueUrl(t.Context(), &sqs.GetQueueUrlInput{QueueName: aws.String("q")}); err != nil {
		t.Fatal(err)
	}
	if got.Load() != 1 {
		t.Fatalf("the server saw %d requests, want 1", got.Load())
	}
}

func TestSQSEndpoint(t *testing.T) {
	none := func(string) string { return "" }
	tests := []struct {
		name, queueURL, flag string
		env                  map[string]string
		want                 string
		fromURL              bool
	}{
		{name: "AWS", queueURL: "https://sqs.eu-west-1.amazonaws.com/123456789012/jobs"},
		{name: "AWS China", queueURL: "https://sqs.cn-north-1.amazonaws.com.cn/123456789012/jobs"},
		{name: "the flag wins", queueURL: "http://sqs.example.org:4566/0/q", flag: "http://127.0.0.1:4566", want: "http://127.0.0.1:4566"},
		{name: "the environment names one", queueURL: "http://sqs.example.org:4566/0/q", env: map[string]string{"AWS_ENDPOINT_URL_SQS": "http://127.0.0.1:1"}},
		{name: "loopback IP", queueURL: "http://127.0.0.1:4566/000000000000/q", want: "http://127.0.0.1:4566", fromURL: true},
		{name: "IPv6 loopback", queueURL: "http://[::1]:4566/000000000000/q", want: "http://[::1]:4566", fromURL: true},
		{name: "localhost", queueURL: "http://localhost:4566/000000000000/q", want: "http://127.0.0.1:4566", fromURL: true},
		{name: "an emulator's localhost name", queueURL: "http://sqs.us-east-1.localhost:4577/000000000000/q", want: "http://127.0.0.1:4577", fromURL: true},
		{name: "a container's name", queueURL: "http://localstack:4566/000000000000/q", want: "http://localstack:4566", fromURL: true},
		{name: "LocalStack's name", queueURL: "https://sqs.us-east-1.localhost.localstack.cloud:4566/000000000000/q", want: "https://sqs.us-east-1.localhost.localstack.cloud:4566", fromURL: true},
		{name: "another host, default port", queueURL: "https://sqs.example.org/0/q", want: "https://sqs.example.org", fromURL: true},
		{name: "not a URL", queueURL: "jobs"},
		{name: "a VPC endpoint", queueURL: "https://vpce-0a1b2c3d-4e5f6a7b.sqs.eu-west-1.vpce.amazonaws.com/123456789012/q", want: "https://vpce-0a1b2c3d-4e5f6a7b.sqs.eu-west-1.vpce.amazonaws.com", fromURL: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			getenv := none
			if tt.env != nil {
				getenv = func(k string) string { return tt.env[k] }
			}
			got, fromURL := SQSEndpoint(Options{Endpoint: tt.flag, QueueURL: tt.queueURL}, getenv)
			if got != tt.want || fromURL != tt.fromURL {
				t.Fatalf("SQSEndpoint = %q, %v; want %q, %v", got, fromURL, tt.want, tt.fromURL)
			}
		})
	}
}

func TestS3PathStyle(t *testing.T) {
	for _, tt := range []struct {
		env  map[string]string
		path bool
	}{
		{nil, false},
		{map[string]string{"AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9000"}, true},
		{map[string]string{"AWS_ENDPOINT_URL": "http://127.0.0.1:4566"}, true},
		{map[string]string{"AWS_ENDPOINT_URL_SQS": "http://127.0.0.1:4566"}, false},
	} {
		c := S3(aws.Config{Region: "us-east-1"}, func(k string) string { return tt.env[k] })
		if got := c.Options().UsePathStyle; got != tt.path {
			t.Errorf("env %v: UsePathStyle = %v", tt.env, got)
		}
	}
}

// Each queue's client sends to the endpoint and signs for the region its URL gives, whatever
// region the configuration names; an endpoint given takes every queue's requests.
func TestQueueSQS(t *testing.T) {
	none := func(string) string { return "" }
	cfg := aws.Config{Region: "us-east-1"}
	tests := []struct {
		name, queueURL, endpoint string
		region, base, own        string
	}{
		{name: "AWS", queueURL: "https://sqs.eu-west-1.amazonaws.com/123456789012/jobs", region: "eu-west-1"},
		{name: "AWS China", queueURL: "https://sqs.cn-north-1.amazonaws.com.cn/123456789012/jobs", region: "cn-north-1"},
		{name: "dual-stack", queueURL: "https://sqs.ap-south-1.api.aws/123456789012/jobs", region: "ap-south-1"},
		{name: "legacy regional", queueURL: "https://us-west-2.queue.amazonaws.com/123456789012/jobs", region: "us-west-2"},
		{name: "legacy", queueURL: "https://queue.amazonaws.com/123456789012/jobs", region: "us-east-1"},
		{name: "AWS through an endpoint", queueURL: "https://sqs.eu-west-1.amazonaws.com/123456789012/jobs", endpoint: "https://vpce.example", region: "eu-west-1", base: "https://vpce.example"},
		{name: "an emulator", queueURL: "http://sqs.eu-west-1.localhost:4566/000000000000/jobs", region: "us-east-1", base: "http://127.0.0.1:4566", own: "http://127.0.0.1:4566"},
		{name: "an emulator through an endpoint", queueURL: "http://127.0.0.1:4566/000000000000/jobs", endpoint: "http://127.0.0.1:9", region: "us-east-1", base: "http://127.0.0.1:9"},
		{name: "a VPC endpoint", queueURL: "https://vpce-0a1b2c3d-4e5f6a7b.sqs.eu-west-1.vpce.amazonaws.com/123456789012/jobs", region: "eu-west-1",
			base: "https://vpce-0a1b2c3d-4e5f6a7b.sqs.eu-west-1.vpce.amazonaws.com", own: "https://vpce-0a1b2c3d-4e5f6a7b.sqs.eu-west-1.vpce.amazonaws.com"},
		{name: "an emulator in a container", queueURL: "http://localstack:4566/000000000000/jobs", region: "us-east-1", base: "http://localstack:4566", own: "http://localstack:4566"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, own := QueueSQS(cfg, Options{Endpoint: tt.endpoint, QueueURL: tt.queueURL}, none)
			o := c.Options()
			if o.Region != tt.region || aws.ToString(o.BaseEndpoint) != tt.base || own != tt.own {
				t.Errorf("region %q, endpoint %q, own %q; want %q, %q, %q", o.Region, aws.ToString(o.BaseEndpoint), own, tt.region, tt.base, tt.own)
			}
		})
	}
}

// A queue URL on a host neither AWS's nor loopback, a container's name as docker compose gives
// one, with no endpoint given: the requests go to that host, not to AWS. The machine cannot
// resolve the name, so the client's dialer sends every connection to a server that records the
// Host each request names.
func TestQueueSQSSendsToTheURLsHost(t *testing.T) {
	hosts := make(chan string, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hosts <- r.Host
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		_, _ = w.Write([]byte(`{"Attributes":{}}`))
	}))
	defer srv.Close()
	dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, srv.Listener.Addr().String())
	}
	cfg := aws.Config{
		Region:      "us-east-1",
		Credentials: aws.AnonymousCredentials{},
		HTTPClient:  &http.Client{Transport: &http.Transport{DialContext: dial}},
	}
	queueURL := "http://localstack:4566/000000000000/jobs"
	c, own := QueueSQS(cfg, Options{QueueURL: queueURL}, func(string) string { return "" })
	if _, err := c.GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(queueURL)}); err != nil {
		t.Fatal(err)
	}
	if host := <-hosts; len(hosts) != 0 || host != "localstack:4566" || own != "http://localstack:4566" {
		t.Errorf("a request to host %q (and %d more), own endpoint %q; want one to localstack:4566, its own", host, len(hosts), own)
	}
}
