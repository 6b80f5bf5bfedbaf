package main

import (
	"encoding/json"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/watchbot/watchbot/deadletter"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// twoEmulators returns the shared emulator and a second one, each with a queue that holds n
// and m messages: queues on two endpoints, as two local stacks (or two regions) give them.
func twoEmulators(t *testing.T, n, m int) (first, second testenv.Queue, clients [2]*sqs.Client) {
	t.Helper()
	emu := testenv.SQS(t)
	other, err := testenv.Start()
	testenv.Require(t, "a second SQS emulator did not start", err)
	clients = [2]*sqs.Client{emu.Client(), other.Client()}
	first = emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	second = other.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})
	for i, q := range []testenv.Queue{first, second} {
		if _, err := testenv.Send(t.Context(), clients[i], q.URL, slices.Repeat([]string{"job"}, []int{n, m}[i]), nil); err != nil {
			t.Fatal(err)
		}
	}
	return first, second, clients
}

// One listen serves queues on two endpoints: with no endpoint given, each queue's requests
// go to its URL's host, and both queues' messages run and are deleted.
func TestListenQueuesOnTwoEndpoints(t *testing.T) {
	t.Parallel()
	first, second, clients := twoEmulators(t, 2, 3)
	cmd := testenv.SQS(t).Watchbot(t, "listen", "--queue-url", first.URL, "--queue-url", second.URL, "--concurrency", "2", "--", "true")
	cmd.Env = append(cmd.Env, "AWS_ENDPOINT_URL_SQS=") // each URL names its endpoint
	out := &testenv.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	p := testenv.Spawn(t, cmd)
	testenv.Eventually(t, "both queues worked off", 30*time.Second, func() bool {
		return testenv.Depth(t, clients[0], first.URL).Total() == 0 && testenv.Depth(t, clients[1], second.URL).Total() == 0
	}, out.String)
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	if code := p.Wait(t, 30*time.Second); code != 0 {
		t.Fatalf("exit code %d after a clean drain, want 0; output:\n%s", code, out)
	}
	for i, q := range []testenv.Queue{first, second} {
		if c := testenv.Depth(t, clients[i], q.DLQURL); c.Total() != 0 {
			t.Errorf("%d messages dead-lettered from %s, want 0", c.Total(), q.Name)
		}
	}
}

// status with the URLs of queues on two endpoints shows each queue by its name, with its own
// counts, each read from its own endpoint.
func TestStatusQueuesOnTwoEndpoints(t *testing.T) {
	first, second, _ := twoEmulators(t, 1, 2)
	for _, kv := range testenv.SQS(t).Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	t.Setenv("AWS_ENDPOINT_URL_SQS", "")
	code, stdout, stderr := runCLI(t, nil, "status", "--json", "--queue-url", first.URL, "--queue-url", second.URL)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var got []deadletter.QueueStatus
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("%v:\n%s", err, stdout)
	}
	if len(got) != 2 || got[0].Name != first.Name || got[1].Name != second.Name {
		t.Fatalf("status showed %+v, want %s then %s", got, first.Name, second.Name)
	}
	if got[0].Visible != 1 || got[1].Visible != 2 {
		t.Errorf("visible %d and %d, want 1 and 2", got[0].Visible, got[1].Visible)
	}
}
