package main

import (
	"strings"
	"testing"
	"time"
)

// stream is a go test -json run of four packages, as go 1.26 writes them: one passes, one
// fails a subtest, one fails to build and one never ends (its test binary was killed).
const stream = `go: downloading example.com/dep v1.0.0
{"Action":"start","Package":"m/ok"}
{"Action":"run","Package":"m/ok","Test":"TestA"}
{"Action":"output","Package":"m/ok","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"output","Package":"m/ok","Test":"TestA","Output":"    a_test.go:9: passing chatter\n"}
{"Action":"output","Package":"m/ok","Test":"TestA","Output":"panic: in a child\n"}
{"Action":"pass","Package":"m/ok","Test":"TestA","Elapsed":0.1}
{"Action":"skip","Package":"m/ok","Test":"TestSkipped","Elapsed":0}
{"Action":"output","Package":"m/ok","Output":"ok  \tm/ok\t1.25s\n"}
{"Action":"pass","Package":"m/ok","Elapsed":1.25}
{"Action":"start","Package":"m/bad"}
{"Action":"output","Package":"m/bad","Test":"TestB","Output":"=== RUN   TestB\n"}
{"Action":"output","Package":"m/bad","Test":"TestB/row","Output":"    b_test.go:12: got 3, want 4\n"}
{"Action":"fail","Package":"m/bad","Test":"TestB/row","Elapsed":0}
{"Action":"output","Package":"m/bad","Test":"TestB/other","Output":"    b_test.go:12: fine\n"}
{"Action":"pass","Package":"m/bad","Test":"TestB/other","Elapsed":0}
{"Action":"fail","Package":"m/bad","Test":"TestB","Elapsed":0}
{"Action":"output","Package":"m/bad","Output":"FAIL\tm/bad\t0.5s\n"}
{"Action":"fail","Package":"m/bad","Elapsed":0.5}
{"ImportPath":"m/broken [m/broken.test]","Action":"build-output","Output":"m/broken/x.go:3:1: syntax error\n"}
{"ImportPath":"m/broken [m/broken.test]","Action":"build-fail"}
{"Action":"start","Package":"m/broken"}
{"Action":"output","Package":"m/broken","Output":"FAIL\tm/broken [build failed]\n"}
{"Action":"fail","Package":"m/broken","Elapsed":0,"FailedBuild":"m/broken [m/broken.test]"}
{"Action":"skip","Package":"m/empty"}
{"Action":"start","Package":"m/killed"}
{"Action":"output","Package":"m/killed","Output":"panic: test timed out after 12m0s\n"}
`

func TestReport(t *testing.T) {
	var out strings.Builder
	code := run(strings.NewReader(stream), &out, time.Now)
	got := out.String()
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	lines := strings.Split(strings.TrimRight(got, "\n"), "\n")
	if last := lines[len(lines)-1]; last != "2 passed, 4 failed" {
		t.Errorf("last line %q, want %q:\n%s", last, "2 passed, 4 failed", got)
	}
	for _, want := range []string{
		"go: downloading example.com/dep v1.0.0\n",
		"ok    m/ok  1.3s\npanic: in a child\n",
		"FAIL  m/bad  500ms\n",
		"b_test.go:12: got 3, want 4\n",
		"FAIL  m/broken  0s\nm/broken/x.go:3:1: syntax error\n",
		"=== RUN   TestB\n    b_test.go:12: got 3, want 4\n",
		"FAIL  m/killed  started and never ended\npanic: test timed out after 12m0s\n",
		"3 packages in ",
		", 1 tests skipped; failed: m/bad m/broken m/killed\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	for _, unwanted := range []string{"passing chatter", "fine", "m/empty"} {
		if strings.Contains(got, unwanted) {
			t.Errorf("output has %q, the output of a test or package that passed or had no tests:\n%s", unwanted, got)
		}
	}
}

func TestReportPasses(t *testing.T) {
	var out strings.Builder
	in := `{"Action":"start","Package":"m/ok"}
{"Action":"pass","Package":"m/ok","Test":"TestA","Elapsed":0.1}
{"Action":"pass","Package":"m/ok","Elapsed":0.2}
`
	if code := run(strings.NewReader(in), &out, time.Now); code != 0 || !strings.HasSuffix(out.String(), "\n1 passed, 0 failed\n") {
		t.Errorf("exit %d, output:\n%s", code, out.String())
	}
}

func TestReportNothingTested(t *testing.T) {
	var out strings.Builder
	in := "go: no packages to test\n"
	if code := run(strings.NewReader(in), &out, time.Now); code != 1 || !strings.HasSuffix(out.String(), "\n0 passed, 1 failed\n") {
		t.Errorf("exit %d, output:\n%s", code, out.String())
	}
}

func TestRemind(t *testing.T) {
	var out strings.Builder
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := newReport(&out, start)
	r.line(`{"Action":"start","Package":"m/slow"}`, start)
	r.line(`{"Action":"start","Package":"m/slower"}`, start.Add(-time.Minute))
	r.remind(start.Add(30 * time.Second))
	if out.Len() != 0 {
		t.Errorf("a reminder before a quiet minute: %q", out.String())
	}
	r.remind(start.Add(90 * time.Second))
	if want := "..    running: m/slow (1m30s), m/slower (2m30s)\n"; out.String() != want {
		t.Errorf("reminder %q, want %q", out.String(), want)
	}
}
