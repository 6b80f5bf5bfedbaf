package scalesim

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Comparison holds the results of every policy under every load, and of backlog scaling
// under the steady loads with other protection idle times.
type Comparison struct {
	Results [][]Result // by load, by policy
	Idle    []Result
}

// IdleTimes are the --scale-in-protection-idle values the idle table compares: none, listen's
// default, and a longer hold.
var IdleTimes = []time.Duration{0, ProtectionIdle, 3 * ProtectionIdle}

// Compare runs every policy under every load.
func Compare() (Comparison, error) {
	var c Comparison
	for _, load := range Loads {
		var row []Result
		for _, p := range Policies {
			r, err := Run(load, p, Options(load))
			if err != nil {
				return c, fmt.Errorf("%s, %s: %w", load.Name, p.Name, err)
			}
			row = append(row, r)
		}
		c.Results = append(c.Results, row)
	}
	backlog := Policies[len(Policies)-1]
	for _, load := range Loads {
		if load.Name != "steady" && load.Name != "sine" {
			continue
		}
		for _, idle := range IdleTimes {
			p := backlog
			p.Name, p.ProtectionIdle = "idle "+shortDuration(idle), idle
			r, err := Run(load, p, Options(load))
			if err != nil {
				return c, fmt.Errorf("%s, %s: %w", load.Name, p.Name, err)
			}
			c.Idle = append(c.Idle, r)
		}
	}
	return c, nil
}

// Markdown is the comparison as docs/template.md shows it: the conditions, the table, the
// charts of tasks over time for the burst and the sine, and the idle table.
func (c Comparison) Markdown() string {
	var b strings.Builder
	o := Options(Loads[0])
	fmt.Fprintf(&b, "Every stack: `--concurrency %d --max-tasks %d --min-tasks %d --target-latency %s`, "+
		"`--expected-job-duration` the load's job; a task starts %ds after ECS starts it; "+
		"metrics reach the alarms %ds after their minute; listen protects a busy task and keeps "+
		"protection for `--scale-in-protection-idle` (%s) after its last job.\n\n",
		o.Concurrency, o.MaxTasks, o.MinTasks, shortDuration(o.TargetLatency), taskStart, metricDelay, shortDuration(ProtectionIdle))
	b.WriteString("| load | policy | peak tasks | task-minutes | drained after | longest wait | jobs cut |\n")
	b.WriteString("| --- | --- | ---: | ---: | ---: | ---: | ---: |\n")
	for i, row := range c.Results {
		for _, r := range row {
			fmt.Fprintf(&b, "| %s: %s | %s | %d | %s | %s | %s | %d |\n", r.Load, Loads[i].Summary, r.Policy, r.Peak,
				thousands(r.TaskSeconds/60), drained(r), shortDuration(time.Duration(r.MaxWait)*time.Second), r.Cut)
		}
	}
	for i, row := range c.Results {
		if name := Loads[i].Name; name != "burst" && name != "sine" {
			continue
		}
		fmt.Fprintf(&b, "\nTasks over time, %s (%s):\n\n```\n", Loads[i].Name, Loads[i].Summary)
		peak := 0
		for _, r := range row {
			peak = max(peak, slices.Max(r.Tasks))
		}
		for j, r := range row {
			if j > 0 {
				b.WriteString("\n")
			}
			b.WriteString(chart(r.Policy, r.Tasks, peak))
		}
		b.WriteString("```\n")
	}
	b.WriteString("\nBacklog tracking by `--scale-in-protection-idle`:\n\n")
	b.WriteString("| load | idle | task-minutes | longest wait | jobs cut |\n| --- | ---: | ---: | ---: | ---: |\n")
	for _, r := range c.Idle {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %d |\n", r.Load, strings.TrimPrefix(r.Policy, "idle "), thousands(r.TaskSeconds/60),
			shortDuration(time.Duration(r.MaxWait)*time.Second), r.Cut)
	}
	return b.String()
}

func drained(r Result) string {
	if r.Drained < 0 {
		return "never"
	}
	return shortDuration(time.Duration(r.Drained) * time.Second)
}

// shortDuration is d as Go prints it, without zero units: 1h30m, 5m, 45s, 0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// Chart size: a column is one or more minutes, the largest count of the minutes it covers.
const (
	chartWidth  = 72
	chartHeight = 8
)

// chart draws tasks (one count a minute) as columns of # scaled to peak, under title, with
// the time below at round steps.
func chart(title string, tasks []int, peak int) string {
	per := (len(tasks) + chartWidth - 1) / chartWidth
	var cols []int
	for i := 0; i < len(tasks); i += per {
		cols = append(cols, slices.Max(tasks[i:min(i+per, len(tasks))]))
	}
	label := len(fmt.Sprint(peak))
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n", title)
	for row := chartHeight; row >= 1; row-- {
		var line strings.Builder
		switch row {
		case chartHeight:
			fmt.Fprintf(&line, "%*d |", label, peak)
		case chartHeight / 2:
			fmt.Fprintf(&line, "%*d |", label, peak/2)
		default:
			fmt.Fprintf(&line, "%*s |", label, "")
		}
		for _, v := range cols {
			// A cell is filled when the count reaches the middle of its row.
			if float64(v) >= float64(peak)*(float64(row)-0.5)/chartHeight {
				line.WriteByte('#')
			} else {
				line.WriteByte(' ')
			}
		}
		fmt.Fprintf(&b, "%s\n", strings.TrimRight(line.String(), " "))
	}
	fmt.Fprintf(&b, "%*d +%s\n", label, 0, strings.Repeat("-", len(cols)))
	axis := []byte(strings.Repeat(" ", label+2+len(cols)+8))
	step := tick(len(tasks))
	for m := 0; m < len(tasks); m += step {
		copy(axis[label+2+m/per:], shortDuration(time.Duration(m)*time.Minute))
	}
	fmt.Fprintf(&b, "%s\n", strings.TrimRight(string(axis), " "))
	return b.String()
}

// tick is the step, in minutes, of the times under a chart of minutes: the first of 30 min,
// 1, 2, 3 and 6 hours that marks it at most 5 times.
func tick(minutes int) int {
	for _, step := range []int{30, 60, 120, 180, 360} {
		if minutes/step < 5 {
			return step
		}
	}
	return 720
}
