//go:build linux

package main

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"
)

// report is every figure of one bench run.
type report struct {
	o          options
	contenders []contender
	results    [][]result
	wide       []wideRun
	pickups    []time.Duration
	stops      []stopRun
	// short are the faulty drains with shortReceiveLease's flags.
	clean, faulty, short []faultRun
	dedupes              []float64
	// tracings are the tracing lane's rounds: own CPU per message exporting spans / without.
	tracings []float64
	// twoQueues are the queues lane's rounds: throughput of two queues / one holding as many.
	twoQueues []float64
	// limits are the limits lane's rounds.
	limits []limitsRun
}

// reportLanes are the lanes the summary's figures need; without one of them the report lists
// each round's figures instead. The dedupe lane adds a line when it ran.
var reportLanes = []string{"throughput", "wide", "pickup", "stop", "faults"}

// fullReport reports whether every lane of reportLanes runs.
func (o options) fullReport() bool {
	for _, l := range reportLanes {
		if !o.lanes[l] {
			return false
		}
	}
	return true
}

// figure is one line of the summary: what, the value, the goal.
type figure struct{ name, value, goal string }

func (r report) figures() []figure {
	o := r.o
	if !o.fullReport() {
		return r.partial()
	}
	ratio := func(a, b int) string {
		var rs []result
		for k := range o.rounds {
			rs = append(rs, result{rate: r.results[a][k].rate / r.results[b][k].rate})
		}
		return spread(rs, func(r result) float64 { return r.rate }, "%.2f")
	}
	wb := r.results[1]
	var stopTook, hidden []time.Duration
	for _, s := range r.stops {
		stopTook, hidden = append(stopTook, s.took), append(hidden, s.hidden)
	}
	extra, extraShort := r.faultsAdded(r.faulty), r.faultsAdded(r.short)
	tookOf := func(fs []faultRun) []time.Duration {
		var ds []time.Duration
		for _, f := range fs {
			ds = append(ds, f.took)
		}
		return ds
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }
	fs := []figure{
		{"throughput, watchbot / baseline loop (worker `true`, 8 slots)", ratio(1, 0), "≥ 1.0"},
		{fmt.Sprintf("throughput, `--concurrency %d` with %v jobs, steady state / ideal (%0.f msg/s)", wideSlots, wideJob, float64(wideSlots)/wideJob.Seconds()),
			spreadOf(wideOf(r.wide, func(w wideRun) float64 { return w.steady })), "≥ 0.95"},
		{"… end to end, from watchbot's start to an empty queue", spreadOf(wideOf(r.wide, func(w wideRun) float64 { return w.total })), ""},
		{"… the same jobs started by a loop with no queue, 64 at once, steady state (this machine's ceiling)",
			spreadOf(wideOf(r.wide, func(w wideRun) float64 { return w.ceilingSteady })), ""},
		{"… that loop end to end", spreadOf(wideOf(r.wide, func(w wideRun) float64 { return w.ceilingTotal })), ""},
		{"SQS requests per message", fmt.Sprintf("%.3f", median(wb, func(r result) float64 { return r.reqPerMsg })), "≤ 0.3"},
		{"watchbot's own CPU per message (children excluded)", fmt.Sprintf("%.3f ms", median(wb, cpuMs)), "≤ 0.2 ms"},
		{"… / the baseline loop's own CPU per message", cpuRatio(wb, r.results[0]), ""},
		{"… with `--http-worker` (no process per message)", fmt.Sprintf("%.3f ms", median(r.results[httpContender], cpuMs)), ""},
		{"… with `--lambda` (8 runtimes, 10 messages an invocation) / with `--http-worker`", cpuRatio(r.results[lambdaContender], r.results[httpContender]), "≤ 1.0"},
		{"throughput, `--lambda` / the process per message", rateRatio(r.results[lambdaContender], r.results[1]), "≥ 3.0"},
		{"throughput, `--lambda` / `--http-worker`", rateRatio(r.results[lambdaContender], r.results[httpContender]), "≥ 1.0"},
		{"watchbot's peak RSS", fmt.Sprintf("%.1f MiB", median(wb, func(r result) float64 { return float64(r.rss) })/1024), ""},
		{"FIFO / standard, 16 groups, SQS's FIFO delivery (fakesqs)", ratio(4, 3), ""},
		{"FIFO / standard, 16 groups, fauxqs", ratio(2, 1), ""},
		{fmt.Sprintf("pick-up latency, send → worker start, idle watchbot (%d sends), median / p99", len(r.pickups)),
			ms(percentile(r.pickups, 0.5)) + " / " + ms(percentile(r.pickups, 0.99)), "≤ 50 ms / ≤ 200 ms"},
		{fmt.Sprintf("drain of %d messages, %v lease: without faults / with 30%% of SQS calls failing", faultMessages, faultLease),
			fmt.Sprintf("%.1f s / %.1f s", percentile(tookOf(r.clean), 0.5).Seconds(), percentile(tookOf(r.faulty), 0.5).Seconds()), ""},
		{"time the faults added / twice the lease (a receive leases for the whole 6 s)", spread(extra, func(r result) float64 { return r.rate }, "%.2f"), "≤ 1.0"},
		{"… with `" + strings.Join(shortReceiveLease, " ") + "` (a receive leases for 4 s)", spread(extraShort, func(r result) float64 { return r.rate }, "%.2f"), "≤ 1.0"},
		{fmt.Sprintf("idle watchbot, SIGTERM → exit (%d stops), median / max", len(stopTook)),
			ms(percentile(stopTook, 0.5)) + " / " + ms(percentile(stopTook, 1)), "≤ the long poll's 20 s + 2 s"},
		{"a message sent just after the exit: receivable after, max", ms(percentile(hidden, 1)), "≤ 1 s"},
	}
	if len(r.dedupes) > 0 {
		fs = append(fs, figure{fmt.Sprintf("throughput with `--dedupe-table` (dynalite) / without, %d messages", dedupeMessages), spreadOf(r.dedupes), ""})
	}
	if len(r.tracings) > 0 {
		fs = append(fs, r.tracingFigure())
	}
	if len(r.twoQueues) > 0 {
		fs = append(fs, r.twoQueuesFigure())
	}
	return append(fs, r.limitsFigures()...)
}

