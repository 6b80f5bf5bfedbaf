package main

import (
	"log/slog"

	"github.com/urfave/cli/v2"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/internal/queueattr"
)

// metricsConfig completes the publisher's configuration that the --metrics flags set, and
// checks it.
func metricsConfig(c *cli.Context, cfg alarms.PublisherConfig, queueURL, service string, log *slog.Logger) (alarms.PublisherConfig, error) {
	cfg.Dimensions = []alarms.Dimension{{Name: alarms.DimensionQueueName, Value: queueattr.NameFromURL(queueURL)}}
	if service != "" {
		cfg.Dimensions = append(cfg.Dimensions, alarms.Dimension{Name: "Service", Value: service})
	}
	cfg.Stdout = c.App.Writer
	cfg.Logger = log
	if err := cfg.Validate(); err != nil {
		return cfg, usageError{err}
	}
	return cfg, nil
}
