package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/schollz/progressbar/v3"
	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/watchbot/watchbot/deadletter"
	"github.com/watchbot/watchbot/internal/awsenv"
	"github.com/watchbot/watchbot/internal/queueattr"
)

// dlqLocationFlags name the queues; they are accepted before or after the verb.
func dlqLocationFlags() []cli.Flag {
	return []cli.Flag{
		oneQueueFlag("the source `URL` (its redrive policy names the DLQ)"),
		&cli.StringFlag{Name: "dlq-url", Usage: "the dead-letter queue's `URL` itself"},
		&cli.StringFlag{Name: "to", Usage: "with --dlq-url: the queue `URL` replay sends to (its redrive policy must name the DLQ)"},
		opEndpointFlag(),
	}
}

func opEndpointFlag() cli.Flag {
	return &cli.StringFlag{Name: "endpoint-url", Usage: "SQS endpoint `URL`, e.g. a local emulator (AWS_ENDPOINT_URL_SQS works too)"}
}

func deadLetterCommand() *cli.Command {
	verb := func(cmd *cli.Command) *cli.Command {
		cmd.Flags = append(cmd.Flags, dlqLocationFlags()...)
		return cmd
	}
	return &cli.Command{
		Name:      "dead-letter",
		Usage:     "count, peek at, replay, purge, export, import and triage a dead-letter queue",
		UsageText: "watchbot dead-letter (--queue-url SRC | --dlq-url DLQ [--to SRC]) VERB [flags]",
		Description: "The dead-letter queue (DLQ) is the one SRC's redrive policy names, or DLQ itself. Replay sends\n" +
			"messages to SRC, or with --dlq-url to --to, or to the DLQ's only source queue.",
		Flags: dlqLocationFlags(),
		Subcommands: []*cli.Command{
			verb(dlqCountCommand()),
			verb(dlqPeekCommand()),
			verb(dlqReplayCommand()),
			verb(dlqPurgeCommand()),
			verb(dlqExportCommand()),
			verb(dlqImportCommand()),
			verb(dlqTriageCommand()),
		},
	}
}

// opFlag returns the named flag's value from the innermost command that set it, so a
// flag given before or after the verb means the same.
func opFlag(c *cli.Context, name string) string {
	for _, cc := range c.Lineage() {
		if slices.Contains(cc.LocalFlagNames(), name) {
			return cc.String(name)
		}
	}
	return ""
}

// operatorSQS returns the SQS client of the queue at queueURL, built as listen builds each
// queue's: the SDK's default chain, and the endpoint and region that --endpoint-url or else
// the URL gives (awsenv.QueueSQS).
func operatorSQS(c *cli.Context, queueURL string) (*sqs.Client, error) {
	opts := awsenv.Options{Endpoint: opFlag(c, "endpoint-url"), QueueURL: queueURL}
	cfg, err := awsenv.Load(c.Context, opts)
	if err != nil {
		return nil, err
	}
	client, _ := awsenv.QueueSQS(cfg, opts, os.Getenv)
	return client, nil
}

// opLocateDLQ reads the location flags, checks them, and finds the queues.
func opLocateDLQ(c *cli.Context) (*sqs.Client, deadletter.Queues, error) {
	loc := deadletter.Location{DLQURL: opFlag(c, "dlq-url"), To: opFlag(c, "to")}
	if opFlag(c, "queue-url") != "" || loc.DLQURL == "" {
		// From the environment too, as listen takes it; a dead-letter queue belongs to one queue.
		url, err := oneQueueURL(c, "the dead-letter tools work on the dead-letter queue of")
		if err != nil {
			return nil, deadletter.Queues{}, err
		}
		loc.QueueURL = url
	}
	if err := loc.Validate(); err != nil {
		return nil, deadletter.Queues{}, usageError{err}
	}
	client, err := operatorSQS(c, loc.QueueURL+loc.DLQURL)
	if err != nil {
		return nil, deadletter.Queues{}, err
	}
	q, err := deadletter.Locate(c.Context, client, loc)
	if errors.Is(err, queueattr.ErrNoRedrivePolicy) || errors.Is(err, deadletter.ErrNotDeadLetterQueue) {
		return nil, deadletter.Queues{}, usageError{err}
	}
	return client, q, err
}

