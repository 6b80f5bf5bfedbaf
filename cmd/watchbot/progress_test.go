package main

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/watchbot/watchbot/internal/testing/testenv"
	"github.com/watchbot/watchbot/progress"
)

func TestParseProgressArgs(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    progressArgs
		wantErr string
	}{
		{name: "flags after the job id, as Watchbot's workers write them",
			args: []string{"complete-part", "job-1", "--part", "3"},
			want: progressArgs{command: "complete-part", job: "job-1", part: "3", given: []string{"part"}}},
		{name: "short flags before the command",
			args: []string{"-t", "10", "set-total", "job-1"},
			want: progressArgs{command: "set-total", job: "job-1", total: "10", given: []string{"total"}}},
		{name: "a number attached to a short flag, as minimist reads it",
			args: []string{"status", "job-1", "-p3", "--json"},
			want: progressArgs{command: "status", job: "job-1", part: "3", json: true, given: []string{"json", "part"}}},
		{name: "flags between and after",
			args: []string{"set-metadata", "--table=t1", "job-1", "-m", `{"a": 1}`},
			want: progressArgs{command: "set-metadata", job: "job-1", metadata: `{"a": 1}`, table: "t1", given: []string{"metadata", "table"}}},
		{name: "the reason as words after the job id",
			args: []string{"fail-job", "job-1", "disk", "full"},
			want: progressArgs{command: "fail-job", job: "job-1", rest: []string{"disk", "full"}}},
		{name: "a job id that looks like a flag, after --",
			args: []string{"status", "--", "-job-"},
			want: progressArgs{command: "status", job: "-job-"}},
		{name: "help", args: []string{"status", "--help"}, want: progressArgs{help: true, given: []string{"help"}}},
		{name: "nothing", args: nil, wantErr: "no command given"},
		{name: "no job id", args: []string{"complete-part", "-p", "1"}, wantErr: "no job id given: watchbot progress complete-part JOB-ID"},
		{name: "unknown flag", args: []string{"status", "job-1", "--parts", "3"}, wantErr: "watchbot progress has no flag --parts: did you mean --part?"},
		{name: "flag without its value", args: []string{"complete-part", "job-1", "-p"}, wantErr: "-p needs a value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseProgressArgs(tt.args)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, want an error with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(got.given)
			if !(got.command == tt.want.command && got.job == tt.want.job && got.total == tt.want.total &&
				got.part == tt.want.part && got.metadata == tt.want.metadata && got.reason == tt.want.reason &&
				got.table == tt.want.table && got.json == tt.want.json && got.help == tt.want.help &&
				slices.Equal(got.given, tt.want.given) && slices.Equal(got.rest, tt.want.rest)) {
				t.Fatalf("got %+v\n\twant %+v", got, tt.want)
			}
		})
	}
}

// progressEnv points the in-process CLI at a fresh progress table on the emulator, named in
// $ProgressTable as Watchbot's reduce mode passes it (an ARN), and returns the table's name.
func progressEnv(t *testing.T) (*testenv.Dynamo, string) {
	t.Helper()
	d := testenv.DynamoDB(t)
	for _, kv := range d.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	table := d.NewTable(t, progress.TableDefinition)
	t.Setenv("ProgressTable", "arn:aws:dynamodb:us-east-1:123456789012:table/"+table)
	t.Setenv("WATCHBOT_PROGRESS_TABLE", "")
	t.Setenv("DynamoDbEndpoint", "")
	return d, table
}

