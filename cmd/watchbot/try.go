package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/supervisor"
)

// tryExits is `watchbot try`'s exit status for each decision (a batch exits with the highest
// of its messages'); exitCodes documents them. Bad usage is 2 and a failure to run is 1, as
// for every command.
var tryExits = map[string]int{"delete": 0, "release": 10, "retry": 11, "pause": 11, "redrive": 12, "dead-letter": 13}

// decided is try's result: not a failure, an exit status.
type decided int

func (d decided) Error() string { return "" }

func tryCommand(stdout io.Writer) *cli.Command {
	return &cli.Command{
		Name:      "try",
		Usage:     "run a worker once on a message, as listen would, and print what listen would do",
		ArgsUsage: "-- COMMAND [ARG...]",
		Description: "No queue is needed. The message comes from --body, --file or stdin (with --batch, one message per line).\n" +
			"The exit status says what listen would do: 0 delete, 10 release, 11 retry or pause, 12 left to the redrive policy,\n" +
			"13 dead-letter (a batch: the highest); 2 bad usage, a missing or non-executable COMMAND included;\n" +
			"1 try itself failed. A COMMAND that is there but cannot start (a bad #! line) is a retry, as in listen.",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "body", Usage: "the message body"},
			&cli.StringFlag{Name: "file", Usage: "read the message body from this `FILE`"},
			&cli.BoolFlag{Name: "batch", Usage: "read one message per line of stdin and run them as one batch (batch mode)"},
			&cli.GenericFlag{Name: "attr", Value: &repeated{}, Usage: "a message attribute `NAME=VALUE` (repeatable)"},
			&cli.StringFlag{Name: "group-id", Usage: "the message's MessageGroupId `G` (a FIFO group, or a fair queue's tenant)"},
			&cli.GenericFlag{Name: "queue-url", Value: &repeated{}, Usage: "the queue `URL` the message is taken to come from; once (no SQS call)"},
			&cli.StringFlag{Name: "subject", Usage: "deliver the body inside an SNS notification with this subject, as listen unwraps it"},
			&cli.IntFlag{Name: "attempt", Value: 1, Usage: "the attempt this run is (ApproximateReceiveCount)"},
			&cli.IntFlag{Name: "max-attempts", Value: 10, Usage: "attempts before a message is dead-lettered (the queue's maxReceiveCount)"},
		}, append(cliFlags(tryListenSettings()),
			&cli.BoolFlag{Name: "json", Usage: "print the decision as JSON"},
			logFormatFlag(),
		)...),
		Action: func(c *cli.Context) error {
			if err := supervisor.PlatformError("try", runtime.GOOS); err != nil {
				return err
			}
			cfg, err := tryConfig(c)
			if err != nil {
				return err
			}
			msgs, err := tryMessages(c)
			if err != nil {
				return err
			}
			if len(msgs) > 1 && !c.IsSet("batch-size") {
				cfg.BatchSize = min(len(msgs), listenspec.MaxBatchSize)
			}
			log, err := newLogger(c, logFormat(c), "info")
			if err != nil {
				return err
			}
			payloads, err := tryPayloads(c, cfg)
			if err != nil {
				return err
			}
			decisions, err := supervisor.Try(c.Context, cfg, msgs, c.Int("attempt"), payloads, log)
			if err != nil {
				return err
			}
			if err := printDecisions(stdout, decisions, cfg.BatchSize > 1, c.Bool("json")); err != nil {
				return err
			}
			return tryExit(decisions)
		},
	}
}

// tryConfig copies try's flags into the configuration listen would run the message with: the
// rows of listenSettings that try offers, read as listen reads them, and try's own.
func tryConfig(c *cli.Context) (supervisor.Config, error) {
	a := defaultListenArgs()
	if err := readListenArgs(c, tryListenSettings(), &a); err != nil {
		return a.Listen, err
	}
	cfg := a.Listen
	cfg.Command = c.Args().Slice()
	cfg.MaxAttempts = c.Int("max-attempts")
	if cfg.MaxAttempts < 1 {
		// listen's 0 reads the queue's maxReceiveCount; try has no queue to read.
		return cfg, usagef("--max-attempts (%d) must be between 1 and %d: try has no queue whose maxReceiveCount it could read", cfg.MaxAttempts, listenspec.MaxAttempts)
	}
	var err error
	cfg.QueueURL, err = tryQueueURL(c)
	return cfg, err
}

// tryListenSettings are the rows of listenSettings that `watchbot try` offers: the settings
// of how one run goes. try's batch, unless --batch-size says otherwise, holds the messages
// given, --lambda or not.
func tryListenSettings() []listenSetting {
	var rows []listenSetting
	for _, s := range listenSettings {
		if s.try {
			if s.tryDefaultText != "" {
				s.defaultText = s.tryDefaultText
			}
			rows = append(rows, s)
		}
	}
	return rows
}