// opTerminal reports whether v is a terminal.
func opTerminal(v any) bool {
	f, ok := v.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// opProgress returns a progress bar with rate on stderr when stderr is a terminal and the job
// is longer than a screenful (or of unknown length), and no progress otherwise.
func opProgress(c *cli.Context, total int64, what string) deadletter.Progress {
	if !opTerminal(c.App.ErrWriter) || (total >= 0 && total <= 20) {
		return deadletter.NoProgress{}
	}
	return progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(c.App.ErrWriter),
		progressbar.OptionSetDescription(what),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("msg"),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)
}

func dlqCountCommand() *cli.Command {
	return &cli.Command{
		Name:  "count",
		Usage: "print the visible, in-flight and delayed messages in the dead-letter queue",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print one JSON object"}},
		Action: func(c *cli.Context) error {
			client, q, err := opLocateDLQ(c)
			if err != nil {
				return err
			}
			n, err := deadletter.Count(c.Context, client, q)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return json.NewEncoder(c.App.Writer).Encode(struct {
					Queue string `json:"queue"`
					deadletter.Counts
				}{q.DLQ.URL, n})
			}
			_, err = fmt.Fprintf(c.App.Writer, "dead-letter queue: %s\nvisible:   %d\nin flight: %d\ndelayed:   %d\n",
				queueattr.NameFromURL(q.DLQ.URL), n.Visible, n.InFlight, n.Delayed)
			return err
		},
	}
}

func dlqPeekCommand() *cli.Command {
	return &cli.Command{
		Name:  "peek",
		Usage: "show messages without consuming them (each peek counts as one receive)",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "limit", Value: 10, Usage: "show at most `N` messages"},
			&cli.BoolFlag{Name: "json", Usage: "write JSON Lines with whole bodies"},
			resolvePayloadsFlag(),
		},
		Action: func(c *cli.Context) error {
			limit := c.Int("limit")
			if err := deadletter.CheckPeekLimit(limit); err != nil {
				return usageError{err}
			}
			client, q, err := opLocateDLQ(c)
			if err != nil {
				return err
			}
			s3c, err := resolvePayloads(c, q.DLQ.URL)
			if err != nil {
				return err
			}
			w := c.App.Writer
			enc := json.NewEncoder(w)
			enc.SetEscapeHTML(false)
			maxBody := 0
			if opTerminal(w) {
				maxBody = 300
			}
			n, err := deadletter.Peek(c.Context, client, q, limit, func(m deadletter.Message) error {
				rec := deadletter.RecordOf(m)
				if s3c != nil && rec.Payload != nil {
					if err := rec.Resolve(c.Context, s3c); err != nil {
						fmt.Fprintf(c.App.ErrWriter, "watchbot: message %s: body not fetched from %s: %s\n", m.ID, rec.Payload.URI, rec.Payload.Error)
					}
				}
				if c.Bool("json") {
					return enc.Encode(rec)
				}
				return deadletter.WriteResolvedListing(w, m, rec, maxBody)
			})
			if n > 0 && !c.Bool("json") {
				fmt.Fprintln(w, "peek receives each message it shows, which adds one to its receive count; the counts above are from before it.")
			}
			if errors.Is(err, context.Canceled) {
				return interrupted{"peek stopped; the messages it held are visible again"}
			}
			if err != nil {
				return err
			}
			if n == 0 && !c.Bool("json") {
				_, err = fmt.Fprintf(w, "%s has no visible messages.\n", queueattr.NameFromURL(q.DLQ.URL))
			}
			return err
		},
	}
}

