// Package awsenv loads the AWS SDK configuration every watchbot command uses: credentials and
// region from the SDK's default chain, an optional endpoint override for local emulators, and
// the region taken from the queue URL when nothing else names one (or from a DynamoDB table's
// ARN, which always names it).
package awsenv

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
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

// DynamoDB returns a DynamoDB client for cfg, sending to o.Endpoint when it is set.
func DynamoDB(cfg aws.Config, o Options) *dynamodb.Client {
	return dynamodb.NewFromConfig(cfg, func(do *dynamodb.Options) {
		do.RetryMaxAttempts = DynamoDBMaxAttempts
		if o.Endpoint != "" {
			do.BaseEndpoint = aws.String(o.Endpoint)
		}
	})
}
