package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// TestMistakes runs each mistake a new user makes, with each command it applies to, and checks
// the one line that answers it and the exit code: 2 where the command or its environment must
// change, 1 where the command is right and the world is not.
func TestMistakes(t *testing.T) {
	emu := testenv.SQS(t)
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	port := emu.Endpoint[strings.LastIndex(emu.Endpoint, ":")+1:]
	// The emulator's queue URLs have the host sqs.REGION.localhost: a loopback name.
	missing := "http://127.0.0.1:" + port + "/000000000000/no-such-queue"
	denied := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"__type":"com.amazon.coral.service#AccessDeniedException","message":"not authorized to perform sqs:GetQueueAttributes"}`))
	}))
	defer denied.Close()
	deniedQueue := denied.URL + "/000000000000/jobs"
	// An SQS that knows no queue: the endpoint of another emulator, say.
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"__type":"com.amazonaws.sqs#QueueDoesNotExist","message":"The specified queue does not exist."}`))
	}))
	defer elsewhere.Close()
	gone := httptest.NewServer(http.NotFoundHandler())
	closed := gone.URL
	gone.Close()
	unreachable := closed + "/000000000000/jobs"

	creds := map[string]string{"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_EC2_METADATA_DISABLED": "true"}
	noCreds := map[string]string{"AWS_EC2_METADATA_DISABLED": "true"}
	withEnv := func(base map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range base {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	tests := []struct {
		name string
		env  map[string]string
		args []string
		code int
		want string // in stderr, which is then one line
		out  string // in stdout
	}{
		// A loopback host is its own endpoint (any host not AWS's is: awsenv's TestQueueSQS).
		{"loopback host: status", creds, []string{"status", "--queue-url", q.URL}, 0, "", "visible"},
		// A queue that does not exist.
		{"no queue: status", creds, []string{"status", "--queue-url", missing}, 2, "queue " + missing + " does not exist", ""},
		{"no queue: send", creds, []string{"send", "--queue-url", missing, "--body", "x"}, 2, "queue " + missing + " does not exist", ""},
		{"no queue: dead-letter", creds, []string{"dead-letter", "--queue-url", missing, "peek"}, 2, "queue " + missing + " does not exist", ""},
		{"no queue: listen", creds, []string{"listen", "--queue-url", missing, "--log-level", "warn", "--", "true"}, 2, "queue " + missing + " does not exist: check its name, account and region", ""},
		// An endpoint that is not the URL's host, which knows no such queue: it is named.
		{"another endpoint: status", creds, []string{"status", "--queue-url", q.URL, "--endpoint-url", elsewhere.URL}, 2,
			"queue " + q.URL + " does not exist at " + elsewhere.URL + ", which is not the URL's host: check --endpoint-url and AWS_ENDPOINT_URL_SQS", ""},
		{"another endpoint: listen", creds, []string{"listen", "--queue-url", q.URL, "--endpoint-url", elsewhere.URL, "--", "true"}, 2,
			"queue " + q.URL + " does not exist at " + elsewhere.URL + ", which is not the URL's host: check --endpoint-url and AWS_ENDPOINT_URL_SQS", ""},
		{"another endpoint from the environment: listen", withEnv(creds, "AWS_ENDPOINT_URL_SQS", elsewhere.URL), []string{"listen", "--queue-url", q.URL, "--", "true"}, 2,
			"does not exist at " + elsewhere.URL + ", which is not the URL's host", ""},
		// Nothing answers at the endpoint.
		{"unreachable: status", creds, []string{"status", "--queue-url", unreachable, "--endpoint-url", closed}, 1, "SQS could not be reached (dial tcp " + strings.TrimPrefix(closed, "http://") + ": connect: connection refused): check --endpoint-url", ""},
		{"unreachable: dead-letter", creds, []string{"dead-letter", "--queue-url", unreachable, "--endpoint-url", closed, "count"}, 1, "SQS could not be reached", ""},
		{"unreachable: listen", creds, []string{"listen", "--queue-url", unreachable, "--endpoint-url", closed, "--", "true"}, 1, "queue " + unreachable + ": SQS could not be reached (dial tcp " + strings.TrimPrefix(closed, "http://") + ": connect: connection refused): check --endpoint-url", ""},
		{"unreachable, not the URL's host: listen", creds, []string{"listen", "--queue-url", q.URL, "--endpoint-url", closed, "--", "true"}, 1,
			"queue " + q.URL + ": SQS could not be reached at " + closed + ", which is not the URL's host (dial tcp", ""},
		// No permission for an operator's command: the command is right, exit 1.
		{"denied: status", creds, []string{"status", "--queue-url", deniedQueue}, 1, "permission denied", ""},
		{"denied: dead-letter", creds, []string{"dead-letter", "--queue-url", deniedQueue, "count"}, 1, "permission denied", ""},
		// listen at its start: the role lacks a grant, which no restart mends, so exit 2.
		{"denied: listen", creds, []string{"listen", "--queue-url", deniedQueue, "--endpoint-url", denied.URL, "--", "true"}, 2, "queue " + deniedQueue + ": permission denied (not authorized to perform sqs:GetQueueAttributes): grant the credentials in use the SQS actions listed in docs/listen.md#iam-permissions", ""},
		// No credentials.
		{"no credentials: status", noCreds, []string{"status", "--queue-url", q.URL}, 2, "no AWS credentials found: set AWS_PROFILE", ""},
		{"no credentials: send", noCreds, []string{"send", "--queue-url", q.URL, "--body", "x"}, 2, "no AWS credentials found", ""},
		{"no credentials: dead-letter", noCreds, []string{"dead-letter", "--queue-url", q.URL, "count"}, 2, "no AWS credentials found", ""},
		// Flag typos and bad values.
		{"typo: listen", creds, []string{"listen", "--concurency", "4", "--", "true"}, 2, "watchbot listen has no flag --concurency: did you mean --concurrency?", ""},
		{"typo: dead-letter verb", creds, []string{"dead-letter", "peek", "--limt", "3"}, 2, "did you mean --limit?", ""},
		{"typo: send", creds, []string{"send", "--queue-url", q.URL, "--bdy", "x"}, 2, "did you mean --body?", ""},
		{"typo: status", creds, []string{"status", "--queue", q.URL}, 2, "did you mean --queue-url?", ""},
		{"typo: try", creds, []string{"try", "--bodi", "x", "--", "true"}, 2, "did you mean --body?", ""},
		{"not a number", creds, []string{"listen", "--concurrency", "four", "--", "true"}, 2, `--concurrency: "four" is not a whole number`, ""},
		{"no value", creds, []string{"status", "--queue-url"}, 2, "--queue-url needs a value", ""},
		// Help, and names that do not exist.
		{"help", creds, []string{"help"}, 0, "", "watchbot - supervise queue workers"},
		{"help listen", creds, []string{"help", "listen"}, 0, "", "watchbot listen - long-poll a queue"},
		{"help dead-letter peek", creds, []string{"help", "dead-letter", "peek"}, 0, "", "watchbot dead-letter peek - show messages"},
		{"help of nothing", creds, []string{"help", "lsiten"}, 2, "did you mean listen?", ""},
		{"unknown command", creds, []string{"lsten"}, 2, `watchbot has no command "lsten": the commands are listen, `, ""},
		{"unknown verb", creds, []string{"dead-letter", "--queue-url", q.URL, "peak"}, 2, `has no verb "peak": the verbs are count, peek, replay, purge, export, import, triage; did you mean peek?`, ""},
		// The queue from the environment, as listen takes it; without it, one line.
		{"queue from WATCHBOT_QUEUE_URL: status", withEnv(creds, "WATCHBOT_QUEUE_URL", q.URL), []string{"status"}, 0, "", "visible"},
		{"queue from QueueUrl: dead-letter", withEnv(creds, "QueueUrl", q.URL), []string{"dead-letter", "count"}, 0, "", "visible:"},
		{"no queue given: status", creds, []string{"status"}, 2, "give the queue: --queue-url URL, or WATCHBOT_QUEUE_URL", ""},
		{"no queue given: send", creds, []string{"send", "--body", "x"}, 2, "give the queue: --queue-url URL, or WATCHBOT_QUEUE_URL", ""},
		{"no queue given: dead-letter", creds, []string{"dead-letter", "count"}, 2, "give --queue-url", ""},
		// Several queues where a command works on one: refused, none ignored.
		{"several queues: dead-letter", withEnv(creds, "WATCHBOT_QUEUE_URL", q.URL+","+missing), []string{"dead-letter", "count"}, 2, "the dead-letter tools work on the dead-letter queue of one queue", ""},
		{"several queues, before and after the verb: dead-letter", creds, []string{"dead-letter", "--queue-url", q.URL, "count", "--queue-url", missing}, 2, "--queue-url is given 2 times: the dead-letter tools work on the dead-letter queue of one queue", ""},
		{"several queues: send", creds, []string{"send", "--queue-url", q.URL, "--queue-url", missing, "--body", "x"}, 2, "--queue-url is given 2 times: send puts messages on one queue", ""},
		{"several queues in one value: send", creds, []string{"send", "--queue-url", q.URL + "," + missing, "--body", "x"}, 2, "names several queues", ""},
		{"the dead-letter queue given, several queues in the environment: dead-letter", withEnv(creds, "WATCHBOT_QUEUE_URL", q.URL+","+missing), []string{"dead-letter", "--dlq-url", q.DLQURL, "count"}, 0, "", "visible:"},
		{"no queue given: listen", creds, []string{"listen", "--", "true"}, 2, "give the queue: --queue-url URL, or WATCHBOT_QUEUE_URL", ""},
		// Arguments that mean nothing.
		{"stray argument: send", creds, []string{"send", "--queue-url", q.URL, "hello"}, 2, `watchbot send takes no arguments, but got "hello": a message body goes in --body`, ""},
		{"stray argument: status", creds, []string{"status", "--queue-url", q.URL, "now"}, 2, `watchbot status takes no arguments, but got "now"`, ""},
		{"stray argument: dead-letter count", creds, []string{"dead-letter", "--queue-url", q.URL, "count", "all"}, 2, `watchbot dead-letter count takes no arguments, but got "all"`, ""},
		{"empty try", creds, []string{"try", "--", "true"}, 2, "to try an empty message, give --body '' explicitly", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL_SQS", "AWS_ENDPOINT_URL", "WATCHBOT_QUEUE_URL", "QueueUrl"} {
				t.Setenv(k, "")
			}
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			code, stdout, stderr := runCLI(t, nil, tt.args...)
			if code != tt.code || !strings.Contains(stderr, tt.want) || !strings.Contains(stdout, tt.out) {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s\nwant in stderr: %s", code, tt.code, stdout, stderr, tt.want)
			}
			if tt.code != 0 && (strings.Count(stderr, "\n") != 1 || strings.Contains(stdout+stderr, "USAGE:")) {
				t.Errorf("the answer is not one line:\nstdout: %s\nstderr: %s", stdout, stderr)
			}
		})
	}
}
