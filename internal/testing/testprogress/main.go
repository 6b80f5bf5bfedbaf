// Command testprogress reads the output of `go test -json` on its standard input and prints
// one line per package as it ends, with its time, the full output of every failed test and
// of every package that failed outside a test, a line naming the packages still running
// after a minute without news, and ends with a summary whose last line is "N passed, N
// failed". It exits 1 when a test or a package failed, a package started and never ended, or
// no package ran at all, so that a pipe that loses go test's exit status still fails. `make
// test` pipes its test runs through it; it is not part of the product.
//
//	go test -json ./... 2>&1 | go run ./internal/testing/testprogress
package main

import (
	"bufio"
	"io"
	"os"
	"time"
)

// quiet is how long the tool waits without a line of its own before it names the packages
// still running.
const quiet = time.Minute

func main() {
	os.Exit(run(os.Stdin, os.Stdout, time.Now))
}

// run reads the stream from in until it ends, reports to out, and returns the exit code.
func run(in io.Reader, out io.Writer, now func() time.Time) int {
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	r := newReport(out, now())
	tick := time.NewTicker(quiet / 4)
	defer tick.Stop()
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				return r.finish(now())
			}
			r.line(line, now())
		case <-tick.C:
			r.remind(now())
		}
	}
}
