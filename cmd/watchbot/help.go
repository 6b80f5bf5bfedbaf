package main

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// examples end each command's --help, as the README and docs/ show the commands: a reader
// who knows nothing else can copy one. TestHelpExamples runs each through the flag parsing.
var examples = map[string][]string{
	"": {
		"watchbot try --body '{\"id\": 42}' -- ./worker.sh",
		"watchbot listen --queue-url \"$QUEUE_URL\" --concurrency 4 -- ./worker.sh",
		"watchbot COMMAND --help",
	},
	"listen": {
		"watchbot listen --queue-url \"$QUEUE_URL\" --concurrency 4 -- ./worker.sh",
		"watchbot listen --queue-url \"$QUEUE_URL\" --batch-size 50 --batch-window 5s -- ./batch-worker.py",
		"watchbot listen --queue-url \"$QUEUE_URL\" --http-worker http://127.0.0.1:8080/ --http-addr :9090",
	},
	"try": {
		"watchbot try --body '{\"id\": 42}' --attempt 3 -- ./worker.sh",
		"printf '%s\\n' one two three | watchbot try --batch -- ./batch-worker.py",
	},
	"alarms":      {"watchbot alarms list --worker-errors-threshold 5"},
	"alarms/list": {"watchbot alarms list --json"},
	"dead-letter": {
		"watchbot dead-letter --queue-url \"$QUEUE_URL\" peek --limit 5",
		"watchbot dead-letter --queue-url \"$QUEUE_URL\" replay --match-attr kind=resize --dry-run",
	},
	"dead-letter/count":  {"watchbot dead-letter --queue-url \"$QUEUE_URL\" count"},
	"dead-letter/peek":   {"watchbot dead-letter --queue-url \"$QUEUE_URL\" peek --limit 5 --json"},
	"dead-letter/replay": {"watchbot dead-letter --queue-url \"$QUEUE_URL\" replay --match-body 'tenant-7' --rate 20"},
	"dead-letter/purge":  {"watchbot dead-letter --queue-url \"$QUEUE_URL\" purge --yes"},
	"dead-letter/export": {"watchbot dead-letter --queue-url \"$QUEUE_URL\" export --delete dlq.jsonl"},
	"dead-letter/import": {"watchbot dead-letter --queue-url \"$QUEUE_URL\" import dlq.jsonl"},
	"dead-letter/triage": {"watchbot dead-letter --queue-url \"$QUEUE_URL\" triage"},
	"fleet": {
		"watchbot fleet pause --limits-table watchbot-limits --reason 'payments API down'",
		"watchbot fleet status --limits-table watchbot-limits",
	},
	"fleet/pause":  {"watchbot fleet pause --limits-table watchbot-limits --queue jobs --for 10m --reason 'payments API down'"},
	"fleet/resume": {"watchbot fleet resume --limits-table watchbot-limits"},
	"fleet/set":    {"watchbot fleet set --limits-table watchbot-limits --concurrency 2 --rate-limit 20/s --reason 'shed load'"},
	"fleet/status": {"watchbot fleet status --limits-table watchbot-limits --json"},
	"health":       {"watchbot health --http-addr 127.0.0.1:9090"},
	"progress": {
		"watchbot progress set-total \"$JOB\" --total 200",
		"watchbot progress complete-part \"$JOB\" --part 7",
		"watchbot progress status \"$JOB\"",
	},
	"send": {
		"watchbot send --queue-url \"$QUEUE_URL\" --body '{\"id\": 42}' --attr kind=resize",
		"jq -c '.[]' jobs.json | watchbot send --queue-url \"$QUEUE_URL\"",
		"watchbot send --queue-url \"$QUEUE_URL\" --payload-bucket my-payloads --file scan.json",
	},
	"status":   {"watchbot status --queue-url \"$QUEUE_URL\""},
	"template": {"watchbot template --max-attempts 5 --concurrency 4 --output stack.yaml -- /app/worker --mode thumbnail"},
	"version":  {"watchbot version"},
}

// withHelp ends the app's and every command's help with their examples.
func withHelp(app *cli.App) {
	app.CustomAppHelpTemplate = cli.AppHelpTemplate + examplesSection(examples[""])
	withExamples(app.Commands, "")
}

func withExamples(cmds []*cli.Command, parent string) {
	for _, c := range cmds {
		path := strings.TrimPrefix(parent+"/"+c.Name, "/")
		if ex := examples[path]; len(ex) > 0 {
			base := cli.CommandHelpTemplate
			if len(c.Subcommands) > 0 {
				base = cli.SubcommandHelpTemplate
			}
			c.CustomHelpTemplate = base + examplesSection(ex)
		}
		withExamples(c.Subcommands, path)
	}
}

func examplesSection(ex []string) string {
	title := "EXAMPLE"
	if len(ex) > 1 {
		title += "S"
	}
	return "\n" + title + ":\n   " + strings.Join(ex, "\n   ") + "\n"
}

// defaultStringer is urfave/cli's flag line, which helpFlag refines.
var defaultStringer = cli.FlagStringer

func init() { cli.FlagStringer = helpFlag }

// helpFlag is a flag's line in --help: urfave/cli's, with the kind of value a flag takes
// instead of "value" (DURATION, N) and without "(default: false)" on switches.
func helpFlag(f cli.Flag) string {
	s := defaultStringer(f)
	placeholder := ""
	switch f := f.(type) {
	case *cli.GenericFlag:
		if _, ok := f.Value.(*duration); ok {
			placeholder = "DURATION"
		}
	case *cli.IntFlag, *cli.Int64Flag, *cli.UintFlag:
		placeholder = "N"
	case *cli.Float64Flag:
		placeholder = "NUMBER"
	case *cli.BoolFlag:
		return strings.Replace(s, " (default: false)", "", 1)
	}
	names, rest, _ := strings.Cut(s, "\t")
	if placeholder != "" {
		names = strings.ReplaceAll(names, " value", " "+placeholder)
	}
	return onePlaceholder(names) + "\t" + rest
}

// onePlaceholder names a flag's value once, after its last name: "--output, -o FILE".
func onePlaceholder(names string) string {
	parts := strings.Split(names, ", ")
	if len(parts) < 2 || strings.Contains(names, " [ ") {
		return names
	}
	_, placeholder, ok := strings.Cut(parts[len(parts)-1], " ")
	if !ok {
		return names
	}
	for i, p := range parts[:len(parts)-1] {
		parts[i] = strings.TrimSuffix(p, " "+placeholder)
	}
	return strings.Join(parts, ", ")
}