// limitsFigures are the limits lane's lines, none when it did not run.
func (r report) limitsFigures() []figure {
	if len(r.limits) == 0 {
		return nil
	}
	var ratios, cpus []float64
	for _, l := range r.limits {
		ratios = append(ratios, l.ratio)
		cpus = append(cpus, float64(l.cpuPerStart)/float64(time.Microsecond))
	}
	return []figure{
		{fmt.Sprintf("throughput with a fleet limit that never binds (`--rate-limit 1000000/s --fleet-concurrency 1000 --limits-table`, dynalite) / without, %d messages", limitsMessages),
			spreadOf(ratios), "≥ 0.9"},
		{"CPU of the limiter's hot path (TryStart and Done), per start", spreadOf(cpus) + " µs", ""},
	}
}

// twoQueuesFigure is the queues lane's line.
func (r report) twoQueuesFigure() figure {
	return figure{fmt.Sprintf("throughput, two queues holding %d messages between them / one queue holding them all", queuesMessages),
		spreadOf(r.twoQueues), "0.95–1.05"}
}

// partial lists the figures of the lanes that ran, for a bench run with -lanes.
func (r report) partial() []figure {
	var fs []figure
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }
	if len(r.results[0]) > 0 {
		var rs []result
		for k := range r.results[0] {
			rs = append(rs, result{rate: r.results[1][k].rate / r.results[0][k].rate})
		}
		fs = append(fs, figure{"throughput, watchbot / baseline loop", spread(rs, func(r result) float64 { return r.rate }, "%.2f"), "≥ 1.0"},
			figure{"own CPU per message", fmt.Sprintf("%.3f ms", median(r.results[1], cpuMs)), "≤ 0.2 ms"},
			figure{"own CPU per message, watchbot / baseline loop", cpuRatio(r.results[1], r.results[0]), ""},
			figure{"own CPU per message, --http-worker", fmt.Sprintf("%.3f ms", median(r.results[httpContender], cpuMs)), ""},
			figure{"own CPU per message, --lambda / --http-worker", cpuRatio(r.results[lambdaContender], r.results[httpContender]), "≤ 1.0"},
			figure{"throughput, --lambda / the process per message", rateRatio(r.results[lambdaContender], r.results[1]), "≥ 3.0"},
			figure{"throughput, --lambda / --http-worker", rateRatio(r.results[lambdaContender], r.results[httpContender]), "≥ 1.0"})
	}
	for _, w := range r.wide {
		fs = append(fs, figure{"wide / ideal, steady; end to end", fmt.Sprintf("%.2f; %.2f", w.steady, w.total), "≥ 0.95"},
			figure{"spawn-only ceiling / ideal, steady; end to end", fmt.Sprintf("%.2f; %.2f", w.ceilingSteady, w.ceilingTotal), ""})
	}
	if len(r.pickups) > 0 {
		fs = append(fs, figure{"pick-up median / p99", ms(percentile(r.pickups, 0.5)) + " / " + ms(percentile(r.pickups, 0.99)), "≤ 50 ms / ≤ 200 ms"})
	}
	for _, s := range r.stops {
		fs = append(fs, figure{"stop / hidden after", ms(s.took) + " / " + ms(s.hidden), "≤ 22 s / ≤ 1 s"})
	}
	for _, d := range r.dedupes {
		fs = append(fs, figure{"with --dedupe-table / without", fmt.Sprintf("%.2f", d), ""})
	}
	if len(r.tracings) > 0 {
		fs = append(fs, r.tracingFigure())
	}
	if len(r.twoQueues) > 0 {
		fs = append(fs, r.twoQueuesFigure())
	}
	fs = append(fs, r.limitsFigures()...)
	for k := range r.faulty {
		fs = append(fs, figure{"drain clean / faulty / faulty with a short receive lease", fmt.Sprintf("%.1f s / %.1f s / %.1f s",
			r.clean[k].took.Seconds(), r.faulty[k].took.Seconds(), r.short[k].took.Seconds()), ""})
	}
	if len(r.faulty) > 0 {
		fs = append(fs, figure{"time the faults added / twice the lease", spread(r.faultsAdded(r.faulty), func(r result) float64 { return r.rate }, "%.2f"), "≤ 1.0"},
			figure{"… with a short receive lease", spread(r.faultsAdded(r.short), func(r result) float64 { return r.rate }, "%.2f"), "≤ 1.0"})
	}
	return fs
}

