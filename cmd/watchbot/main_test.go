package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// TestMain clears this machine's AWS and tracing variables first. Its commands run in process load the AWS configuration (awsenv.Load) from the environment,
// and this machine's (AWS_CA_BUNDLE among them) are not a user's.
func TestMain(m *testing.M) { testenv.Main(m) }

// `watchbot version` and `watchbot --version` print one and the same line.
func TestVersion(t *testing.T) {
	var lines []string
	for _, args := range [][]string{{"watchbot", "version"}, {"watchbot", "--version"}} {
		var stdout, stderr bytes.Buffer
		if code := run(args, strings.NewReader(""), &stdout, &stderr); code != 0 {
			t.Fatalf("%v: exit %d, stderr %q", args, code, stderr.String())
		}
		lines = append(lines, stdout.String())
	}
	if want := "watchbot version " + version + "\n"; lines[0] != want || lines[1] != want {
		t.Errorf("version prints %q and --version %q, want %q for both", lines[0], lines[1], want)
	}
}
