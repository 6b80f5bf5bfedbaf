package main

import (
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/watchbot/watchbot/internal/setting"
)

// bindQueueURLs reads --queue-url: the first URL is Listen.QueueURL, the others
// Listen.Queues.More (docs/queues.md). --queue-url's values and WATCHBOT_QUEUE_URL (or
// QueueUrl) are lists that commas separate.
func bindQueueURLs(_ listenSetting, c *cli.Context, a *listenArgs) error {
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
	a.Listen.QueueURL = urls[0]
	if len(urls) > 1 {
		a.Listen.Queues.More = urls[1:]
	}
	return nil
}

// bindNamedCounts reads a repeated NAME=N flag into field.
func bindNamedCounts(field func(*listenArgs) *map[string]int) func(listenSetting, *cli.Context, *listenArgs) error {
	return func(s listenSetting, c *cli.Context, a *listenArgs) error {
		counts, err := namedCounts(repeatedValues(c, s.name), s.setting)
		*field(a) = counts
		return err
	}
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
