package main

import (
	"log/slog"

	"github.com/urfave/cli/v2"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/internal/queueattr"
)

// metricsFlags are listen's --metrics flags.
func metricsFlags() []cli.Flag {
	def := alarms.DefaultPublisherConfig()
	return []cli.Flag{
		&cli.StringFlag{Name: "metrics", Value: def.Mode, Usage: "emf (lines on stdout for the awslogs driver), cloudwatch (PutMetricData), none"},
		&cli.StringFlag{Name: "metrics-namespace", Value: def.Namespace, Usage: "CloudWatch namespace of the metrics"},
		&cli.StringFlag{Name: "metrics-service", Usage: "adds a Service dimension with this value to every metric"},
	}
}

// metricsConfig builds the publisher's configuration from the flags.
func metricsConfig(c *cli.Context, queueURL string, log *slog.Logger) (alarms.PublisherConfig, error) {
	cfg := alarms.DefaultPublisherConfig()
	cfg.Mode = c.String("metrics")
	cfg.Namespace = c.String("metrics-namespace")
	cfg.Dimensions = []alarms.Dimension{{Name: alarms.DimensionQueueName, Value: queueattr.NameFromURL(queueURL)}}
	if s := c.String("metrics-service"); s != "" {
		cfg.Dimensions = append(cfg.Dimensions, alarms.Dimension{Name: "Service", Value: s})
	}
	cfg.Stdout = c.App.Writer
	cfg.Logger = log
	if err := cfg.Validate(); err != nil {
		return cfg, usageError{err}
	}
	return cfg, nil
}
