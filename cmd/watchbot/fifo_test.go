package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/internal/testing/fakesqs"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// fifoServer is an SQS endpoint for the FIFO end-to-end tests.
type fifoServer struct {
	name string
	emu  *testenv.Emulator
	fake *fakesqs.Server // nil for fauxqs
}

// fifoServers returns the servers the FIFO rules are checked on: fakesqs over HTTP, which
// delivers FIFO messages as SQS does (as many of one group as it can per receive, in order;
// see its package doc for the AWS pages it follows), and fauxqs, which returns one message
// per group per receive. A passing run on fauxqs alone would prove nothing about order.
func fifoServers(t *testing.T) []fifoServer {
	t.Helper()
	emu, fake := fakeSQS(t)
	return []fifoServer{
		{name: "sqs-delivery", emu: emu, fake: fake},
		{name: "fauxqs", emu: testenv.SQS(t)},
	}
}

// fifoWorker writes a worker that records each run in dir/trace ("start BODY ATTEMPT
// RECEIVE_COUNT", "end BODY") and an OVERLAP line when another message of its group holds
// the group's lock, then exits 1 for the bodies in fail.
func fifoWorker(t *testing.T, dir string, fail ...string) string {
	t.Helper()
	p := filepath.Join(dir, "worker.sh")
	script := `#!/bin/sh
exec 9>"` + dir + `/lock.$WATCHBOT_GROUP_ID"
flock -n 9 || echo "OVERLAP $Message" >> "` + dir + `/trace"
echo "start $Message $WATCHBOT_ATTEMPT $ApproximateReceiveCount" >> "` + dir + `/trace"
sleep 0.2
echo "end $Message" >> "` + dir + `/trace"
case " ` + strings.Join(fail, " ") + ` " in *" $Message "*) exit 1 ;; esac
exit 0
`
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func sendFIFO(t *testing.T, c *sqs.Client, url string, bodies ...string) {
	t.Helper()
	for _, b := range bodies {
		if _, err := c.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(b),
			MessageGroupId: aws.String(b[:1])}); err != nil {
			t.Fatalf("send %s: %v", b, err)
		}
	}
}

// traceOf reads a trace: the runs' starts per group ("a1/2/1": body, attempt, receive count),
// overlaps, and the most runs under way at once.
func traceOf(t *testing.T, dir string) (starts map[string][]string, overlaps []string, most int) {
	t.Helper()
	data, _ := os.ReadFile(filepath.Join(dir, "trace"))
	starts = map[string][]string{}
	busy := 0
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 4 && f[0] == "start":
			starts[f[1][:1]] = append(starts[f[1][:1]], f[1]+"/"+f[2]+"/"+f[3])
			busy++
			most = max(most, busy)
		case len(f) == 2 && f[0] == "end":
			busy--
		case len(f) == 2 && f[0] == "OVERLAP":
			overlaps = append(overlaps, f[1])
		}
	}
	return starts, overlaps, most
}

func TestListenFIFOEndToEnd(t *testing.T) {
	t.Parallel()
	for _, srv := range fifoServers(t) {
		t.Run(srv.name, func(t *testing.T) {
			t.Parallel()
			c := srv.emu.Client()
			q := srv.emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3, FIFO: true})
			dir := t.TempDir()
			worker := fifoWorker(t, dir, "a1")
			sendFIFO(t, c, q.URL, "a1", "a2", "a3", "a4", "a5", "b1", "b2", "b3", "b4", "c1", "c2", "c3")
			p, logs := listenBinary(t, srv.emu, "--queue-url", q.URL, "--concurrency", "4", "--backoff-base", "300ms",
				"--visibility-timeout", "30s", "--", worker)
			testenv.Eventually(t, "the queue to drain", 60*time.Second, func() bool {
				return testenv.Depth(t, c, q.URL).Total() == 0 && testenv.Depth(t, c, q.DLQURL).Total() > 0
			}, logs.String)
			_ = p.Cmd.Process.Signal(syscall.SIGTERM)
			if code := p.Wait(t, 30*time.Second); code != 0 {
				t.Fatalf("exit %d after SIGTERM; logs:\n%s", code, logs)
			}
			if !strings.Contains(logs.String(), `"fifo":true`) {
				t.Error("watchbot did not log that the queue is FIFO")
			}
			starts, overlaps, most := traceOf(t, dir)
			if len(overlaps) > 0 {
				t.Errorf("messages ran while another of their group ran: %v", overlaps)
			}
			// The poison head ran 3 times in place (receive count 1 each time, attempts 1..3),
			// then went to the DLQ; its successors then ran in order, each once.
			want := map[string][]string{
				"a": {"a1/1/1", "a1/2/1", "a1/3/1", "a2/1/1", "a3/1/1", "a4/1/1", "a5/1/1"},
				"b": {"b1/1/1", "b2/1/1", "b3/1/1", "b4/1/1"},
				"c": {"c1/1/1", "c2/1/1", "c3/1/1"},
			}
			for g, w := range want {
				if !slices.Equal(starts[g], w) {
					t.Errorf("group %s ran %v, want %v", g, starts[g], w)
				}
			}
			if most < 2 {
				t.Errorf("at most %d runs at once: groups did not run side by side", most)
			}
			out, err := c.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.DLQURL), MaxNumberOfMessages: 10,
				MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll}, MessageAttributeNames: []string{"All"}})
			if err != nil {
				t.Fatal(err)
			}
			if len(out.Messages) != 1 || aws.ToString(out.Messages[0].Body) != "a1" || out.Messages[0].Attributes["MessageGroupId"] != "a" ||
				out.Messages[0].Attributes["MessageDeduplicationId"] == "" {
				t.Fatalf("DLQ holds %d messages (%v), want a1 alone with its group id and a deduplication id", len(out.Messages), out.Messages)
			}
			if got := aws.ToString(out.Messages[0].MessageAttributes["watchbot-reason"].StringValue); got != "worker exited 1 on the last attempt (3 of 3)" {
				t.Errorf("dead-letter reason %q", got)
			}
		})
	}
}

// TestListenFIFOLostReceiveAnswer: the first receive takes the messages and its answer is
// lost (a 500). The SDK retries with the same ReceiveRequestAttemptId and gets them back, so
// they run at once instead of after the 5-minute visibility timeout, each received once.
func TestListenFIFOLostReceiveAnswer(t *testing.T) {
	t.Parallel()
	srv := fifoServers(t)[0]
	c := srv.emu.Client()
	q := srv.emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3, FIFO: true})
	dir := t.TempDir()
	sendFIFO(t, c, q.URL, "a1", "a2", "b1")
	srv.fake.Fail("ReceiveMessage", 1, fakesqs.After)
	p, logs := listenBinary(t, srv.emu, "--queue-url", q.URL, "--concurrency", "2", "--visibility-timeout", "5m", "--", fifoWorker(t, dir))
	testenv.Eventually(t, "the messages taken by a receive whose answer was lost to be processed", 30*time.Second, func() bool {
		return testenv.Depth(t, c, q.URL).Total() == 0
	}, logs.String)
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	p.Wait(t, 30*time.Second)
	starts, _, _ := traceOf(t, dir)
	got := fmt.Sprint(starts["a"], starts["b"])
	if got != "[a1/1/1 a2/1/1] [b1/1/1]" {
		t.Errorf("runs %s, want each message once at receive count 1", got)
	}
	if n := srv.fake.Calls("ReceiveMessage"); n < 2 {
		t.Errorf("%d receives: the lost answer was not retried", n)
	}
}
