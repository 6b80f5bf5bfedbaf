package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/limits"
	"github.com/watchbot/watchbot/progress"
	"github.com/watchbot/watchbot/supervisor"
)

// limitsConfig reads listen's limit flags (docs/limits.md) into the supervisor's settings;
// Validate checks how they combine.
func limitsConfig(c *cli.Context) (supervisor.LimitsConfig, error) {
	cfg := supervisor.DefaultLimits()
	var err error
	if cfg.Fleet.Rate, err = rateOf(c, "rate-limit", listenspec.SettingRateLimit); err != nil {
		return cfg, err
	}
	if cfg.Fleet.RatePerKey, err = rateOf(c, "rate-limit-per-key", listenspec.SettingRatePerKey); err != nil {
		return cfg, err
	}
	cfg.Fleet.Concurrency = c.Int("fleet-concurrency")
	cfg.Fleet.ConcurrencyPerKey = c.Int("concurrency-per-key")
	cfg.Key = strings.TrimSpace(c.String("limit-key"))
	cfg.Wait = durationOf(c, "limit-wait")
	cfg.Fleet.MaxPause = durationOf(c, "max-pause")
	table, err := limitsTable(c)
	if err != nil {
		return cfg, err
	}
	cfg.Fleet.Table = table.Name
	cfg.Fleet.Task = taskName()
	return cfg, nil
}

// rateOf reads a rate flag (N/s or N/m); unset is no limit.
func rateOf(c *cli.Context, flag string, s listenspec.Setting) (float64, error) {
	v := strings.TrimSpace(c.String(flag))
	if v == "" {
		return 0, nil
	}
	r, err := limits.ParseRate(v)
	if err != nil {
		return 0, listenspec.Refuse(s, v, "must be a rate such as 20/s or 300/m")
	}
	return r, nil
}

// limitsTable reads --limits-table: a name, or an ARN that names the region too.
func limitsTable(c *cli.Context) (progress.Table, error) {
	raw := strings.TrimSpace(c.String("limits-table"))
	if raw == "" {
		return progress.Table{}, nil
	}
	t, err := progress.ParseTable(raw)
	if err != nil {
		return progress.Table{}, listenspec.Refuse(listenspec.SettingLimitsTable, nil, err.Error())
	}
	return t, nil
}

// taskName names this process in the limits table: its host and process id, unique among
// the tasks that share the table while it lives.
func taskName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "watchbot"
	}
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}
