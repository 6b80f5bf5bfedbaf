package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/urfave/cli/v2"

	"github.com/watchbot/watchbot/producer"
)

func sendCommand() *cli.Command {
	return &cli.Command{
		Name:      "send",
		Usage:     "send messages: --body, --file, or one message per line on stdin",
		UsageText: "watchbot send --queue-url URL [--body S | --file F | --file - | < lines] [--attr K=V]... [--delay D] [--group-id G] [--payload-bucket B]",
		Description: "Lines on stdin are read to the end and checked before anything is sent: one bad line sends\n" +
			"nothing. They are sent with SendMessageBatch (10 per call, 1 MiB at most). The message ids are\n" +
			"printed one per line, in input order. --file - sends all of stdin as one body.\n" +
			"With --payload-bucket, a body larger than the queue takes (or than --payload-threshold) is\n" +
			"written to S3 and the message carries a pointer to it, as AWS's SQS Extended Client\n" +
			"libraries write it: listen and those libraries read the body back (docs/payloads.md).",
		Flags: append([]cli.Flag{
			oneQueueFlag("the queue `URL`"),
			&cli.StringFlag{Name: "body", Usage: "send one message with body `S`"},
			&cli.StringFlag{Name: "file", Usage: "send one message whose body is the content of `F` (- for all of stdin)"},
			&cli.GenericFlag{Name: "attr", Value: &repeated{}, Usage: "message attribute `K=V`, K:Number=V or K:Binary=BASE64 (repeatable)"},
			&cli.StringFlag{Name: "delay", Usage: "deliver after `D` (Go duration or seconds, at most 15m; standard queues)"},
			&cli.StringFlag{Name: "group-id", Usage: "message group id `G`: required on FIFO queues; on a standard queue, the fair-queue tenant"},
			opEndpointFlag(),
		}, sendPayloadFlags()...),
		Action: sendAction,
	}
}

// sendAction reads what to send, checks all of it, then sends it and prints the ids.
func sendAction(c *cli.Context) error {
	req, release, err := sendRequest(c)
	if err != nil {
		return err
	}
	defer release()
	if err := req.Validate(); err != nil {
		return usageError{err}
	}
	client, err := operatorSQS(c, req.QueueURL)
	if err != nil {
		return err
	}
	if req.Offload != nil {
		if req.Offload.API, err = operatorS3(c, req.QueueURL); err != nil {
			return err
		}
	}
	tr := startSendTrace(c.Context, c.App.ErrWriter, req.QueueURL, len(req.Bodies))
	req.TraceContext = tr.context
	results, err := producer.Deliver(c.Context, client, req)
	tr.end(results, err)
	warnSentWithout(c.App.ErrWriter, req, results)
	return reportSent(c, req, results, err)
}

// sendRequest reads send's flags and the bodies into a request. The returned function
// releases what the bodies hold open; on an error it is released already.
func sendRequest(c *cli.Context) (producer.Request, func(), error) {
	nothing := func() {}
	queueURL, err := requireQueueURL(c)
	if err != nil {
		return producer.Request{}, nothing, err
	}
	offload, err := sendOffload(c)
	if err != nil {
		return producer.Request{}, nothing, err
	}
	req := producer.Request{QueueURL: queueURL, GroupID: c.String("group-id"), Offload: offload}
	if err := parseSendAttrs(repeatedValues(c, "attr"), &req); err != nil {
		return producer.Request{}, nothing, usageError{err}
	}
	if c.IsSet("delay") {
		d, err := parseDuration(c.String("delay"))
		if err != nil {
			return producer.Request{}, nothing, usagef("--delay: %v", err)
		}
		req.Delay = d
	}
	bodies, release, err := sendBodies(c, offload != nil)
	if err != nil {
		return producer.Request{}, nothing, err
	}
	req.Bodies = bodies
	return req, release, nil
}

// sendBodies reads the bodies from --body, --file or stdin's lines; offload says that
// bodies too large for SQS may go to S3. The returned function releases what the bodies hold
// open; on an error it is released already.
func sendBodies(c *cli.Context, offload bool) ([]producer.Body, func(), error) {
	nothing := func() {}
	switch {
	case c.IsSet("body") && c.IsSet("file"):
		return nil, nothing, usagef("give --body or --file, not both")
	case c.IsSet("body"):
		return []producer.Body{{Text: c.String("body"), Source: "--body"}}, nothing, nil
	case c.IsSet("file"):
		b, release, err := readSendFile(c, c.String("file"), offload)
		if err != nil {
			return nil, nothing, err
		}
		return []producer.Body{b}, release, nil
	}
	read := func(r io.Reader) ([]producer.Body, error) { return producer.ReadLines(r, "stdin") }
	release := nothing
	if offload {
		// Large lines wait in a file, not in memory, until they go to S3.
		spool, err := newSendSpool()
		if err != nil {
			return nil, nothing, err
		}
		release = spool.close
		read = func(r io.Reader) ([]producer.Body, error) { return producer.ReadLinesSpooled(r, "stdin", spool.f) }
	}
	bodies, err := readStdin(c, read)
	if err := stdinError(err, "messages"); err != nil {
		release()
		return nil, nothing, err
	}
	if len(bodies) == 0 {
		release()
		return nil, nothing, usagef("nothing to send: stdin is empty (give --body, --file or lines on stdin)")
	}
	return bodies, release, nil
}

// reportSent prints the id of each message sent, on stdout in input order, and each one not
// sent on stderr; err is Deliver's.
func reportSent(c *cli.Context, req producer.Request, results []producer.Result, err error) error {
	var bad *producer.InputError
	if errors.As(err, &bad) {
		for _, p := range bad.Problems {
			fmt.Fprintf(c.App.ErrWriter, "watchbot: %s\n", withFlags(p, nil))
		}
		return usagef("nothing sent: %d bad input(s), listed above", len(bad.Problems))
	}
	if err != nil {
		return err
	}
	failed := 0
	for i, r := range results {
		if r.Err != nil {
			failed++
			fmt.Fprintf(c.App.ErrWriter, "watchbot: %s: not sent: %v\n", req.Bodies[i].Source, r.Err)
			continue
		}
		fmt.Fprintln(c.App.Writer, r.MessageID)
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d messages not sent (listed above); the others were", failed, len(results))
	}
	return nil
}

// warnSentWithout reports the messages sent without part of their trace context, one line
// per reason: the bodies of one send share their attributes, so one reason usually covers
// them all.
func warnSentWithout(stderr io.Writer, req producer.Request, results []producer.Result) {
	var reasons []string
	sources := map[string][]string{}
	for i, r := range results {
		if r.Warning == "" || r.Err != nil {
			continue
		}
		if _, seen := sources[r.Warning]; !seen {
			reasons = append(reasons, r.Warning)
		}
		sources[r.Warning] = append(sources[r.Warning], req.Bodies[i].Source)
	}
	for _, w := range reasons {
		who := sources[w][0]
		if n := len(sources[w]); n > 1 {
			who = fmt.Sprintf("%d messages (%s, …)", n, who)
		}
		fmt.Fprintf(stderr, "watchbot: warning: %s: %s\n", who, w)
	}
}

func parseSendAttrs(values []string, req *producer.Request) error {
	for _, s := range values {
		name, v, err := producer.ParseAttribute(s)
		if err != nil {
			return fmt.Errorf("--attr %w", err)
		}
		if req.Attributes == nil {
			req.Attributes = map[string]types.MessageAttributeValue{}
		}
		if _, dup := req.Attributes[name]; dup {
			return fmt.Errorf("--attr %s is given twice", name)
		}
		req.Attributes[name] = v
	}
	return nil
}