// tryPayloads returns the S3 client that fetches the payloads of the buckets cfg allows as
// listen does, or nil when none is allowed.
func tryPayloads(c *cli.Context, cfg supervisor.Config) (supervisor.PayloadAPI, error) {
	if len(cfg.Payload.Buckets) == 0 {
		return nil, nil
	}
	if err := supervisor.CheckPayload(cfg.Payload); err != nil {
		return nil, err
	}
	return operatorS3(c, cfg.QueueURL)
}

// tryMessages reads the message, or the batch, from the flags or stdin.
func tryMessages(c *cli.Context) ([]supervisor.TryMessage, error) {
	attrs := map[string]string{}
	for _, kv := range repeatedValues(c, "attr") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usagef("--attr (%q) must be NAME=VALUE", kv)
		}
		if _, dup := attrs[k]; dup {
			return nil, usagef("--attr %s is given twice", k)
		}
		attrs[k] = v
	}
	var bodies []string
	switch {
	case c.IsSet("body") && c.IsSet("file"), c.Bool("batch") && (c.IsSet("body") || c.IsSet("file")):
		return nil, usagef("give the message one way: --body, --file, or stdin (--batch reads stdin)")
	case c.IsSet("body"):
		bodies = []string{c.String("body")}
	case c.IsSet("file"):
		data, err := os.ReadFile(c.String("file"))
		if err != nil {
			return nil, usagef("--file: %v", err)
		}
		bodies = []string{string(data)}
	case c.Bool("batch"):
		lines, err := readStdin(c, func(r io.Reader) ([]string, error) {
			var lines []string
			sc := bufio.NewScanner(r)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				if line := sc.Text(); line != "" {
					lines = append(lines, line)
				}
			}
			return lines, sc.Err()
		})
		if err := stdinError(err, "the batch"); err != nil {
			return nil, err
		}
		bodies = lines
	default:
		data, err := readStdin(c, func(r io.Reader) ([]byte, error) { return io.ReadAll(io.LimitReader(r, 1<<20+1)) })
		if err := stdinError(err, "the message"); err != nil {
			return nil, err
		}
		bodies = []string{strings.TrimSuffix(string(data), "\n")}
	}
	if len(bodies) == 0 || (len(bodies) == 1 && bodies[0] == "" && !c.IsSet("body")) {
		return nil, usagef("no message: stdin or --file is empty (to try an empty message, give --body '' explicitly)")
	}
	msgs := make([]supervisor.TryMessage, len(bodies))
	for i, b := range bodies {
		if s := c.String("subject"); c.IsSet("subject") {
			// As SNS delivers to an SQS subscription without raw delivery.
			env, _ := json.Marshal(map[string]string{"Type": "Notification", "MessageId": fmt.Sprintf("sns-%d", i+1),
				"TopicArn": "arn:aws:sns:us-east-1:000000000000:try", "Subject": s, "Message": b})
			b = string(env)
		}
		msgs[i] = supervisor.TryMessage{Body: b, Attributes: attrs, GroupID: c.String("group-id")}
	}
	return msgs, nil
}

// tryQueueURL is --queue-url, checked: the one queue the message is taken to come from. A
// message comes from one queue, so try refuses several, though listen serves several: run try
// once per queue to see how a worker treats each.
func tryQueueURL(c *cli.Context) (string, error) {
	urls := repeatedValues(c, "queue-url")
	switch {
	case len(urls) == 0:
		return "", nil
	case len(urls) > 1:
		return "", usagef("--queue-url is given %d times: try runs one message, which comes from one queue (run try once per queue)", len(urls))
	}
	if err := queueattr.ValidateURL(urls[0]); err != nil {
		return "", usagef("--queue-url: %v", err)
	}
	return urls[0], nil
}

// stdinError passes readStdin's refusals and interruptions on, and makes a failed read of what
// a usage error.
func stdinError(err error, what string) error {
	var stop interrupted
	var usage usageError
	if err == nil || errors.As(err, &stop) || errors.As(err, &usage) {
		return err
	}
	return usagef("reading %s from stdin: %v", what, err)
}

// printDecisions prints one line per message (prefixed by its id in a batch), or JSON: the
// decision as one object, or a batch's as {"decisions": [...]}.
func printDecisions(w io.Writer, ds []supervisor.Decision, batch, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		if batch {
			return enc.Encode(map[string]any{"decisions": ds})
		}
		return enc.Encode(ds[0])
	}
	for _, d := range ds {
		if batch {
			fmt.Fprintf(w, "%s: ", d.MessageID)
		}
		fmt.Fprintln(w, d.String())
	}
	if ds[0].Answer != "" {
		fmt.Fprintln(w, "the function answered:", ds[0].Answer)
	}
	return nil
}

// tryExit is the exit status for the decisions: the highest of tryExits.
func tryExit(ds []supervisor.Decision) error {
	code := 0
	for _, d := range ds {
		code = max(code, tryExits[d.Action])
	}
	if code == 0 {
		return nil
	}
	return decided(code)
}
