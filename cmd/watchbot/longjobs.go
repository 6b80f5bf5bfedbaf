package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/watchbot/watchbot/dedupe"
	"github.com/watchbot/watchbot/internal/awsenv"
	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/internal/setting"
	"github.com/watchbot/watchbot/internal/sqsspec"
)

// inFlightEnv scales SQS's 12 h in-flight limit down, for tests against a fake SQS that
// enforces the same limit in seconds (CONTRIBUTING.md); listen and status read it once, at
// start.
const inFlightEnv = "WATCHBOT_SQS_MAX_IN_FLIGHT"

// inFlightLimit returns SQS's in-flight limit: sqsspec.MaxInFlight, or inFlightEnv's value.
func inFlightLimit() (time.Duration, error) {
	v := os.Getenv(inFlightEnv)
	if v == "" {
		return sqsspec.MaxInFlight, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < time.Second || d > sqsspec.MaxInFlight {
		return 0, setting.Refuse("", nil, fmt.Sprintf("%s (%q) must be a duration between 1s and %v", inFlightEnv, v, sqsspec.MaxInFlight))
	}
	return d, nil
}

// readLongJobs reads, from status's --dedupe-table, each queue's jobs that have run past SQS's
// in-flight limit (long[i] is urls[i]'s); nil when no table is given. The client is built as
// listen's: the region an ARN names, the endpoint of AWS_ENDPOINT_URL_DYNAMODB.
func readLongJobs(c *cli.Context, urls []string, limit time.Duration, now time.Time) ([][]dedupe.LongJob, error) {
	table, err := stateTable(c.String("dedupe-table"), listenspec.SettingDedupeTable)
	if err != nil || table.Name == "" {
		return nil, err
	}
	opts := awsenv.Options{QueueURL: urls[0], Region: table.Region}
	cfg, err := awsenv.Load(c.Context, opts)
	if err != nil {
		return nil, err
	}
	api := awsenv.DynamoDB(cfg, opts)
	long := make([][]dedupe.LongJob, len(urls))
	for i, u := range urls {
		jobs, err := dedupe.LongJobs(c.Context, api, table.Name, queueattr.NameFromURL(u), limit, now)
		if err != nil {
			return nil, setting.Error{Setting: listenspec.SettingDedupeTable, Reason: "cannot read the table", Err: err}
		}
		long[i] = append([]dedupe.LongJob{}, jobs...)
	}
	return long, nil
}

// writeLongJobs prints a queue's jobs past the in-flight limit, after its section.
func writeLongJobs(w io.Writer, jobs []dedupe.LongJob, limit time.Duration, now time.Time) error {
	var b strings.Builder
	if len(jobs) == 0 {
		fmt.Fprintf(&b, "long jobs:   none past %v\n", limit)
	} else {
		fmt.Fprintf(&b, "long jobs:   %d past %v, relayed through the dedupe table\n", len(jobs), limit)
		fmt.Fprintf(&b, "             %-12s %6s  %-24s %s\n", "AGE", "RELAYS", "KEY", "OWNER")
		for _, j := range jobs {
			fmt.Fprintf(&b, "             %-12v %6d  %-24s %s\n", now.Sub(j.Started).Round(time.Second), j.Relays, j.Key, j.Owner)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
