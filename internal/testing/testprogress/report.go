package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json's TestEvent, and the build events of
// `go test -json`).
type event struct {
	Action      string
	Package     string
	ImportPath  string // of a build-output line
	Test        string
	Elapsed     float64 // seconds
	Output      string
	FailedBuild string // the import path whose build failed the package
}

// line is one line of a package's output, and the test that wrote it ("" for the package).
type line struct{ test, text string }

// report keeps what is needed to print a package's end: the output of a running package in
// the order it came, the names of its failed tests, and the build output of the packages
// it depends on.
type report struct {
	out     io.Writer
	began   time.Time
	said    time.Time            // when the last line of the tool's own was printed
	running map[string]time.Time // package → when it started
	output  map[string][]line
	build   map[string][]string        // import path → its build output
	failed  map[string]map[string]bool // package → its failed tests

	packages, passed, failures, skipped int
	failedPackages                      []string
}

func newReport(out io.Writer, now time.Time) *report {
	return &report{out: out, began: now, said: now, running: map[string]time.Time{},
		output: map[string][]line{}, build: map[string][]string{}, failed: map[string]map[string]bool{}}
}

// line takes one line of input; a line that is not an event (go's own messages on stderr,
// such as module downloads) is printed as it is.
func (r *report) line(text string, now time.Time) {
	var e event
	if !strings.HasPrefix(text, "{") || json.Unmarshal([]byte(text), &e) != nil {
		r.say(now, text)
		return
	}
	switch {
	case e.Action == "build-output":
		r.build[e.ImportPath] = append(r.build[e.ImportPath], e.Output)
	case e.Action == "start" && e.Test == "":
		r.running[e.Package] = now
	case e.Action == "output":
		r.output[e.Package] = append(r.output[e.Package], line{e.Test, e.Output})
	case e.Test != "":
		r.testEnded(e)
	case e.Action == "pass" || e.Action == "fail" || e.Action == "skip":
		r.packageEnded(e, now)
	}
}

// testEnded counts a test's result (a subtest and its parent count one each) and notes a
// failed one.
func (r *report) testEnded(e event) {
	switch e.Action {
	case "pass":
		r.passed++
	case "skip":
		r.skipped++
	case "fail":
		r.failures++
		if r.failed[e.Package] == nil {
			r.failed[e.Package] = map[string]bool{}
		}
		r.failed[e.Package][e.Test] = true
	}
}

// packageEnded prints the package's line and, when it failed, what explains the failure.
func (r *report) packageEnded(e event, now time.Time) {
	delete(r.running, e.Package)
	if e.Action == "skip" { // no test files
		return
	}
	r.packages++
	took := time.Duration(e.Elapsed * float64(time.Second)).Round(100 * time.Millisecond)
	if e.Action == "pass" {
		r.say(now, fmt.Sprintf("ok    %s  %v", e.Package, took))
		// A panic in a passing package's output (a child process's, written to the test's
		// stderr) is shown as go test shows it without -json, for CI's check (.ci/run).
		for _, l := range r.output[e.Package] {
			if strings.Contains(l.text, "panic:") {
				r.say(now, strings.TrimRight(l.text, "\n"))
			}
		}
		r.drop(e.Package)
		return
	}
	r.failedPackages = append(r.failedPackages, e.Package)
	failedTests := r.failed[e.Package]
	if len(failedTests) == 0 {
		r.failures++ // the package failed outside any test: a build, TestMain, a timeout
	}
	var b strings.Builder
	fmt.Fprintf(&b, "FAIL  %s  %v\n", e.Package, took)
	if e.FailedBuild != "" {
		b.WriteString(strings.Join(r.build[e.FailedBuild], ""))
	}
	for _, l := range r.output[e.Package] {
		if l.test == "" || failedTests[l.test] {
			b.WriteString(l.text)
		}
	}
	r.say(now, strings.TrimRight(b.String(), "\n"))
	r.drop(e.Package)
}

// drop forgets the output kept for pkg.
func (r *report) drop(pkg string) {
	delete(r.output, pkg)
	delete(r.failed, pkg)
}

// remind names the packages still running when the tool has said nothing for a while.
func (r *report) remind(now time.Time) {
	if len(r.running) == 0 || now.Sub(r.said) < quiet {
		return
	}
	var names []string
	for pkg, since := range r.running {
		names = append(names, fmt.Sprintf("%s (%v)", pkg, now.Sub(since).Round(time.Second)))
	}
	slices.Sort(names)
	r.say(now, "..    running: "+strings.Join(names, ", "))
}

// finish reports the packages that never ended, prints the summary and returns the exit code.
func (r *report) finish(now time.Time) int {
	var unfinished []string
	for pkg := range r.running {
		unfinished = append(unfinished, pkg)
	}
	slices.Sort(unfinished)
	for _, pkg := range unfinished {
		r.failures++
		r.failedPackages = append(r.failedPackages, pkg)
		var b strings.Builder
		for _, l := range r.output[pkg] {
			b.WriteString(l.text)
		}
		r.say(now, fmt.Sprintf("FAIL  %s  started and never ended\n%s", pkg, strings.TrimRight(b.String(), "\n")))
	}
	if r.packages+len(unfinished) == 0 {
		r.failures++
		r.say(now, "FAIL  no package was tested")
	}
	fmt.Fprintf(r.out, "\n%d packages in %v, %d tests skipped", r.packages, now.Sub(r.began).Round(time.Second), r.skipped)
	if len(r.failedPackages) > 0 {
		fmt.Fprintf(r.out, "; failed: %s", strings.Join(r.failedPackages, " "))
	}
	fmt.Fprintf(r.out, "\n%d passed, %d failed\n", r.passed, r.failures)
	if r.failures > 0 {
		return 1
	}
	return 0
}

// say prints a line of the tool's own.
func (r *report) say(now time.Time, line string) {
	r.said = now
	fmt.Fprintln(r.out, line)
}
