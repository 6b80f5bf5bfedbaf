package main

import (
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/watchbot/watchbot/internal/queueattr"
)

// duration is a flag value that takes a Go duration ("90s", "5m") or a plain integer meaning
// seconds, as Watchbot's maxJobDuration=300 does.
type duration struct{ d time.Duration }

func (v *duration) Set(s string) error {
	d, err := parseDuration(s)
	if err != nil {
		return err
	}
	v.d = d
	return nil
}

func (v *duration) String() string {
	if v == nil {
		return ""
	}
	return v.d.String()
}

func parseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n < 0 || n > int64(100*365*24*time.Hour/time.Second) {
			return 0, fmt.Errorf("%q seconds is out of range", s)
		}
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (use 90s, 5m, 1h30m or whole seconds)", s)
	}
	return d, nil
}

// durationFlag declares a duration flag with a default.
func durationFlag(name string, def time.Duration, usage string, envVars ...string) *cli.GenericFlag {
	return &cli.GenericFlag{Name: name, Value: &duration{def}, Usage: usage, EnvVars: envVars, DefaultText: durationText(def)}
}

func durationText(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return d.String()
}

func durationOf(c *cli.Context, name string) time.Duration {
	if v, ok := c.Generic(name).(*duration); ok && v != nil {
		return v.d
	}
	return 0
}

// newLogger builds the one logger a command uses, on stderr.
func newLogger(c *cli.Context, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level: %q is not debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(c.App.ErrWriter, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(c.App.ErrWriter, opts)), nil
	}
	return nil, usagef("--log-format: %q is not json or text", format)
}

// logFormat returns --log-format, or Watchbot's structuredLogging when the flag is not set, or
// else text when stderr is a terminal (a person reads it) and JSON otherwise (a log pipeline
// does).
func logFormat(c *cli.Context) string {
	if c.IsSet("log-format") {
		return c.String("log-format")
	}
	switch strings.ToLower(os.Getenv("structuredLogging")) {
	case "false", "0", "no":
		return "text"
	case "true", "1", "yes":
		return "json"
	}
	if opTerminal(c.App.ErrWriter) {
		return "text"
	}
	return "json"
}

// logFormatFlag is --log-format; logFormat reads it.
func logFormatFlag() cli.Flag {
	return &cli.StringFlag{Name: "log-format", Value: "json", DefaultText: "text on a terminal, else json",
		Usage: "json or text (Watchbot's structuredLogging=false: text)"}
}

// queueURLEnv are the variables a --queue-url left out is read from, first set first: watchbot's
// own, then Watchbot's QueueUrl.
var queueURLEnv = []string{"WATCHBOT_QUEUE_URL", "QueueUrl"}

// queueURLFromEnv is the queue URL queueURLEnv gives, or "".
func queueURLFromEnv() string {
	for _, name := range queueURLEnv {
		if v := os.Getenv(name); v != "" {
			return v
		}
	}
	return ""
}

// oneQueueFlag is --queue-url of a command that works on one queue: repeatable, so that
// oneQueueURL can refuse a second one instead of keeping the last.
func oneQueueFlag(usage string) cli.Flag {
	return &cli.GenericFlag{Name: "queue-url", Value: &repeated{}, Usage: usage, DefaultText: "$WATCHBOT_QUEUE_URL, $QueueUrl"}
}

// oneQueueURL returns the queue of a command that works on one (what says what it does):
// --queue-url, before or after a verb, else queueURLFromEnv (not the flag's own variables: a
// verb's flag set from them would hide the same flag given before the verb). Several queues,
// which listen and status take (the flag repeated, or a list that commas separate), are
// refused rather than all but one ignored.
func oneQueueURL(c *cli.Context, what string) (string, error) {
	var urls []string
	for _, cc := range c.Lineage() {
		if slices.Contains(cc.LocalFlagNames(), "queue-url") {
			urls = append(urls, repeatedValues(cc, "queue-url")...)
		}
	}
	switch {
	case len(urls) > 1:
		return "", usagef("--queue-url is given %d times: %s one queue (run it once per queue)", len(urls), what)
	case len(urls) == 1:
		urls[0] = strings.TrimSpace(urls[0])
	default:
		urls = []string{queueURLFromEnv()}
	}
	if strings.Contains(urls[0], ",") {
		return "", usagef("the queue URL names several queues (%s): %s one queue: give it with --queue-url", urls[0], what)
	}
	return urls[0], nil
}

// requireQueueURL returns send's --queue-url, checked, or a one-line usage error saying how
// to give it.
func requireQueueURL(c *cli.Context) (string, error) {
	url, err := oneQueueURL(c, "send puts messages on")
	if err != nil {
		return "", err
	}
	if url == "" {
		return "", noQueueGiven(c)
	}
	if err := queueattr.ValidateURL(url); err != nil {
		return "", usagef("--queue-url: %v", err)
	}
	return url, nil
}

// quoteArgs quotes arguments for an error message.
func quoteArgs(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = strconv.Quote(a)
	}
	return strings.Join(q, " ")
}

func withDefaultText(f *cli.GenericFlag, text string) *cli.GenericFlag {
	f.DefaultText = text
	return f
}

// repeated is a repeatable string flag that, unlike cli.StringSliceFlag, never splits a value
// at commas: attribute and environment values, schedules and regular expressions hold them.
type repeated struct{ values []string }

func (r *repeated) Set(s string) error { r.values = append(r.values, s); return nil }
func (r *repeated) String() string {
	if r == nil {
		return ""
	}
	return strings.Join(r.values, " ")
}

// repeatedValues returns the values given to the repeated flag name, in order.
func repeatedValues(c *cli.Context, name string) []string {
	if r, ok := c.Generic(name).(*repeated); ok {
		return r.values
	}
	return nil
}