// The commands print what watchbot-progress prints: nothing for the writes, true or false for
// complete-part, the status object; --json one object; every failure exits 1.
func TestProgressCommands(t *testing.T) {
	progressEnv(t)
	steps := []struct {
		args       []string
		code       int
		stdout     string
		stderrHas  string
		stderrNone bool
	}{
		{args: []string{"status", "job"}, stdout: `{"progress":0}` + "\n"},
		{args: []string{"complete-part", "job", "-p", "1"}, code: 1, stderrHas: `job "job": its total was never set: set-total comes first`},
		{args: []string{"set-total", "job", "--total", "4"}, stdout: ""},
		{args: []string{"set-total", "job", "--total", "4", "--json"}, stdout: `{"job":"job","total":4,"created":false}` + "\n"},
		{args: []string{"set-total", "job", "-t", "5"}, code: 1, stderrHas: "the job already has another total (4)"},
		{args: []string{"complete-part", "job", "--part", "1"}, stdout: "false\n"},
		{args: []string{"complete-part", "job", "-p", "2"}, stdout: "false\n"},
		{args: []string{"complete-part", "job", "-p", "2", "--json"}, stdout: `{"job":"job","part":2,"complete":false,"duplicate":true}` + "\n"},
		{args: []string{"status", "job", "-p", "2"}, stdout: `{"progress":0.5,"partComplete":true}` + "\n"},
		{args: []string{"status", "job", "-p", "3"}, stdout: `{"progress":0.5,"partComplete":false}` + "\n"},
		{args: []string{"set-metadata", "job", "-m", `{"name": "favorite-map-reduce"}`}, stdout: ""},
		{args: []string{"complete-part", "job", "-p", "3"}, stdout: "false\n"},
		{args: []string{"complete-part", "job", "-p", "4"}, stdout: "true\n"},
		{args: []string{"complete-part", "job", "-p", "4"}, stdout: "false\n"},
		{args: []string{"reduce-sent", "job"}, stdout: ""},
		{args: []string{"status", "job"}, stdout: `{"progress":1,"metadata":{"name":"favorite-map-reduce"},"reduceSent":true}` + "\n"},
		{args: []string{"fail-job", "job", "-r", "too late"}, stdout: ""},
		{args: []string{"status", "job", "--json"},
			stdout: `{"job":"job","total":4,"done":4,"progress":1,"complete":true,"failed":true,"reason":"too late","metadata":{"name":"favorite-map-reduce"},"reduceSent":true}` + "\n"},
		{args: []string{"fail-job", "other", "disk", "full", "--json"}, stdout: `{"job":"other","failed":true,"reason":"disk full"}` + "\n"},
		{args: []string{"status", "other"}, stdout: `{"progress":0,"failed":"disk full"}` + "\n"},
		{args: []string{"reduce-sent", "other", "--total", "3"}, stderrHas: "progress reduce-sent ignores --total"},
		// Bad input: each one line on stderr, exit 1, nothing on stdout.
		{args: []string{"complete-part", "job", "-p", "5"}, code: 1, stderrHas: `part 5 of job "job" is outside 1..4 (its total)`},
		{args: []string{"complete-part", "job", "-p", "0"}, code: 1, stderrHas: "part 0 is outside 1..10000000"},
		{args: []string{"complete-part", "job", "-p", "two"}, code: 1, stderrHas: `--part "two" is not a whole number`},
		{args: []string{"complete-part", "job"}, code: 1, stderrHas: "--part is required (-p N)"},
		{args: []string{"set-total", "new"}, code: 1, stderrHas: "--total is required (-t N)"},
		{args: []string{"set-total", "new", "-t", "0"}, code: 1, stderrHas: "total 0 is outside 1..10000000"},
		{args: []string{"set-metadata", "job", "-m", "{name: 1}"}, code: 1, stderrHas: "--metadata: metadata is not JSON"},
		{args: []string{"set-metadata", "job"}, code: 1, stderrHas: "set-metadata needs --metadata JSON"},
		{args: []string{"fail-job", "job"}, code: 1, stderrHas: "fail-job needs a reason (--reason)"},
		{args: []string{"status", "job\xff"}, code: 1, stderrHas: "not valid UTF-8"},
		{args: []string{"status", strings.Repeat("j", 1025)}, code: 1, stderrHas: "1025 bytes long; at most 1024"},
		{args: []string{"status", "job", "job2"}, code: 1, stderrHas: `status takes one job id; "job2" is one word too many`},
		{args: []string{"finish", "job"}, code: 1, stderrHas: `unknown command "finish": want set-total, complete-part, status, set-metadata, fail-job, reduce-sent`},
		{args: []string{"status"}, code: 1, stderrHas: "no job id given"},
		{args: []string{"status", "job", "--bogus"}, code: 1, stderrHas: "watchbot progress has no flag --bogus"},
		{args: []string{"status", "job", "--table", "no-such-table"}, code: 1,
			stderrHas: `status "job" in table no-such-table: table not found: `},
		{args: []string{"status", "job", "--table", "arn:aws:s3:::bucket"}, code: 1, stderrHas: `--table: "arn:aws:s3:::bucket" is not a DynamoDB table ARN`},
		{args: []string{"set-total", "ttl", "-t", "2", "--ttl", "48h"}, stdout: ""},
		{args: []string{"set-total", "kept", "-t", "2", "--ttl", "0"}, stdout: ""},
		{args: []string{"set-total", "secs", "-t", "2", "--ttl", "86400"}, stdout: ""},
		{args: []string{"status", "kept", "--ttl", "0"}, stdout: `{"progress":0}` + "\n", stderrHas: "progress status ignores --ttl"},
		{args: []string{"set-metadata", "job", "-m", "{}", "--ttl", "a week"}, code: 1, stderrHas: `--ttl: "a week" is not a duration (use 90s, 5m, 1h30m or whole seconds); 0 never expires`},
		{args: []string{"reduce-sent", "job", "--ttl", "10m"}, code: 1, stderrHas: "--ttl 10m0s: at least 1h0m0s, or 0 to never expire"},
	}
	for _, st := range steps {
		code, stdout, stderr := runCLI(t, nil, append([]string{"progress"}, st.args...)...)
		if code != st.code || stdout != st.stdout || !strings.Contains(stderr, st.stderrHas) {
			t.Errorf("watchbot progress %q: exit %d, stdout %q, stderr %q\n\twant exit %d, stdout %q, stderr with %q",
				st.args, code, stdout, stderr, st.code, st.stdout, st.stderrHas)
		}
		if st.code != 0 && strings.Count(stderr, "\n") != 1 {
			t.Errorf("watchbot progress %q: stderr is not one line: %q", st.args, stderr)
		}
	}
}

