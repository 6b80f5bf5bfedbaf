package main

import (
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/setting"
	"github.com/watchbot/watchbot/supervisor"
)

// queueFlags are listen's flags for serving several queues (docs/queues.md): --queue-url
// repeats, and these say how the queues share the slots.
func queueFlags(def supervisor.Config) []cli.Flag {
	return []cli.Flag{
		&cli.GenericFlag{Name: "queue-url", Value: &repeated{}, EnvVars: queueURLEnv,
			Usage: "the work queue's `URL`; repeat it, or separate URLs with commas, for several queues"},
		&cli.StringFlag{Name: "queue-policy", Value: string(def.Queues.Policy), Usage: "how free slots go to queues with work: weighted, or strict (in the order given)"},
		&cli.GenericFlag{Name: "queue-weight", Value: &repeated{}, Usage: "`NAME=N`: queue NAME's weight under --queue-policy weighted (repeatable)", DefaultText: "1 for each queue"},
		&cli.GenericFlag{Name: "queue-reserve", Value: &repeated{}, Usage: "`NAME=N`: keep N slots for queue NAME, which other queues never use (repeatable)", DefaultText: "none"},
	}
}

// readQueues copies the queue flags into cfg: the first URL is cfg.QueueURL, the others
// cfg.Queues.More. --queue-url's values and WATCHBOT_QUEUE_URL (or QueueUrl) are lists that
// commas separate.
func readQueues(c *cli.Context, cfg *supervisor.Config) error {
	var urls []string
	values := repeatedValues(c, "queue-url")
	if len(values) == 0 {
		values = []string{queueURLFromEnv()}
	}
	for _, v := range values {
		for u := range strings.SplitSeq(v, ",") {
			if u = strings.TrimSpace(u); u != "" {
				urls = append(urls, u)
			}
		}
	}
	if len(urls) == 0 {
		return noQueueGiven(c)
	}
	cfg.QueueURL = urls[0]
	if len(urls) > 1 {
		cfg.Queues.More = urls[1:]
	}
	cfg.Queues.Policy = supervisor.QueuePolicy(c.String("queue-policy"))
	var err error
	if cfg.Queues.Weights, err = namedCounts(repeatedValues(c, "queue-weight"), listenspec.SettingQueueWeight); err != nil {
		return err
	}
	cfg.Queues.Reserve, err = namedCounts(repeatedValues(c, "queue-reserve"), listenspec.SettingQueueReserve)
	return err
}

// namedCounts parses NAME=N values of setting s; a name given twice is refused.
func namedCounts(values []string, s setting.Name) (map[string]int, error) {
	if len(values) == 0 {
		return nil, nil
	}
	out := map[string]int{}
	for _, v := range values {
		name, num, ok := strings.Cut(v, "=")
		name = strings.TrimSpace(name)
		n, err := strconv.Atoi(strings.TrimSpace(num))
		if !ok || name == "" || err != nil {
			return nil, setting.Refuse(s, v, "must be NAME=N: a queue's name (the last part of its URL) and a whole number")
		}
		if _, dup := out[name]; dup {
			return nil, setting.Refuse(s, v, "gives queue "+name+" a second time")
		}
		out[name] = n
	}
	return out, nil
}
