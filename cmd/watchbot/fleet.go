package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/urfave/cli/v2"

	"github.com/watchbot/watchbot/app"
	"github.com/watchbot/watchbot/internal/awsenv"
	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/setting"
	"github.com/watchbot/watchbot/limits"
)

// defaultWaitTimeout is how long a fleet command waits for the tasks to acknowledge.
const defaultWaitTimeout = 30 * time.Second

func fleetCommand() *cli.Command {
	return &cli.Command{
		Name:      "fleet",
		Usage:     "pause, resume and retune every listen sharing a --limits-table, live, and see who obeyed",
		UsageText: "watchbot fleet VERB --limits-table TABLE [flags]",
		Description: "Every listen naming the table reads the fleet's control every second and records itself in the\n" +
			"table: pause, resume and set change the control and wait until every live task applies it\n" +
			"(docs/fleet.md).",
		Subcommands: []*cli.Command{fleetPauseCommand(), fleetResumeCommand(), fleetSetCommand(), fleetStatusCommand()},
	}
}

// fleetFlags are the flags of every verb that changes the control.
func fleetFlags() []cli.Flag {
	return []cli.Flag{
		fleetTableFlag(),
		&cli.StringFlag{Name: "reason", Usage: "why, `TEXT` every task logs with the change"},
		&cli.BoolFlag{Name: "wait", Value: true, Usage: "wait until every live task applies the change (--wait=false: do not)"},
		&cli.DurationFlag{Name: "wait-timeout", Value: defaultWaitTimeout, Usage: "the longest wait, a `DURATION`; then the tasks that did not acknowledge are named (exit 3)"},
	}
}

func fleetTableFlag() cli.Flag {
	return &cli.StringFlag{Name: "limits-table", Usage: "the DynamoDB `TABLE` the listens share (a name or an ARN)", EnvVars: []string{"WATCHBOT_LIMITS_TABLE"}}
}

func fleetQueueFlag(what string) cli.Flag {
	return &cli.StringFlag{Name: "queue", Usage: what + " only the queue of this `NAME` (default: every queue)"}
}

func fleetPauseCommand() *cli.Command {
	return &cli.Command{
		Name:  "pause",
		Usage: "stop receiving and starting jobs, fleet-wide, within 2 s; running jobs finish",
		Description: "Held messages not started go back to the queue once the pause has lasted --limit-wait;\n" +
			"heartbeats go on. Without --for the pause holds until resume.",
		Flags: append(fleetFlags(), fleetQueueFlag("pause"),
			&cli.DurationFlag{Name: "for", Usage: "end the pause by itself after this `DURATION`", DefaultText: "until resume"}),
		Action: explained(func(c *cli.Context) error {
			if c.IsSet("for") && c.Duration("for") <= 0 {
				return usagef("--for (%v) must be a positive duration, such as 30s or 10m", c.Duration("for"))
			}
			return runFleetChange(c, app.FleetChange{What: limits.ChangePause, Queue: strings.TrimSpace(c.String("queue")), For: c.Duration("for")})
		}),
	}
}

func fleetResumeCommand() *cli.Command {
	return &cli.Command{
		Name:  "resume",
		Usage: "end the pause: every queue's, or with --queue that queue's",
		Flags: append(fleetFlags(), fleetQueueFlag("resume")),
		Action: explained(func(c *cli.Context) error {
			return runFleetChange(c, app.FleetChange{What: limits.ChangeResume, Queue: strings.TrimSpace(c.String("queue"))})
		}),
	}
}

func fleetSetCommand() *cli.Command {
	return &cli.Command{
		Name:  "set",
		Usage: "apply settings to every task live, without a restart",
		Description: "A running job is never stopped: a lower --concurrency starts fewer. A setting a live task cannot\n" +
			"take live (a --concurrency above its own, a --batch-size into or out of batch mode) is refused,\n" +
			"named, and nothing changes. A setting stays until set again; --concurrency 0 and --batch-size 0\n" +
			"give each task its own flag back.",
		Flags: append(fleetFlags(),
			&cli.IntFlag{Name: "concurrency", Usage: "jobs each task runs at once, `N`, up to the --concurrency it started with (0: that again)", DefaultText: "unchanged"},
			&cli.StringFlag{Name: "rate-limit", Usage: "job starts across the fleet, `N/s` or N/m (0: none)", DefaultText: "unchanged"},
			&cli.IntFlag{Name: "fleet-concurrency", Usage: "jobs running at once across the fleet, `N` (0: none)", DefaultText: "unchanged"},
			&cli.IntFlag{Name: "batch-size", Usage: "messages a run of a task in batch mode takes, `N` (0: its own again)", DefaultText: "unchanged"}),
		Action: explained(func(c *cli.Context) error {
			ch, err := fleetSettings(c)
			if err != nil {
				return err
			}
			return runFleetChange(c, ch)
		}),
	}
}