// tracingFigure is the tracing lane's figure: the median over its rounds.
func (r report) tracingFigure() figure {
	return figure{fmt.Sprintf("watchbot's own CPU per message, exporting spans over OTLP/HTTP / without an exporter, %d messages with a traceparent each", r.o.messages),
		spreadOf(r.tracings), "≤ 1.10"}
}

// faultsAdded returns, for each round, the time the faults added to the drain over twice the
// lease.
func (r report) faultsAdded(runs []faultRun) []result {
	var out []result
	for k := range runs {
		out = append(out, result{rate: (runs[k].took - r.clean[k].took).Seconds() / (2 * faultLease).Seconds()})
	}
	return out
}

// cpuMs is a result's own CPU per message, in milliseconds.
func cpuMs(r result) float64 { return float64(r.cpuPerMsg) / float64(time.Millisecond) }

// cpuRatio is the median ratio of own CPU per message, a to b, taken within each round.
func cpuRatio(a, b []result) string {
	var rs []result
	for k := range min(len(a), len(b)) {
		rs = append(rs, result{rate: a[k].cpuPerMsg.Seconds() / b[k].cpuPerMsg.Seconds()})
	}
	return spread(rs, func(r result) float64 { return r.rate }, "%.2f")
}

// wideOf is one figure of each round of the wide lane.
func wideOf(ws []wideRun, figure func(wideRun) float64) []float64 {
	var vs []float64
	for _, w := range ws {
		vs = append(vs, figure(w))
	}
	return vs
}

// spreadOf formats the median of vs with its range.
func spreadOf(vs []float64) string {
	var rs []result
	for _, v := range vs {
		rs = append(rs, result{rate: v})
	}
	return spread(rs, func(r result) float64 { return r.rate }, "%.2f")
}

