package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/watchbot/watchbot/internal/awsenv"
	"github.com/watchbot/watchbot/progress"
)

// progressCommands are watchbot-progress's commands, with the flag each one reads and the
// function that runs it.
var progressCommands = []struct {
	name, flag, usage string
	// run calls the Store and returns what to print (nil: nothing).
	run func(ctx context.Context, s *progress.Store, a progressArgs) ([]byte, error)
}{
	{"set-total", "total", "set the total number of parts in a job (-t)", progressSetTotal},
	{"complete-part", "part", "complete a single part (-p); prints true for the one call that completed the job, else false", progressCompletePart},
	{"status", "part", "print the status of a job as JSON; with -p, whether that part is complete", progressStatus},
	{"set-metadata", "metadata", "set arbitrary JSON metadata on the job record (-m)", progressSetMetadata},
	{"fail-job", "reason", "mark a job as a failure (-r, or the words after the job id)", progressFailJob},
	{"reduce-sent", "", "mark a job as having its reduce step taken", progressReduceSent},
}

// progressArgs is what `watchbot progress` was given.
type progressArgs struct {
	command, job                         string
	total, part, metadata, reason, table string
	endpoint, ttl                        string
	json, help                           bool
	given                                []string // long names of the flags given, in order
	rest                                 []string // words after the job id
}

// progressFlags are the command's flags, writing to a. The same definitions serve the help
// text and parseProgressArgs.
func progressFlags(a *progressArgs) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "total", Aliases: []string{"t"}, Usage: "(set-total) the number of parts, `N`; parts are numbered 1 to N", Destination: &a.total},
		&cli.StringFlag{Name: "part", Aliases: []string{"p"}, Usage: "(complete-part, status) the part `N`", Destination: &a.part},
		&cli.StringFlag{Name: "metadata", Aliases: []string{"m"}, Usage: "(set-metadata) the metadata, one `JSON` document", Destination: &a.metadata},
		&cli.StringFlag{Name: "reason", Aliases: []string{"r"}, Usage: "(fail-job) why the job failed, `TEXT`", Destination: &a.reason},
		&cli.BoolFlag{Name: "json", Usage: "print one JSON object with every field, whatever the command", Destination: &a.json},
		&cli.StringFlag{Name: "table", Usage: "the progress table, a `NAME` or ARN", DefaultText: "$ProgressTable, then $WATCHBOT_PROGRESS_TABLE", Destination: &a.table},
		&cli.StringFlag{Name: "endpoint-url", Usage: "DynamoDB endpoint `URL`, e.g. a local emulator", DefaultText: "$DynamoDbEndpoint, then AWS_ENDPOINT_URL_DYNAMODB", Destination: &a.endpoint},
		&cli.StringFlag{Name: "ttl", Usage: "a job's items expire this `DURATION` after their last write (0: never)", DefaultText: "$WATCHBOT_PROGRESS_TTL, then 720h", Destination: &a.ttl},
	}
}

func progressCommand() *cli.Command {
	desc := "COMMANDS (those of Watchbot's watchbot-progress, with the same arguments and output):\n"
	for _, c := range progressCommands {
		desc += fmt.Sprintf("  %-14s %s\n", c.name, c.usage)
	}
	return &cli.Command{
		Name:      "progress",
		Usage:     "track the parts of map-reduce jobs in DynamoDB, as watchbot-progress did",
		UsageText: "watchbot progress COMMAND JOB-ID [-t N] [-p N] [-m JSON] [-r TEXT] [--json] [--table T]",
		Description: desc + "\n" +
			"Flags may come before or after the job id. The table is the ProgressTable Watchbot's reduce\n" +
			"mode passes (an ARN, whose region is used, or a name); its layout: docs/map-reduce.md. Every\n" +
			"failure exits 1, bad input included, as watchbot-progress does.",
		Flags: progressFlags(&progressArgs{}),
		// Watchbot's workers put flags after the job id, which urfave/cli stops parsing at;
		// parseProgressArgs takes them anywhere.
		SkipFlagParsing: true,
		Action: func(c *cli.Context) error {
			a, err := parseProgressArgs(c.Args().Slice())
			if err != nil {
				return progressFailure{err}
			}
			if a.help {
				tmpl := cli.CommandHelpTemplate
				if c.Command.CustomHelpTemplate != "" {
					tmpl = c.Command.CustomHelpTemplate
				}
				cli.HelpPrinter(c.App.Writer, tmpl, c.Command)
				return nil
			}
			if err := runProgress(c, a); err != nil {
				return progressFailure{err}
			}
			return nil
		},
	}
}

// progressFailure marks the failures of `watchbot progress`: all exit 1 (exitCodes).
type progressFailure struct{ err error }

func (e progressFailure) Error() string { return e.err.Error() }
func (e progressFailure) Unwrap() error { return e.err }

// shortNumber is a short flag with its number attached, "-p3", which watchbot-progress's
// parser (minimist) took as "-p 3".
var shortNumber = regexp.MustCompile(`^-([tp])(\d+)$`)

