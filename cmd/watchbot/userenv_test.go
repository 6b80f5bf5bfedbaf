package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/watchbot/watchbot/internal/testing/testenv"
	"github.com/watchbot/watchbot/progress"
)

// setMachineEnv sets in the test process what this sandbox (and developers' machines, and
// CI) set and users' machines do not, and returns it. The CA bundle names no file: a watchbot
// that inherited it could not load its AWS configuration at all.
func setMachineEnv(t *testing.T) map[string]string {
	machine := map[string]string{
		"AWS_CA_BUNDLE": "/nonexistent/ca-bundle.pem",
		"SSL_CERT_FILE": "/nonexistent/cert.pem",
		"HTTPS_PROXY":   "http://127.0.0.1:9",
		"TMPDIR":        t.TempDir(),
	}
	for k, v := range machine {
		t.Setenv(k, v)
	}
	return machine
}

// Every command of the built binary, run as a user runs it: nothing of the machine's
// environment reaches it, though the test process carries AWS_CA_BUNDLE and the rest, and
// nothing panics.
func TestBinaryCommandsInAUsersEnvironment(t *testing.T) {
	emu := testenv.SQS(t)
	d := testenv.DynamoDB(t)
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	table := "arn:aws:dynamodb:us-east-1:000000000000:table/" + d.NewTable(t, progress.TableDefinition)
	testenv.Binary(t)
	setMachineEnv(t)
	tests := []struct {
		name string
		args []string
		env  []string
		want string // in stdout
	}{
		{"send", []string{"send", "--queue-url", q.URL, "--body", "hi"}, nil, ""},
		{"status", []string{"status", "--queue-url", q.URL, "--json"}, nil, `"visible"`},
		{"dead-letter count", []string{"dead-letter", "--queue-url", q.URL, "count"}, nil, "0"},
		{"dead-letter peek", []string{"dead-letter", "--queue-url", q.URL, "peek"}, nil, ""},
		{"progress set-total", []string{"progress", "set-total", "job", "-t", "2"}, append(d.Env(), "ProgressTable="+table), ""},
		{"progress status", []string{"progress", "status", "job"}, append(d.Env(), "ProgressTable="+table), `"progress":0`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := emu.Watchbot(t, tt.args...)
			cmd.Env = append(cmd.Env, tt.env...)
			var stdout, stderr testenv.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			code := testenv.Spawn(t, cmd).Wait(t, 60*time.Second, stderr.String)
			if code != 0 || strings.Contains(stdout.String()+stderr.String(), "panic:") {
				t.Fatalf("exit %d:\n%s%s", code, stdout.String(), stderr.String())
			}
			if !strings.Contains(stdout.String(), tt.want) {
				t.Errorf("stdout %q, want %q in it", stdout.String(), tt.want)
			}
		})
	}
}

// A worker of the built binary sees a user's environment: the AWS variables the test set,
// PATH and a HOME of its own, and nothing of the machine's, though the test process has it.
func TestWorkerSeesAUsersEnvironment(t *testing.T) {
	emu := testenv.SQS(t)
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	testenv.Binary(t)
	machine := setMachineEnv(t)
	dir := t.TempDir()
	worker := filepath.Join(dir, "worker")
	if err := os.WriteFile(worker, []byte("#!/bin/sh\nenv > \"$OUT.tmp\" && mv \"$OUT.tmp\" \"$OUT\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "env")
	cmd := emu.Watchbot(t, "listen", "--queue-url", q.URL, "--once", "--", worker)
	cmd.Env = append(cmd.Env, "OUT="+out)
	var logs testenv.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	p := testenv.Spawn(t, cmd)
	send := emu.Watchbot(t, "send", "--queue-url", q.URL, "--body", "hi")
	if b, err := send.CombinedOutput(); err != nil {
		t.Fatalf("send: %v\n%s", err, b)
	}
	var seen []byte
	testenv.Eventually(t, "the worker to write its environment", 30*time.Second, func() bool {
		var err error
		seen, err = os.ReadFile(out)
		return err == nil
	}, logs.String)
	if code := p.Wait(t, 30*time.Second, logs.String); code != 0 || strings.Contains(logs.String(), "panic:") {
		t.Fatalf("listen exit %d:\n%s", code, logs.String())
	}
	env := map[string]string{}
	for line := range strings.Lines(string(seen)) {
		k, v, _ := strings.Cut(strings.TrimSuffix(line, "\n"), "=")
		env[k] = v
	}
	for k, v := range machine {
		if got, ok := env[k]; ok && got == v {
			t.Errorf("the worker sees the machine's %s=%s", k, got)
		}
	}
	if env["HOME"] == os.Getenv("HOME") || env["HOME"] == "" {
		t.Errorf("the worker's HOME is %q, want a directory of the test's own", env["HOME"])
	}
	if env["AWS_REGION"] != testenv.Region || env["MessageId"] == "" || env["PATH"] == "" {
		t.Errorf("the worker lacks what the test set or its job (AWS_REGION, MessageId, PATH):\n%s", seen)
	}
}
