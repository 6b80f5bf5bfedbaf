// Package awsenv loads the AWS SDK configuration every watchbot command uses: credentials and
// region from the SDK's default chain, an optional endpoint override for local emulators, and
// the region taken from the queue URL when nothing else names one (or from a DynamoDB table's
// ARN, which always names it).
package awsenv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/logging"

	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/internal/reqbody"
)

// Options select where requests go.
type Options struct {
	// Endpoint overrides the service's endpoint (e.g. http://127.0.0.1:4566). Empty: the SDK's
	// own resolution, which also honours AWS_ENDPOINT_URL_SQS, AWS_ENDPOINT_URL_DYNAMODB and
	// AWS_ENDPOINT_URL.
	Endpoint string
	// QueueURL, when set, supplies the region if the default chain names none.
	QueueURL string
	// Region, when set, is the region whatever the default chain says: that of a resource's
	// ARN, such as Watchbot's $ProgressTable, since the resource lives there.
	Region string
	// Logger, when set, takes the SDK's own log entries (such as a response body it could not
	// read to its end), which otherwise go to stderr as plain "SDK ..." lines, in the middle of
	// a JSON log.
	Logger *slog.Logger
}

// Load returns the SDK configuration, for every client watchbot builds (SQS, CloudWatch and
// DynamoDB).
func Load(ctx context.Context, o Options) (aws.Config, error) {
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return aws.Config{}, fmt.Errorf("load AWS configuration: %w", err)
	}
	if o.Region != "" {
		cfg.Region = o.Region
	}
	if cfg.Region == "" {
		cfg.Region = queueattr.RegionFromURL(o.QueueURL)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	// Without it, a loaded machine can lose a ReceiveMessage answer, and every request costs
	// two writes: see package reqbody.
	cfg.HTTPClient = reqbody.HTTPClient(cfg.HTTPClient)
	if o.Logger != nil {
		cfg.Logger = sdkLogger(o.Logger)
	}
	return cfg, nil
}

// sdkLogger writes the SDK's log entries to log: a warning at warn level, anything else at
// debug, the SDK's text as the entry's detail.
func sdkLogger(log *slog.Logger) logging.Logger {
	return logging.LoggerFunc(func(c logging.Classification, format string, v ...any) {
		level := slog.LevelDebug
		if c == logging.Warn {
			level = slog.LevelWarn
		}
		log.Log(context.Background(), level, "AWS SDK", "detail", fmt.Sprintf(format, v...))
	})
}

// ErrNotAWSHost is returned by SQSEndpoint for a queue URL whose host is neither AWS's nor a
// loopback address, with no endpoint set: the SDK would send to AWS and ignore the URL's host.
var ErrNotAWSHost = errors.New("the queue URL's host is not AWS's")

// SQSEndpoint returns where SQS requests for o.QueueURL go: o.Endpoint when set; "" (the SDK's
// resolution) when getenv names an endpoint (AWS_ENDPOINT_URL_SQS, AWS_ENDPOINT_URL) or the
// URL's host is AWS's; the URL's own scheme, host and port when its host is a loopback address
// (an emulator's URL), with fromURL true so that the caller can say so, a name such as
// localhost or sqs.us-east-1.localhost becoming 127.0.0.1. Any other host wraps ErrNotAWSHost.
func SQSEndpoint(o Options, getenv func(string) string) (endpoint string, fromURL bool, err error) {
	if o.Endpoint != "" || getenv("AWS_ENDPOINT_URL_SQS") != "" || getenv("AWS_ENDPOINT_URL") != "" || o.QueueURL == "" {
		return o.Endpoint, false, nil
	}
	u, err := url.Parse(o.QueueURL)
	if err != nil {
		return "", false, nil // the URL's own check reports it
	}
	host := strings.ToLower(u.Hostname())
	for _, aws := range []string{".amazonaws.com", ".amazonaws.com.cn", ".api.aws"} {
		if strings.HasSuffix(host, aws) {
			return "", false, nil
		}
	}
	if endpoint, ok := loopback(u); ok {
		return endpoint, true, nil
	}
	return "", false, fmt.Errorf("%w (%s): give the endpoint with --endpoint-url URL or AWS_ENDPOINT_URL_SQS, or use the queue's AWS URL (https://sqs.REGION.amazonaws.com/ACCOUNT/NAME)", ErrNotAWSHost, u.Host)
}

// loopback returns u's scheme, host and port when its host is a loopback address, a name such
// as localhost or sqs.us-east-1.localhost becoming 127.0.0.1.
func loopback(u *url.URL) (endpoint string, ok bool) {
	host := strings.ToLower(u.Hostname())
	ip := net.ParseIP(host)
	switch {
	case ip != nil && ip.IsLoopback():
	case host == "localhost" || strings.HasSuffix(host, ".localhost"):
		ip = net.IPv4(127, 0, 0, 1)
	default:
		return "", false
	}
	hostPort := ip.String()
	if ip.To4() == nil {
		hostPort = "[" + hostPort + "]"
	}
	if p := u.Port(); p != "" {
		hostPort += ":" + p
	}
	return u.Scheme + "://" + hostPort, true
}

// SQS returns an SQS client for cfg, sending to o.Endpoint when it is set.
func SQS(cfg aws.Config, o Options) *sqs.Client {
	return sqs.NewFromConfig(cfg, func(so *sqs.Options) {
		so.Retryer = SQSRetryer()
		if o.Endpoint != "" {
			so.BaseEndpoint = aws.String(o.Endpoint)
		}
	})
}

// DynamoDBMaxAttempts is how often a DynamoDB call is tried before its error is returned (the
// SDK's default is 3). A progress call that fails costs its worker a whole retry of its
// message, so throttling is waited out longer: with the SDK's backoff (waits growing from up to
// 2 s to 20 s) 8 attempts span up to 90 s.
const DynamoDBMaxAttempts = 8

// DynamoDB returns a DynamoDB client for cfg, sending to o.Endpoint when it is set; opts
// adjust it further.
func DynamoDB(cfg aws.Config, o Options, opts ...func(*dynamodb.Options)) *dynamodb.Client {
	return dynamodb.NewFromConfig(cfg, append([]func(*dynamodb.Options){func(do *dynamodb.Options) {
		do.RetryMaxAttempts = DynamoDBMaxAttempts
		if o.Endpoint != "" {
			do.BaseEndpoint = aws.String(o.Endpoint)
		}
	}}, opts...)...)
}

// S3 returns the S3 client that fetches, deletes and stores payloads (docs/payloads.md). An
// endpoint given in the environment (AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL), which the SDK
// reads itself, is addressed path style (ENDPOINT/BUCKET/KEY): S3-compatible stores and
// emulators on a host name of their own seldom resolve BUCKET.HOST. AWS's own endpoints keep the
// SDK's virtual-hosted style.
// opts adjust the client further.
func S3(cfg aws.Config, getenv func(string) string, opts ...func(*s3.Options)) *s3.Client {
	pathStyle := getenv("AWS_ENDPOINT_URL_S3") != "" || getenv("AWS_ENDPOINT_URL") != ""
	return s3.NewFromConfig(cfg, append([]func(*s3.Options){func(so *s3.Options) {
		so.UsePathStyle = pathStyle
	}}, opts...)...)
}
