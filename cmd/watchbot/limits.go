package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/watchbot/watchbot/app"
	"github.com/watchbot/watchbot/deadletter"
	"github.com/watchbot/watchbot/dedupe"
	"github.com/watchbot/watchbot/internal/awsenv"
	"github.com/watchbot/watchbot/internal/ecsagent"
	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/internal/setting"
	"github.com/watchbot/watchbot/limits"
	"github.com/watchbot/watchbot/supervisor"
)

// limitsLeaseEnv sets the lease of the fleet's concurrency slots (docs/limits.md): how soon the
// slots of a task that died are free again. The tests shorten it; the default suits a fleet.
const limitsLeaseEnv = "WATCHBOT_LIMITS_LEASE"

// bindRate reads a rate flag (N/s or N/m) into field; unset is no limit.
func bindRate(field func(*listenArgs) *float64) func(listenSetting, *cli.Context, *listenArgs) error {
	return func(s listenSetting, c *cli.Context, a *listenArgs) error {
		r, err := rateOf(c, s.name, s.setting)
		*field(a) = r
		return err
	}
}

// rateOf reads a rate flag (N/s or N/m); unset is no limit.
func rateOf(c *cli.Context, flag string, s setting.Name) (float64, error) {
	v := strings.TrimSpace(c.String(flag))
	if v == "" {
		return 0, nil
	}
	r, err := limits.ParseRate(v)
	if err != nil {
		return 0, setting.Refuse(s, v, "must be a rate such as 20/s or 300/m")
	}
	return r, nil
}

// taskName names this process in the limits table: its ECS task's id when the ECS task
// metadata endpoint answers (the id an operator finds in the console), else its host and
// process id; unique among the tasks that share the table while it lives.
func taskName(ctx context.Context) string {
	if uri := os.Getenv(ecsagent.EnvMetadataURI); uri != "" {
		if id, err := ecsagent.TaskID(ctx, uri, taskIDTimeout); err == nil {
			return id
		}
	}
	return fmt.Sprintf("%s-%d", hostName(), os.Getpid())
}

// taskIDTimeout bounds the ask of the ECS task metadata endpoint at listen's start.
const taskIDTimeout = 2 * time.Second

func hostName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "watchbot"
	}
	return host
}

// fleetMember is what listen records of itself in the limits table for watchbot fleet.
func fleetMember(cfg supervisor.Config) limits.Member {
	var queues []string
	for _, u := range cfg.URLs() {
		queues = append(queues, queueattr.NameFromURL(u))
	}
	return limits.Member{Host: hostName(), Queues: queues, Concurrency: cfg.Concurrency, BatchSize: cfg.BatchSize}
}

// statusJSON is one queue's status with the fleet's use of its limits, when asked for.
type statusJSON struct {
	deadletter.QueueStatus
	Limits *limitsStatus `json:"limits,omitempty"`
	// LongJobs, with --dedupe-table, are the queue's jobs past SQS's in-flight limit.
	LongJobs []dedupe.LongJob `json:"longJobs,omitzero"`
}

// limitsStatus is the fleet's use of its limits, and the limits the latest listen to start on
// the table recorded there (nil when none has).
type limitsStatus struct {
	limits.Use
	Settings *app.LimitSettings `json:"settings,omitempty"`
}

// readLimitsUse reads the fleet's use of its limits from status's --limits-table; nil when
// none is given. The client is built as listen's: the region an ARN names, the endpoint of
// AWS_ENDPOINT_URL_DYNAMODB.
func readLimitsUse(c *cli.Context, queueURL string) (*limitsStatus, error) {
	table, err := stateTable(c.String("limits-table"), listenspec.SettingLimitsTable)
	if err != nil || table.Name == "" {
		return nil, err
	}
	opts := awsenv.Options{QueueURL: queueURL, Region: table.Region}
	cfg, err := awsenv.Load(c.Context, opts)
	if err != nil {
		return nil, err
	}
	// Every call status makes on the table is an operator's (the template's fleet operator policy).
	var api limits.OperatorAPI = awsenv.DynamoDB(cfg, opts)
	use, err := limits.ReadUse(c.Context, limits.NewOperatorStore(api, table.Name), time.Now())
	if err != nil {
		return nil, setting.Error{Setting: listenspec.SettingLimitsTable, Reason: "cannot read the table", Err: err}
	}
	settings, err := app.ReadLimitSettings(c.Context, api, table.Name)
	if err != nil {
		return nil, setting.Error{Setting: listenspec.SettingLimitsTable, Reason: "cannot read the limits listen recorded", Err: err}
	}
	return &limitsStatus{Use: use, Settings: settings}, nil
}

// writeLimitsUse prints the fleet's limits and their use, after the queues.
func writeLimitsUse(w io.Writer, table string, l limitsStatus, now time.Time) error {
	u := l.Use
	var b strings.Builder
	fmt.Fprintf(&b, "\nlimits table: %s\n", table)
	if s := l.Settings; s != nil {
		fmt.Fprintf(&b, "limits:       %s (recorded by %s, the latest listen to start, at %s)\n", s.Flags(), s.Task, s.WrittenAt.UTC().Format(time.RFC3339))
	} else {
		b.WriteString("limits:       not recorded (no listen has started on this table)\n")
	}
	fmt.Fprintf(&b, "live tasks:   %d\n", len(u.LiveTasks))
	if u.PausedUntil != nil {
		fmt.Fprintf(&b, "paused:       until %s (%s more)\n", u.PausedUntil.UTC().Format(time.RFC3339), u.PausedUntil.Sub(now).Round(time.Second))
	} else {
		b.WriteString("paused:       no\n")
	}
	if c := u.Control; c != nil {
		fmt.Fprintf(&b, "fleet paused: %s (watchbot fleet, version %d)\n", pausesLine(*c, now), c.Version)
		if set := c.Settings.Flags(); set != "" {
			fmt.Fprintf(&b, "fleet set:    %s (watchbot fleet, over each task's flags)\n", set)
		}
	}
	fmt.Fprintf(&b, "slots held:   %d (--fleet-concurrency, running or about to go back)\n", u.SlotsHeld)
	tasks := slices.Sorted(maps.Keys(u.Slots))
	for _, t := range tasks {
		fmt.Fprintf(&b, "  %s: %d\n", t, u.Slots[t])
	}
	fmt.Fprintf(&b, "tokens held:  %d (--rate-limit: the last second's starts and chunks fetched)\n", u.TokensHeld)
	_, err := io.WriteString(w, b.String())
	return err
}
