package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/deadletter"
	"github.com/watchbot/watchbot/dedupe"
	"github.com/watchbot/watchbot/internal/queueattr"
)

// metricsTimeout bounds status's request to a listen's /metrics.
const metricsTimeout = 5 * time.Second

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show queues' message counts, their redrive policies and their DLQs' depth",
		Description: "Nothing is received: the counts are SQS's approximate ones. The age of the oldest message is\n" +
			"not available from the SQS API without consuming messages; it is shown as n/a, with a pointer to\n" +
			"the CloudWatch metric AWS/SQS ApproximateAgeOfOldestMessage. --queue-url may repeat (or\n" +
			"WATCHBOT_QUEUE_URL hold a comma-separated list): one section per queue, in the order given.\n" +
			"--sample-dlq N is the exception to receiving nothing: it peeks at up to N messages of each\n" +
			"dead-letter queue, as dead-letter peek does, to count those whose body is in S3.",
		Flags: []cli.Flag{
			&cli.GenericFlag{Name: "queue-url", Value: &repeated{}, Usage: "a queue `URL` (repeatable; default: $WATCHBOT_QUEUE_URL, or $QueueUrl)"},
			&cli.StringFlag{Name: "metrics-url", Usage: "also show the per-tenant figures of the listen serving `URL` (its /metrics)"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object (an array of them for several queues)"},
			&cli.StringFlag{Name: "limits-table", Usage: "also show the fleet's use of the limits in this DynamoDB `TABLE` (docs/limits.md)", EnvVars: []string{"WATCHBOT_LIMITS_TABLE"}},
			&cli.StringFlag{Name: "dedupe-table", Usage: "also show the jobs past 12h and their owners, from listen's dedupe `TABLE`", EnvVars: []string{"WATCHBOT_DEDUPE_TABLE"}},
			sampleDLQFlag(),
			opEndpointFlag(),
		},
		Action: runStatus,
	}
}

// runStatus prints each queue's status, in the order given, each read with its own client
// (the endpoint and region its URL gives, or --endpoint-url's for every queue).
func runStatus(c *cli.Context) error {
	urls, err := statusQueueURLs(c)
	if err != nil {
		return err
	}
	var tenants []alarms.TenantFigure
	if target := c.String("metrics-url"); target != "" {
		if tenants, err = readTenantFigures(c.Context, target); err != nil {
			return err
		}
	}
	use, err := readLimitsUse(c, urls[0])
	if err != nil {
		return err
	}
	limit, err := inFlightLimit()
	if err != nil {
		return err
	}
	now := time.Now()
	long, err := readLongJobs(c, urls, limit, now)
	if err != nil {
		return err
	}
	statuses := make([]deadletter.QueueStatus, len(urls))
	for i, u := range urls {
		if statuses[i], err = queueStatus(c, u); err != nil {
			return explainAWS(err, u)
		}
		if c.IsSet("metrics-url") {
			statuses[i].Tenants = []alarms.TenantFigure{}
			for _, t := range tenants {
				if t.Queue == statuses[i].Name {
					statuses[i].Tenants = append(statuses[i].Tenants, t)
				}
			}
		}
	}
	if c.Bool("json") {
		return writeStatusJSON(c.App.Writer, statuses, use, long)
	}
	for i, s := range statuses {
		if i > 0 {
			if _, err := io.WriteString(c.App.Writer, "\n"); err != nil {
				return err
			}
		}
		if err := deadletter.WriteStatus(c.App.Writer, s); err != nil {
			return err
		}
		if long != nil {
			if err := writeLongJobs(c.App.Writer, long[i], limit, now); err != nil {
				return err
			}
		}
	}
	if use != nil {
		return writeLimitsUse(c.App.Writer, c.String("limits-table"), *use, time.Now())
	}
	return nil
}

// queueStatus reads the status of the queue at queueURL with the queue's own client, and
// samples its dead-letter queue when --sample-dlq asks.
func queueStatus(c *cli.Context, queueURL string) (deadletter.QueueStatus, error) {
	client, err := operatorSQS(c, queueURL)
	if err != nil {
		return deadletter.QueueStatus{}, err
	}
	s, err := deadletter.Status(c.Context, client, queueURL)
	if err != nil {
		return s, err
	}
	return s, sampleDLQ(c, client, &s)
}

// writeStatusJSON writes the statuses as one JSON object, or an array of them for several
// queues, each with the fleet's use of the limits when there is one, and its jobs past the
// in-flight limit (long[i], when long is not nil).
func writeStatusJSON(w io.Writer, statuses []deadletter.QueueStatus, use *limitsStatus, long [][]dedupe.LongJob) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	out := make([]statusJSON, len(statuses))
	for i, s := range statuses {
		out[i] = statusJSON{QueueStatus: s, Limits: use}
		if long != nil {
			out[i].LongJobs = long[i]
		}
	}
	if len(out) == 1 {
		return enc.Encode(out[0])
	}
	return enc.Encode(out)
}

// statusQueueURLs returns the queues --queue-url names, in order, each checked: the flag as
// often as given, or else the environment's comma-separated list (queueURLFromEnv, which
// skips an empty WATCHBOT_QUEUE_URL for QueueUrl as listen does).
func statusQueueURLs(c *cli.Context) ([]string, error) {
	values := repeatedValues(c, "queue-url")
	if len(values) == 0 {
		values = []string{queueURLFromEnv()}
	}
	var urls []string
	seen := map[string]bool{}
	for _, v := range values {
		for _, u := range strings.Split(v, ",") {
			if u = strings.TrimSpace(u); u == "" {
				continue
			}
			if err := queueattr.ValidateURL(u); err != nil {
				return nil, usagef("--queue-url: %v", err)
			}
			if seen[u] {
				return nil, usagef("--queue-url %s is given twice", u)
			}
			seen[u] = true
			urls = append(urls, u)
		}
	}
	if len(urls) == 0 {
		return nil, noQueueGiven(c)
	}
	return urls, nil
}

// readTenantFigures reads the per-tenant figures from a listen's /metrics at target (a URL,
// or HOST:PORT as listen's --http-addr, whose /metrics is asked).
func readTenantFigures(ctx context.Context, target string) ([]alarms.TenantFigure, error) {
	u, err := url.Parse(target)
	if err != nil || u.Scheme == "" || u.Host == "" {
		if u, err = url.Parse("http://" + target + "/metrics"); err != nil || u.Host == "" {
			return nil, usagef("--metrics-url (%q) must be an http:// URL or HOST:PORT", target)
		}
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, usagef("--metrics-url (%q) must be an http:// or https:// URL", target)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/metrics"
	}
	ctx, cancel := context.WithTimeout(ctx, metricsTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, usagef("--metrics-url: %v", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("--metrics-url: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("--metrics-url %s answered %s", u, resp.Status)
	}
	return alarms.ReadTenantFigures(io.LimitReader(resp.Body, 16<<20))
}
