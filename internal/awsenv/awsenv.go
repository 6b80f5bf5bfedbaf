// Package awsenv loads the AWS SDK configuration every watchbot command uses: credentials and
// region from the SDK's default chain, an optional endpoint override for local emulators, and
// the region taken from the queue URL when nothing else names one.
package awsenv

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/internal/reqbody"
)

// Options select where SQS requests go.
type Options struct {
	// Endpoint overrides the SQS endpoint (e.g. http://127.0.0.1:4566). Empty: the SDK's own
	// resolution, which also honours AWS_ENDPOINT_URL_SQS.
	Endpoint string
	// QueueURL, when set, supplies the region if the default chain names none.
	QueueURL string
}

// Load returns the SDK configuration, for every client watchbot builds (SQS and CloudWatch).
func Load(ctx context.Context, o Options) (aws.Config, error) {
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return aws.Config{}, fmt.Errorf("load AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		cfg.Region = queueattr.RegionFromURL(o.QueueURL)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	// Without it, a loaded machine can lose a ReceiveMessage answer: see package reqbody.
	cfg.APIOptions = append(cfg.APIOptions, reqbody.APIOption)
	return cfg, nil
}

// SQS returns an SQS client for cfg, sending to o.Endpoint when it is set.
func SQS(cfg aws.Config, o Options) *sqs.Client {
	return sqs.NewFromConfig(cfg, func(so *sqs.Options) {
		if o.Endpoint != "" {
			so.BaseEndpoint = aws.String(o.Endpoint)
		}
	})
}
