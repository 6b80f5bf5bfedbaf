// Package awsenv loads the AWS SDK configuration every watchbot command uses: credentials and
// region from the SDK's default chain, an optional endpoint override for local emulators, and
// the region taken from the queue URL when nothing else names one (or from a DynamoDB table's
// ARN, which always names it). Each queue's SQS client follows its own URL (sqs.go), and
// ExplainSQS words the failures a user mends for every command alike.
package awsenv

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"
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