// fleetSettings reads set's settings: at least one, each in range; a --concurrency or
// --batch-size of 0 gives each task its own back.
func fleetSettings(c *cli.Context) (app.FleetChange, error) {
	ch := app.FleetChange{What: limits.ChangeSet}
	s := &ch.Settings
	if c.IsSet("concurrency") {
		if s.Concurrency = c.Int("concurrency"); s.Concurrency < 0 {
			return ch, usagef("--concurrency (%d) must be 1 or more, or 0 for each task's own", s.Concurrency)
		}
		ch.OwnConcurrency = s.Concurrency == 0
	}
	if c.IsSet("rate-limit") {
		r, err := limits.ParseRate(c.String("rate-limit"))
		if err != nil {
			return ch, usagef("--rate-limit: %v", err)
		}
		s.RateLimit = &r
	}
	if c.IsSet("fleet-concurrency") {
		n := c.Int("fleet-concurrency")
		s.FleetConcurrency = &n
	}
	if c.IsSet("batch-size") {
		if s.BatchSize = c.Int("batch-size"); s.BatchSize < 0 || s.BatchSize > limits.MaxBatchSize {
			return ch, usagef("--batch-size (%d) must be between 1 and %d, or 0 for each task's own", s.BatchSize, limits.MaxBatchSize)
		}
		ch.OwnBatchSize = s.BatchSize == 0
	}
	if s.Empty() && !ch.OwnConcurrency && !ch.OwnBatchSize {
		return ch, usagef("watchbot fleet set needs a setting: --concurrency, --rate-limit, --fleet-concurrency or --batch-size")
	}
	if err := s.Check(); err != nil {
		return ch, usageError{err}
	}
	return ch, nil
}

func fleetStatusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "list the live tasks: what each serves, whether it is paused, which change it applies",
		Flags: []cli.Flag{fleetTableFlag(), &cli.BoolFlag{Name: "json", Usage: "print one JSON object"}},
		Action: explained(func(c *cli.Context) error {
			store, _, err := fleetStore(c, false)
			if err != nil {
				return err
			}
			ts, err := limits.ReadTasks(c.Context, store, time.Now())
			if err != nil {
				return fleetTableError(err)
			}
			if c.Bool("json") {
				enc := json.NewEncoder(c.App.Writer)
				enc.SetIndent("", "  ")
				return enc.Encode(ts)
			}
			return writeFleet(c.App.Writer, ts, time.Now())
		}),
	}
}

// notAcknowledged is a change some live tasks did not apply within --wait-timeout (exit 3).
type notAcknowledged struct{ tasks []string }

func (e notAcknowledged) Error() string {
	return fmt.Sprintf("not acknowledged within --wait-timeout by %d live task(s): %s (the change stands; they apply it when they next read the table)",
		len(e.tasks), strings.Join(e.tasks, ", "))
}

// runFleetChange makes the change, waits as --wait says, and prints what came of it.
func runFleetChange(c *cli.Context, ch app.FleetChange) error {
	if c.Bool("wait") && c.Duration("wait-timeout") <= 0 {
		return usagef("--wait-timeout (%v) must be positive", c.Duration("wait-timeout"))
	}
	store, caller, err := fleetStore(c, true)
	if err != nil {
		return err
	}
	ch.Reason, ch.By = c.String("reason"), app.Caller(c.Context, caller)
	wait := c.Duration("wait-timeout")
	if !c.Bool("wait") {
		wait = 0
	}
	r, err := app.SteerFleet(c.Context, store, ch, wait, time.Now)
	if err != nil && r.Control.Version == 0 { // nothing written
		return fleetTableError(err)
	}
	if c.Context.Err() != nil {
		return interrupted{fmt.Sprintf("the change stands (version %d); the wait for the tasks to acknowledge it stopped", r.Control.Version)}
	}
	w := c.App.Writer
	fmt.Fprintf(w, "%s: version %d%s\n", describeChange(ch, r.Control), r.Control.Version, byLine(ch))
	if r.Unserved {
		fmt.Fprintf(c.App.ErrWriter, "note: no live task serves a queue named %s (the last part of its URL); the change holds for any that does\n", ch.Queue)
	}
	if err != nil {
		return fleetTableError(fmt.Errorf("the change stands (version %d), but no task's record could be read within --wait-timeout: %w", r.Control.Version, err))
	}
	if wait == 0 {
		return nil
	}
	live := len(r.Tasks.Live)
	fmt.Fprintf(w, "%d of %d live task(s) acknowledged in %v\n", live-len(r.Lagging), live, r.Took.Round(time.Millisecond))
	if len(r.Lagging) > 0 {
		return notAcknowledged{r.Lagging}
	}
	return nil
}