// parseProgressArgs reads COMMAND JOB-ID and the flags, which may come before, between or
// after them; "--" ends the flags.
func parseProgressArgs(args []string) (progressArgs, error) {
	var a progressArgs
	set := flag.NewFlagSet("progress", flag.ContinueOnError)
	set.SetOutput(io.Discard)
	for _, f := range progressFlags(&a) {
		if err := f.Apply(set); err != nil {
			return a, err
		}
	}
	set.BoolVar(&a.help, "help", false, "")
	set.BoolVar(&a.help, "h", false, "")
	var expanded, words []string
	for _, arg := range args {
		if m := shortNumber.FindStringSubmatch(arg); m != nil {
			expanded = append(expanded, "-"+m[1], m[2])
			continue
		}
		expanded = append(expanded, arg)
	}
	for rest := expanded; len(rest) > 0; {
		if err := set.Parse(rest); err != nil {
			var names []string
			set.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
			return a, rewriteFlagError(err, "watchbot progress", names, func(string) string { return "a valid value" })
		}
		left := set.Args()
		if n := len(rest) - len(left); n > 0 && rest[n-1] == "--" {
			words = append(words, left...)
			break
		}
		if len(left) > 0 {
			words = append(words, left[0])
			left = left[1:]
		}
		rest = left
	}
	set.Visit(func(f *flag.Flag) {
		name := map[string]string{"t": "total", "p": "part", "m": "metadata", "r": "reason", "h": "help"}[f.Name]
		if name == "" {
			name = f.Name
		}
		a.given = append(a.given, name)
	})
	if a.help {
		return a, nil
	}
	switch len(words) {
	case 0:
		return a, errors.New("no command given: watchbot progress COMMAND JOB-ID [flags] (--help lists them)")
	case 1:
		return a, fmt.Errorf("no job id given: watchbot progress %s JOB-ID [flags]", words[0])
	}
	a.command, a.job, a.rest = words[0], words[1], words[2:]
	return a, nil
}

// runProgress runs one command of a on the table and prints what watchbot-progress prints,
// or with --json one JSON object.
func runProgress(c *cli.Context, a progressArgs) error {
	cmd := -1
	for i, pc := range progressCommands {
		if pc.name == a.command {
			cmd = i
		}
	}
	if cmd < 0 {
		var names []string
		for _, pc := range progressCommands {
			names = append(names, pc.name)
		}
		msg := fmt.Sprintf("unknown command %q: want %s", a.command, strings.Join(names, ", "))
		if near := nearest(a.command, names); near != "" {
			msg += "; did you mean " + near + "?"
		}
		return errors.New(msg)
	}
	if len(a.rest) > 0 && a.command != "fail-job" {
		return fmt.Errorf("%s takes one job id; %q is one word too many (quote a job id that has spaces)", a.command, a.rest[0])
	}
	if err := progress.ValidateJobID(a.job); err != nil {
		return err
	}
	for _, name := range a.given {
		common := name == "json" || name == "table" || name == "endpoint-url" || name == "ttl" && a.command != "status"
		if name != progressCommands[cmd].flag && !common {
			fmt.Fprintf(c.App.ErrWriter, "watchbot: progress %s ignores --%s\n", a.command, name)
		}
	}
	store, where, err := progressStore(c, a)
	if err != nil {
		return err
	}
	out, err := progressCommands[cmd].run(c.Context, store, a)
	if errors.Is(err, progress.ErrTableNotFound) || errors.Is(err, progress.ErrKeySchema) {
		return fmt.Errorf("%w (%s)", err, where)
	}
	if err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	_, err = fmt.Fprintf(c.App.Writer, "%s\n", out)
	return err
}

// progressSetTotal sets the job's number of parts.
func progressSetTotal(ctx context.Context, s *progress.Store, a progressArgs) ([]byte, error) {
	total, err := progressNumber("total", a.total)
	if err != nil {
		return nil, err
	}
	created, err := s.SetTotal(ctx, a.job, total)
	if err != nil {
		return nil, err
	}
	return jsonIf(a.json, struct {
		Job     string `json:"job"`
		Total   int64  `json:"total"`
		Created bool   `json:"created"`
	}{a.job, total, created})
}

// progressCompletePart completes a part, and says whether that completed the job.
func progressCompletePart(ctx context.Context, s *progress.Store, a progressArgs) ([]byte, error) {
	part, err := progressNumber("part", a.part)
	if err != nil {
		return nil, err
	}
	done, err := s.CompletePart(ctx, a.job, part)
	if err != nil || a.json {
		return jsonOr(done, err)
	}
	return []byte(strconv.FormatBool(done.Complete)), nil
}

// progressStatus prints the job's status, or with --part whether that part is complete.
func progressStatus(ctx context.Context, s *progress.Store, a progressArgs) ([]byte, error) {
	var part int64
	if a.part != "" {
		var err error
		if part, err = progressNumber("part", a.part); err != nil {
			return nil, err
		}
	}
	st, err := s.Status(ctx, a.job, part)
	if err != nil || a.json {
		return jsonOr(st, err)
	}
	return st.Compat()
}

