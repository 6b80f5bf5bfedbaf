package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/watchbot/watchbot/alarms"
)

func alarmsCommand() *cli.Command {
	d := alarms.DefaultThresholds()
	return &cli.Command{
		Name:  "alarms",
		Usage: "show the CloudWatch alarms that watchbot template creates",
		Subcommands: []*cli.Command{{
			Name:  "list",
			Usage: "print the alarms: metric, statistic, period, threshold and what to do",
			// A bad flag value is bad usage: exit 2, the message once, no help text.
			Flags: append([]cli.Flag{
				&cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table"},
				&cli.StringFlag{Name: "metrics", Value: alarms.ModeEMF, Usage: "listen's --metrics `MODE`: emf, cloudwatch or none (none: only AWS/SQS alarms)"},
				&cli.StringFlag{Name: "metrics-namespace", Value: "Watchbot", Usage: "CloudWatch `NAMESPACE` of watchbot's metrics, as given to listen and template"},
			}, thresholdFlags(d)...),
			Action: listAlarms,
		}},
	}
}

// thresholdsFlags names the alarm threshold flags, for error messages.
const thresholdsFlags = "alarm thresholds (--worker-errors-threshold, --oldest-message-age-threshold, --braking-threshold)"

// thresholdFlags are the alarm thresholds, shared by `alarms list` and `template`.
func thresholdFlags(d alarms.Thresholds) []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "worker-errors-threshold", Value: d.WorkerErrorsPerMinute, Usage: "alarm when more worker runs than this fail in a minute"},
		withAliases(durationFlag("oldest-message-age-threshold", time.Duration(d.OldestMessageAgeSeconds)*time.Second,
			"alarm when the oldest message has waited longer than this (1m..14 days)"), "oldest-message-age"),
		durationFlag("braking-threshold", time.Duration(d.BrakingMinutes)*time.Minute,
			"alarm when a task has braked this long (whole minutes, 1m..24h)"),
	}
}

// readThresholds reads thresholdFlags; Thresholds.Validate checks the ranges.
func readThresholds(c *cli.Context) (alarms.Thresholds, error) {
	age := durationOf(c, "oldest-message-age-threshold")
	if age%time.Second != 0 {
		return alarms.Thresholds{}, usagef("--oldest-message-age-threshold (%v) must be a whole number of seconds", age)
	}
	braking := durationOf(c, "braking-threshold")
	if braking%time.Minute != 0 {
		return alarms.Thresholds{}, usagef("--braking-threshold (%v) must be a whole number of minutes", braking)
	}
	return alarms.Thresholds{
		WorkerErrorsPerMinute:   c.Int("worker-errors-threshold"),
		OldestMessageAgeSeconds: int(age / time.Second),
		BrakingMinutes:          int(braking / time.Minute),
	}, nil
}

func withAliases(f *cli.GenericFlag, aliases ...string) *cli.GenericFlag {
	f.Aliases = aliases
	return f
}

// alarmsJSON is one alarm as `alarms list --json` prints it: the definition with the
// namespace filled in.
type alarmsJSON struct {
	alarms.Definition
	Namespace string `json:"namespace"`
}

func listAlarms(c *cli.Context) error {
	t, err := readThresholds(c)
	if err != nil {
		return err
	}
	if err := t.Validate(); err != nil {
		return usagef("%s: %w", thresholdsFlags, err)
	}
	mode := c.String("metrics")
	switch mode {
	case alarms.ModeEMF, alarms.ModeCloudWatch, alarms.ModeNone:
	default:
		return usagef("--metrics (%q) must be %s, %s or %s", mode, alarms.ModeCloudWatch, alarms.ModeEMF, alarms.ModeNone)
	}
	namespace := c.String("metrics-namespace")
	if err := alarms.ValidateNamespace(namespace); err != nil {
		return usageError{err}
	}

	out := []alarmsJSON{}
	for _, def := range alarms.Definitions(t) {
		if def.Namespace == "" && mode == alarms.ModeNone {
			continue // watchbot publishes nothing for these to watch; the template leaves them out
		}
		a := alarmsJSON{Definition: def, Namespace: def.Namespace}
		if def.Namespace == "" {
			a.Namespace = namespace
		}
		out = append(out, a)
	}
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}

	tw := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tNAMESPACE\tMETRIC\tDIMENSION\tSTATISTIC\tPERIOD\tEVALUATIONS\tCONDITION\tMISSING DATA")
	for _, a := range out {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%ds\t%d\t%s %s\t%s\n", a.Name, a.Namespace, a.Metric, dimensionText(a.Subject),
			a.Statistic, a.PeriodSeconds, a.EvaluationPeriods, comparisonSymbol(a.Comparison),
			strconv.FormatFloat(a.Threshold, 'f', -1, 64), a.TreatMissingData)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(c.App.Writer)
	for _, a := range out {
		if _, err := fmt.Fprintf(c.App.Writer, "%s: %s\n", a.Name, a.Description); err != nil {
			return err
		}
	}
	return nil
}

func comparisonSymbol(c alarms.Comparison) string {
	switch c {
	case alarms.GreaterThanThreshold:
		return ">"
	case alarms.GreaterThanOrEqualToThreshold:
		return ">="
	}
	return string(c)
}

func dimensionText(s alarms.Subject) string {
	if s == alarms.DeadLetterQueue {
		return "QueueName=<dead-letter queue>"
	}
	return "QueueName=<queue>"
}