// describeChange says in a few words what ch did.
func describeChange(ch app.FleetChange, c limits.Control) string {
	queue := "every queue"
	if ch.Queue != "" {
		queue = "queue " + ch.Queue
	}
	switch ch.What {
	case limits.ChangePause:
		if ch.For > 0 {
			return fmt.Sprintf("paused %s for %v", queue, ch.For)
		}
		return "paused " + queue + " until resumed"
	case limits.ChangeResume:
		return "resumed " + queue
	}
	if set := c.Settings.Flags(); set != "" {
		return "settings now " + set
	}
	return "settings now each task's flags"
}

func byLine(ch app.FleetChange) string {
	var b strings.Builder
	if ch.By != "" {
		fmt.Fprintf(&b, ", by %s", ch.By)
	}
	if ch.Reason != "" {
		fmt.Fprintf(&b, ", reason %q", ch.Reason)
	}
	return b.String()
}

// fleetStore returns the store of --limits-table, built as listen builds its own, and, when
// asked and there is one to ask, the STS client that names the caller: none while DynamoDB's
// endpoint is set (an emulator) and STS's is not, since the credentials of an emulator mean
// nothing to AWS.
func fleetStore(c *cli.Context, withCaller bool) (limits.Store, app.CallerAPI, error) {
	table, err := stateTable(c.String("limits-table"), listenspec.SettingLimitsTable)
	if err != nil {
		return nil, nil, err
	}
	if table.Name == "" {
		return nil, nil, usagef("give the table: --limits-table TABLE, or WATCHBOT_LIMITS_TABLE in the environment (watchbot %s --help)", c.Command.FullName())
	}
	opts := awsenv.Options{Region: table.Region}
	cfg, err := awsenv.Load(c.Context, opts)
	if err != nil {
		return nil, nil, err
	}
	store := limits.NewOperatorStore(awsenv.DynamoDB(cfg, opts), table.Name)
	if !withCaller || os.Getenv("AWS_ENDPOINT_URL_DYNAMODB") != "" && os.Getenv("AWS_ENDPOINT_URL_STS") == "" && os.Getenv("AWS_ENDPOINT_URL") == "" {
		return store, nil, nil
	}
	return store, sts.NewFromConfig(cfg), nil
}

// fleetTableError names the table in a failure to read or write it.
func fleetTableError(err error) error {
	if _, ok := errors.AsType[setting.Error](err); ok {
		return err
	}
	return setting.Error{Setting: listenspec.SettingLimitsTable, Reason: "cannot be read or written", Err: err}
}

// writeFleet prints the control in force and the live tasks, one a line.
func writeFleet(w io.Writer, ts limits.Tasks, now time.Time) error {
	c := ts.Control
	var b strings.Builder
	switch {
	case c.Version == 0:
		b.WriteString("control:  none (every task runs by its flags)\n")
	default:
		fmt.Fprintf(&b, "control:  version %d, last %s at %s%s\n", c.Version, c.Change.What, c.Change.At.UTC().Format(time.RFC3339),
			byLine(app.FleetChange{By: c.Change.By, Reason: c.Change.Reason}))
	}
	fmt.Fprintf(&b, "paused:   %s\n", pausesLine(c, now))
	settings := c.Settings.Flags()
	if settings == "" {
		settings = "each task's flags"
	}
	fmt.Fprintf(&b, "settings: %s\n", settings)
	fmt.Fprintf(&b, "tasks:    %d live\n", len(ts.Live))
	if _, err := io.WriteString(w, b.String()); err != nil || len(ts.Live) == 0 {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tHOST\tQUEUES\tPAUSED\tVERSION\tCONCURRENCY\tRUNNING\tLAST SEEN")
	for _, r := range ts.Live {
		paused := "no"
		switch {
		case r.AllPaused():
			paused = "yes"
		case len(r.Paused) > 0:
			paused = strings.Join(r.Paused, ",")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%v ago\n", r.Task, r.Host, strings.Join(r.Queues, ","), paused, r.Version,
			r.Applied.Concurrency, r.Running, now.Sub(r.LastSeen).Round(100*time.Millisecond))
	}
	return tw.Flush()
}

// pausesLine says which pauses of c hold at now, and until when.
func pausesLine(c limits.Control, now time.Time) string {
	var out []string
	for q, until := range c.Pauses {
		if !until.IsZero() && !now.Before(until) {
			continue
		}
		name := "every queue"
		if q != "" {
			name = "queue " + q
		}
		end := "until resumed"
		if !until.IsZero() {
			end = fmt.Sprintf("until %s (%v more)", until.UTC().Format(time.RFC3339), until.Sub(now).Round(time.Second))
		}
		out = append(out, name+" "+end)
	}
	if len(out) == 0 {
		return "no"
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}
