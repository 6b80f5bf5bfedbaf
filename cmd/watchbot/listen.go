package main

import (
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/watchbot/watchbot/app"
	"github.com/watchbot/watchbot/internal/ecsagent"
	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/setting"
	"github.com/watchbot/watchbot/supervisor"
)

func listenCommand(abort <-chan struct{}) *cli.Command {
	return &cli.Command{
		Name:      "listen",
		Usage:     "long-poll a queue and run a worker command per message",
		ArgsUsage: "-- COMMAND [ARG...]",
		Description: "The command is exec'd directly (no shell; use -- sh -c '...' for one) in its own process group,\n" +
			"with the message in its environment, on stdin and in $WATCHBOT_MESSAGE_FILE. Exit 0 deletes the\n" +
			"message, 3 rejects it (dead-letter), 4 releases it for a retry, anything else retries with backoff.",
		Flags: cliFlags(listenSettings),
		Action: func(c *cli.Context) error {
			if err := supervisor.PlatformError("listen", runtime.GOOS); err != nil {
				return err
			}
			opts, err := listenOptions(c, os.Getenv(ecsagent.EnvURI))
			if err != nil {
				return err
			}
			opts.Abort = abort
			return app.Run(c.Context, opts)
		},
	}
}

// listenOptions reads the flags into app.Options and validates them, the one check of the
// configuration: app.Run and the supervisor trust what it returns. agentURI is the ECS
// agent's (ecsagent.EnvURI), which --scale-in-protection auto follows.
func listenOptions(c *cli.Context, agentURI string) (app.Options, error) {
	a, err := listenConfig(c)
	if err != nil {
		return app.Options{}, err
	}
	if a.Logger, err = newLogger(c, a.logFormat, a.logLevel); err != nil {
		return app.Options{}, err
	}
	if a.Metrics, err = metricsConfig(c, a.Metrics, a.Listen.QueueURL, a.metricsService, a.Logger); err != nil {
		return app.Options{}, err
	}
	if a.Protection, err = app.ScaleInProtection(a.protection, agentURI); err != nil {
		return app.Options{}, err
	}
	return a.Options, nil
}

// listenConfig reads the flags into listenArgs, whose supervisor.Config it validates.
func listenConfig(c *cli.Context) (listenArgs, error) {
	a := defaultListenArgs()
	if err := readListenArgs(c, listenSettings, &a); err != nil {
		return a, err
	}
	a.Listen.Command = c.Args().Slice()
	if a.Listen.Lambda.Enabled && !c.IsSet("batch-size") {
		a.Listen.BatchSize = listenspec.DefaultLambdaBatchSize // Lambda's own default
	}
	if v := os.Getenv(limitsLeaseEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return a, setting.Refuse("", nil, fmt.Sprintf("%s (%q) is not a duration", limitsLeaseEnv, v))
		}
		a.Listen.Limits.Fleet.Lease = d
	}
	if a.Listen.Limits.Fleet.Table != "" {
		a.Listen.Limits.Fleet.Member = fleetMember(a.Listen)
	}
	limit, err := inFlightLimit()
	if err != nil {
		return a, err
	}
	a.Listen.InFlightLimit = limit
	return a, a.Listen.Validate()
}

// brakeOn reads --brake, which listen and template share.
func brakeOn(v string) (bool, error) {
	switch v {
	case "on", "off":
		return v == "on", nil
	}
	return false, setting.Refuse(listenspec.SettingBrake, v, "must be on or off")
}

// onOff is --brake's word for on.
func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}