func (r report) print(w io.Writer) {
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%-62s %18s %12s %14s\n", "", "messages/s", "SQS req/msg", "own CPU/msg")
	for i, c := range r.contenders {
		if len(r.results[i]) == 0 {
			break
		}
		cpu := fmt.Sprintf("%.3f ms", median(r.results[i], cpuMs))
		fmt.Fprintf(w, "%-62s %18s %12.3f %14s\n", c.name, spread(r.results[i], func(r result) float64 { return r.rate }, "%.0f"),
			median(r.results[i], func(r result) float64 { return r.reqPerMsg }), cpu)
	}
	if len(r.results[1]) > 0 {
		fmt.Fprintf(w, "watchbot's requests, last round: %s\n", r.results[1][len(r.results[1])-1].detail)
	}
	for i, c := range r.contenders {
		for k, res := range r.results[i] {
			if res.failedReceives > 0 {
				fmt.Fprintf(w, "note: %s, round %d: receives failed with no faults injected (%d logged; WATCHBOT_BENCH_KEEP_LOGS=1 keeps the logs); on fauxqs their messages wait out --receive-visibility, and that round's figures include the wait\n",
					c.name, k+1, res.failedReceives)
			}
		}
	}
	fmt.Fprintln(w)
	for _, f := range r.figures() {
		goal := ""
		if f.goal != "" {
			goal = "(goal " + f.goal + ")"
		}
		fmt.Fprintf(w, "%-92s %-22s %s\n", f.name+":", f.value, goal)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "faults injected in the 30% runs, all rounds:")
	total := map[string]int{}
	for _, f := range slices.Concat(r.faulty, r.short) {
		for k, v := range f.injections {
			total[k] += v
		}
	}
	for _, k := range slices.Sorted(maps.Keys(total)) {
		fmt.Fprintf(w, "  %-45s %d\n", k, total[k])
	}
	fmt.Fprintln(w, "where the time went in the 30% runs: the drain, and when the receives whose answers were lost were sent (their messages are out of reach for the receive's lease from the answer, which a long poll gives later); then the first pass over the queue (every message's first run), and how long the one receive loop waited in it on receives the SDK retried and on short-lease extensions (watchbot's /metrics, read every 25 ms):")
	for k, f := range r.faulty {
		lostAt := func(f faultRun) string {
			var at []string
			for _, l := range f.lostReceives {
				at = append(at, fmt.Sprintf("%.1f", l.Seconds()))
			}
			return strings.Join(at, " ")
		}
		fmt.Fprintf(w, "  round %d: drained in %.1f s (%.1f s without faults); receives sent at [%s] s lost their answers\n", k+1, f.took.Seconds(), r.clean[k].took.Seconds(), lostAt(f))
		fmt.Fprintf(w, "           %s\n", f.firstPass)
		if k < len(r.short) {
			fmt.Fprintf(w, "           with a short receive lease: drained in %.1f s; receives sent at [%s] s lost their answers\n", r.short[k].took.Seconds(), lostAt(r.short[k]))
			fmt.Fprintf(w, "           %s\n", r.short[k].firstPass)
		}
	}
	if len(r.faulty) > 0 {
		end, waited := make([]time.Duration, len(r.faulty)), make([]time.Duration, len(r.faulty))
		for k, f := range r.faulty {
			end[k], waited[k] = f.firstPass.end, f.firstPass.retried+f.firstPass.extensions
		}
		fmt.Fprintf(w, "  medians: the first pass over at %.1f s, %.1f s of it waiting on retried receives and short-lease extensions\n",
			percentile(end, 0.5).Seconds(), percentile(waited, 0.5).Seconds())
	}
	fmt.Fprintln(w, "watchbot's log in the 30% runs, all rounds:")
	events := map[string]int{}
	for _, f := range slices.Concat(r.faulty, r.short) {
		for _, line := range strings.Split(f.log, "\n") {
			if msg := logMessage(line); msg != "" {
				events[msg]++
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(events)) {
		fmt.Fprintf(w, "  %-90s %d\n", k, events[k])
	}
}

// logMessage returns the msg of a warning or error line of watchbot's JSON or text log.
func logMessage(line string) string {
	if !strings.Contains(line, "level=WARN") && !strings.Contains(line, "level=ERROR") &&
		!strings.Contains(line, `"level":"WARN"`) && !strings.Contains(line, `"level":"ERROR"`) {
		return ""
	}
	for _, key := range []string{`"msg":"`, `msg="`} {
		if _, rest, ok := strings.Cut(line, key); ok {
			if msg, _, ok := strings.Cut(rest, `"`); ok {
				return msg
			}
		}
	}
	return ""
}

// docs/performance.md's table lies between these markers; -page rewrites it.
const (
	pageStart = "<!-- make bench: start -->"
	pageEnd   = "<!-- make bench: end -->"
)

// markdown renders the throughput table and the figures as docs/performance.md shows them.
func (r report) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Measured by `make bench` on %d cores, %d rounds, medians (min–max):\n\n", numCPU(), r.o.rounds)
	b.WriteString("| | messages/s | SQS requests per message |\n| --- | --- | --- |\n")
	for i, c := range r.contenders {
		fmt.Fprintf(&b, "| %s | %.0f | %.3f |\n", c.name, median(r.results[i], func(r result) float64 { return r.rate }),
			median(r.results[i], func(r result) float64 { return r.reqPerMsg }))
	}
	b.WriteString("\n| figure | measured | goal |\n| --- | --- | --- |\n")
	for _, f := range r.figures() {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", f.name, f.value, f.goal)
	}
	return b.String()
}

// rewrite replaces the text between the markers of the page at path with the figures.
func (r report) rewrite(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	i, j := bytes.Index(data, []byte(pageStart)), bytes.Index(data, []byte(pageEnd))
	if i < 0 || j < i {
		return fmt.Errorf("%s has no %q … %q section", path, pageStart, pageEnd)
	}
	out := slices.Concat(data[:i+len(pageStart)], []byte("\n"+r.markdown()), data[j:])
	return os.WriteFile(path, out, 0o644)
}

// rateRatio is the spread of a's throughput over b's, round by round.
func rateRatio(a, b []result) string {
	var rs []result
	for k := range min(len(a), len(b)) {
		rs = append(rs, result{rate: a[k].rate / b[k].rate})
	}
	return spread(rs, func(r result) float64 { return r.rate }, "%.2f")
}