func dlqReplayCommand() *cli.Command {
	return &cli.Command{
		Name:  "replay",
		Usage: "send matching messages back to the source queue, each deleted from the DLQ once sent",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "limit", Aliases: []string{"max"}, Usage: "replay at most `N` messages", DefaultText: "all that match"},
			&cli.GenericFlag{Name: "id", Value: &repeated{}, Usage: "replay only this `ID`: a DLQ id or an original id, as peek shows (repeatable)"},
			&cli.StringFlag{Name: "match-body", Usage: "replay only messages whose body matches `REGEX` (RE2 syntax)"},
			&cli.GenericFlag{Name: "match-attr", Value: &repeated{}, Usage: "replay only messages with attribute `NAME=VALUE` (repeatable; all must match)"},
			&cli.Float64Flag{Name: "rate", Usage: "send at most `N` messages per second (a positive number)", DefaultText: "no limit"},
			&cli.BoolFlag{Name: "dry-run", Usage: "list what would be replayed; change nothing"},
		},
		Action: func(c *cli.Context) error {
			cfg := deadletter.DefaultReplayConfig()
			cfg.Limit = c.Int("limit")
			filter, err := deadletter.ParseFilter(c.String("match-body"), repeatedValues(c, "match-attr"))
			if err != nil {
				return usageError{err}
			}
			cfg.Filter = filter
			cfg.IDs = repeatedValues(c, "id")
			cfg.DryRun = c.Bool("dry-run")
			if c.IsSet("rate") {
				cfg.Rate = c.Float64("rate")
				if cfg.Rate <= 0 {
					return usagef("--rate (%v) must be a positive number of messages per second", cfg.Rate)
				}
			}
			if err := cfg.Validate(); err != nil {
				return usageError{err}
			}
			client, q, err := opLocateDLQ(c)
			if err != nil {
				return err
			}
			cfg.Out = c.App.Writer
			cfg.Errs = c.App.ErrWriter
			bar := opProgress(c, q.DLQ.Visible, "replay")
			cfg.Progress = bar
			sum, err := deadletter.Replay(c.Context, client, q, cfg)
			_ = bar.Finish()
			w := c.App.Writer
			if errors.Is(err, context.Canceled) {
				fmt.Fprint(w, "interrupted: ")
			}
			if sum.DryRun {
				fmt.Fprintf(w, "dry run: would replay %d, skip %d; nothing was changed\n", sum.Replayed, sum.Skipped)
			} else {
				fmt.Fprintf(w, "replayed %d, skipped %d, failed %d", sum.Replayed, sum.Skipped, sum.Failed+sum.NotDeleted)
				if sum.CameBack > 0 {
					fmt.Fprintf(w, "; %d came back to the dead-letter queue during the run (they failed again) and were left there", sum.CameBack)
				}
				fmt.Fprintln(w)
			}
			if errors.Is(err, context.Canceled) {
				return interrupted{"replay stopped; the messages it held are visible in the dead-letter queue again"}
			}
			if err != nil {
				return err
			}
			return sum.Err()
		},
	}
}

func dlqPurgeCommand() *cli.Command {
	return &cli.Command{
		Name:  "purge",
		Usage: "delete every message in the dead-letter queue for good",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "yes", Usage: "confirm the purge"}},
		Action: func(c *cli.Context) error {
			if !c.Bool("yes") {
				return usagef("purge deletes every message in the dead-letter queue for good: add --yes to confirm (export --delete keeps a copy)")
			}
			client, q, err := opLocateDLQ(c)
			if err != nil {
				return err
			}
			if err := deadletter.Purge(c.Context, client, q); err != nil {
				return err
			}
			_, err = fmt.Fprintf(c.App.Writer, "purged %s (it held about %d messages)\n", queueattr.NameFromURL(q.DLQ.URL), q.DLQ.Visible+q.DLQ.InFlight+q.DLQ.Delayed)
			return err
		},
	}
}

