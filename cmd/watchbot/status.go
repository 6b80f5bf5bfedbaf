package main

import (
	"encoding/json"

	"github.com/urfave/cli/v2"

	"github.com/watchbot/watchbot/deadletter"
)

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show a queue's message counts, its redrive policy and its DLQ's depth",
		Description: "Nothing is received: the counts are SQS's approximate ones. The age of the oldest message is\n" +
			"not available from the SQS API without consuming messages; it is shown as n/a, with a pointer to\n" +
			"the CloudWatch metric AWS/SQS ApproximateAgeOfOldestMessage.",
		Flags: []cli.Flag{
			queueURLFlag(),
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object"},
			opEndpointFlag(),
		},
		Action: func(c *cli.Context) error {
			url, err := requireQueueURL(c)
			if err != nil {
				return err
			}
			client, err := operatorSQS(c, url)
			if err != nil {
				return err
			}
			s, err := deadletter.Status(c.Context, client, url)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				enc := json.NewEncoder(c.App.Writer)
				enc.SetIndent("", "  ")
				return enc.Encode(s)
			}
			return deadletter.WriteStatus(c.App.Writer, s)
		},
	}
}