// progressSetMetadata sets the job's metadata, one JSON document.
func progressSetMetadata(ctx context.Context, s *progress.Store, a progressArgs) ([]byte, error) {
	if a.metadata == "" {
		return nil, errors.New("set-metadata needs --metadata JSON")
	}
	doc, err := progress.CompactMetadata([]byte(a.metadata))
	if err != nil {
		return nil, fmt.Errorf("--metadata: %w", err)
	}
	if err := s.SetMetadata(ctx, a.job, doc); err != nil {
		return nil, err
	}
	return jsonIf(a.json, struct {
		Job      string          `json:"job"`
		Metadata json.RawMessage `json:"metadata"`
	}{a.job, doc})
}

// progressFailJob marks the job failed, with --reason or the words after the job id.
func progressFailJob(ctx context.Context, s *progress.Store, a progressArgs) ([]byte, error) {
	reason := a.reason
	if reason == "" {
		// The words after the job id, as watchbot-progress's own example passes them.
		reason = strings.Join(a.rest, " ")
	}
	if err := s.FailJob(ctx, a.job, reason); err != nil {
		return nil, err
	}
	return jsonIf(a.json, struct {
		Job    string `json:"job"`
		Failed bool   `json:"failed"`
		Reason string `json:"reason"`
	}{a.job, true, reason})
}

// progressReduceSent marks the job's reduce step taken.
func progressReduceSent(ctx context.Context, s *progress.Store, a progressArgs) ([]byte, error) {
	if err := s.ReduceSent(ctx, a.job); err != nil {
		return nil, err
	}
	return jsonIf(a.json, struct {
		Job        string `json:"job"`
		ReduceSent bool   `json:"reduceSent"`
	}{a.job, true})
}

// jsonIf returns v as JSON with --json, and nothing to print without: watchbot-progress
// prints nothing for these commands.
func jsonIf(asJSON bool, v any) ([]byte, error) {
	if !asJSON {
		return nil, nil
	}
	return json.Marshal(v)
}

// jsonOr returns v as JSON, or err.
func jsonOr(v any, err error) ([]byte, error) {
	if err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

// progressNumber reads the whole number of --name.
func progressNumber(name, s string) (int64, error) {
	if s == "" {
		return 0, fmt.Errorf("--%s is required (-%c N)", name, name[0])
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("--%s %q is not a whole number", name, s)
	}
	return n, nil
}

// progressStore finds the table (--table, $ProgressTable, $WATCHBOT_PROGRESS_TABLE) and the
// endpoint (--endpoint-url, $DynamoDbEndpoint, the SDK's AWS_ENDPOINT_URL_DYNAMODB and
// AWS_ENDPOINT_URL), and returns the Store and where the table came from, for errors.
func progressStore(c *cli.Context, a progressArgs) (*progress.Store, string, error) {
	raw, source := a.table, "--table"
	for _, env := range []string{"ProgressTable", "WATCHBOT_PROGRESS_TABLE"} {
		if raw == "" {
			raw, source = os.Getenv(env), "$"+env
		}
	}
	if raw == "" {
		return nil, "", errors.New("no progress table: give --table, or set $ProgressTable (as Watchbot's reduce mode does) or $WATCHBOT_PROGRESS_TABLE")
	}
	table, err := progress.ParseTable(raw)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", source, err)
	}
	opts := awsenv.Options{Endpoint: a.endpoint, Region: table.Region}
	if opts.Endpoint == "" {
		opts.Endpoint = os.Getenv("DynamoDbEndpoint")
	}
	cfg, err := awsenv.Load(c.Context, opts)
	if err != nil {
		return nil, "", err
	}
	ttl, err := progressTTL(a.ttl)
	if err != nil {
		return nil, "", err
	}
	where := fmt.Sprintf("table from %s, region %s", source, cfg.Region)
	return progress.NewStore(awsenv.DynamoDB(cfg, opts), table.Name, ttl), where, nil
}

// minProgressTTL is the shortest --ttl but 0: a job whose items expired while its parts still
// complete would be forgotten halfway.
const minProgressTTL = time.Hour

// progressTTL reads --ttl, else $WATCHBOT_PROGRESS_TTL, else progress.DefaultTTL, as the other
// duration flags read theirs (parseDuration: 720h, or whole seconds).
func progressTTL(given string) (time.Duration, error) {
	raw, source := given, "--ttl"
	if raw == "" {
		raw, source = os.Getenv("WATCHBOT_PROGRESS_TTL"), "$WATCHBOT_PROGRESS_TTL"
	}
	if raw == "" {
		return progress.DefaultTTL, nil
	}
	ttl, err := parseDuration(raw)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%s: %w; 0 never expires", source, err)
	case ttl != 0 && ttl < minProgressTTL:
		return 0, fmt.Errorf("%s %v: at least %v, or 0 to never expire", source, ttl, minProgressTTL)
	}
	return ttl, nil
}