// The table comes from --table, else $ProgressTable, else $WATCHBOT_PROGRESS_TABLE; the
// endpoint from --endpoint-url, else Watchbot's $DynamoDbEndpoint, else the SDK's variables.
func TestProgressTableAndEndpoint(t *testing.T) {
	d, table := progressEnv(t)
	other := d.NewTable(t, progress.TableDefinition)
	if code, _, stderr := runCLI(t, nil, "progress", "set-total", "job", "-t", "2", "--table", other); code != 0 {
		t.Fatalf("set-total --table: exit %d: %s", code, stderr)
	}
	status := func(args ...string) string {
		t.Helper()
		code, stdout, stderr := runCLI(t, nil, append([]string{"progress", "status", "job", "--json"}, args...)...)
		if code != 0 {
			t.Fatalf("status %q: exit %d: %s", args, code, stderr)
		}
		return stdout
	}
	if got := status(); !strings.Contains(got, `"total":0`) {
		t.Errorf("$ProgressTable's job = %s, want none (the job is in --table's)", got)
	}
	if got := status("--table", other); !strings.Contains(got, `"total":2`) {
		t.Errorf("--table's job = %s", got)
	}
	t.Setenv("ProgressTable", "")
	t.Setenv("WATCHBOT_PROGRESS_TABLE", other)
	if got := status(); !strings.Contains(got, `"total":2`) {
		t.Errorf("$WATCHBOT_PROGRESS_TABLE's job = %s", got)
	}
	t.Setenv("WATCHBOT_PROGRESS_TABLE", "")
	if code, _, stderr := runCLI(t, nil, "progress", "status", "job"); code != 1 || !strings.Contains(stderr, "no progress table: give --table, or set $ProgressTable") {
		t.Errorf("no table: exit %d, %q", code, stderr)
	}
	// Watchbot's endpoint variable, when the SDK's points elsewhere.
	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", "http://127.0.0.1:1")
	t.Setenv("DynamoDbEndpoint", d.Endpoint)
	if got := status("--table", table); !strings.Contains(got, `"total":0`) {
		t.Errorf("through $DynamoDbEndpoint: %s", got)
	}
	t.Setenv("DynamoDbEndpoint", "")
	if code, _, stderr := runCLI(t, nil, "progress", "status", "job", "--table", table, "--endpoint-url", d.Endpoint); code != 0 {
		t.Errorf("--endpoint-url: exit %d: %s", code, stderr)
	}
}

// 50 parts, each sent twice, 100 worker processes of the built binary at once: exactly one
// prints true.
func TestProgressBinaryConcurrentTrueOnce(t *testing.T) {
	t.Parallel()
	d := testenv.DynamoDB(t)
	table := d.NewTable(t, progress.TableDefinition)
	bin := testenv.Binary(t)
	env := testenv.CleanEnv(t, append(d.Env(), "ProgressTable=arn:aws:dynamodb:us-east-1:123456789012:table/"+table)...)
	cli := func(args ...string) (string, error) {
		cmd := exec.Command(bin, append([]string{"progress"}, args...)...)
		cmd.Env = env
		out, err := cmd.Output()
		return string(out), err
	}
	if _, err := cli("set-total", "job", "-t", "50"); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	answers := map[string]int{}
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Go(func() {
			out, err := cli("complete-part", "job", "-p", strconv.Itoa(i%50+1))
			if err != nil {
				t.Errorf("complete-part %d: %v", i%50+1, err)
			}
			mu.Lock()
			answers[out]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if answers["true\n"] != 1 || answers["false\n"] != 99 {
		t.Fatalf("answers = %v, want true once and false 99 times", answers)
	}
}

// make demo-mapreduce runs, with its checks: one true, one reduce, the right sum.
func TestDemoMapReduce(t *testing.T) {
	t.Parallel()
	testenv.DynamoDB(t) // skips (or fails under CI) when the emulators cannot run
	if _, err := exec.LookPath("jq"); err != nil {
		testenv.Require(t, "jq is not installed", err)
	}
	root, err := testenv.Root()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(root, "scripts", "demo-mapreduce"))
	cmd.Env = testenv.CleanEnv(t, "WATCHBOT_BIN="+testenv.Binary(t), "PARTS=20")
	var out testenv.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if code := testenv.Spawn(t, cmd).Wait(t, 3*time.Minute, out.String); code != 0 {
		t.Fatalf("demo-mapreduce exit %d:\n%s", code, out.String())
	}
	if !strings.Contains(out.String(), "demo-mapreduce: ok: 20 parts, 5 duplicates, one reduce, result 2870") {
		t.Fatalf("demo-mapreduce did not report success:\n%s", out.String())
	}
}

// parseProgressArgs never panics, and what it accepts without --help has a command and a job.
func FuzzParseProgressArgs(f *testing.F) {
	for _, s := range []string{"complete-part job -p 3", "-t5 set-total job", "status -- -x", "fail-job j a b -r", "-p"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := parseProgressArgs(strings.Fields(s))
		if err == nil && !a.help && (a.command == "" || a.job == "") {
			t.Fatalf("parseProgressArgs(%q) = %+v without an error", s, a)
		}
	})
}