func dlqExportCommand() *cli.Command {
	return &cli.Command{
		Name:      "export",
		Usage:     "write the dead-letter queue's messages to FILE as JSON Lines",
		ArgsUsage: "FILE",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "delete", Usage: "delete each message once its line is written and synced to disk"},
			&cli.IntFlag{Name: "limit", Usage: "export at most `N` messages", DefaultText: "all"},
			resolvePayloadsFlag(),
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usagef("export takes one argument, the FILE to write")
			}
			cfg := deadletter.ExportConfig{Delete: c.Bool("delete"), Limit: c.Int("limit")}
			if err := cfg.Validate(); err != nil {
				return usageError{err}
			}
			name := c.Args().First()
			client, q, err := opLocateDLQ(c)
			if err != nil {
				return err
			}
			f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if errors.Is(err, fs.ErrExist) {
				return usagef("export FILE %s exists: an export never overwrites, choose a new name", name)
			}
			if err != nil {
				return fmt.Errorf("create export file: %w", err)
			}
			if cfg.Payloads, err = resolvePayloads(c, q.DLQ.URL); err != nil {
				return err
			}
			cfg.Errs = prefixed{c.App.ErrWriter}
			bar := opProgress(c, q.DLQ.Visible, "export")
			cfg.Progress = bar
			sum, err := deadletter.Export(c.Context, client, q, f, cfg)
			_ = bar.Finish()
			if cerr := f.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("close %s: %w", name, cerr)
			}
			fmt.Fprintf(c.App.Writer, "exported %d messages to %s", sum.Exported, name)
			if c.Bool("delete") {
				fmt.Fprintf(c.App.Writer, ", deleted %d from %s", sum.Deleted, queueattr.NameFromURL(q.DLQ.URL))
			}
			if cfg.Payloads != nil {
				fmt.Fprintf(c.App.Writer, ", %d bodies fetched from S3", sum.PayloadsResolved)
			}
			fmt.Fprintln(c.App.Writer)
			if err != nil {
				return err
			}
			if sum.NotDeleted > 0 {
				return fmt.Errorf("export: %d messages were written to %s but could not be deleted from the dead-letter queue", sum.NotDeleted, name)
			}
			if sum.PayloadsFailed > 0 {
				kept := ""
				if c.Bool("delete") {
					kept = ", and their messages stay in the dead-letter queue"
				}
				return fmt.Errorf("export: %d bodies could not be fetched from S3 (listed above): their lines keep the pointer%s", sum.PayloadsFailed, kept)
			}
			return nil
		},
	}
}

func dlqImportCommand() *cli.Command {
	return &cli.Command{
		Name:      "import",
		Usage:     "send the messages of a JSON Lines FILE (as export writes it) to the dead-letter queue",
		ArgsUsage: "FILE",
		Description: "A line that is malformed or that SQS refuses is reported with its line number and not sent;\n" +
			"the other lines are still imported and the command exits 1 with a count at the end.",
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usagef("import takes one argument, the FILE to read")
			}
			name := c.Args().First()
			f, err := os.Open(name)
			if err != nil {
				return usagef("import FILE: %v", err)
			}
			defer f.Close()
			client, q, err := opLocateDLQ(c)
			if err != nil {
				return err
			}
			bar := opProgress(c, -1, "import")
			sum, err := deadletter.Import(c.Context, client, q, f, deadletter.ImportConfig{Name: name, Errs: c.App.ErrWriter, Progress: bar})
			_ = bar.Finish()
			fmt.Fprintf(c.App.Writer, "imported %d messages into %s", sum.Imported, queueattr.NameFromURL(q.DLQ.URL))
			if sum.Rejected > 0 {
				fmt.Fprintf(c.App.Writer, ", %d lines not imported", sum.Rejected)
			}
			fmt.Fprintln(c.App.Writer)
			if err != nil {
				return err
			}
			return sum.Err()
		},
	}
}

func dlqTriageCommand() *cli.Command {
	return &cli.Command{
		Name:  "triage",
		Usage: "walk the dead-letter queue one message at a time: replay, keep, delete, show body, quit",
		Action: func(c *cli.Context) error {
			if !opTerminal(c.App.Reader) {
				return usagef("triage is interactive and stdin is not a terminal: in scripts use peek, replay --match-attr/--match-body, or export and import")
			}
			client, q, err := opLocateDLQ(c)
			if err != nil {
				return err
			}
			sum, err := deadletter.Triage(c.Context, client, q, deadletter.TriageConfig{In: c.App.Reader, Out: c.App.Writer, MaxBody: 300})
			fmt.Fprintf(c.App.Writer, "triage: replayed %d, kept %d, deleted %d\n", sum.Replayed, sum.Kept, sum.Deleted)
			return err
		},
	}
}
