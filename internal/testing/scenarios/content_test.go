package scenarios

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// seenRecord is testworker's description of what it was given.
type seenRecord struct {
	Stdin   string            `json:"stdin"`
	File    string            `json:"file"`
	Env     *string           `json:"env"`
	Subject *string           `json:"subject"`
	Attrs   map[string]string `json:"attrs"`
	Names   []string          `json:"names"`
}

func sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// bigQueue are the options of a queue that takes 1 MiB bodies, with a DLQ.
var bigQueue = testenv.QueueOptions{MaxReceiveCount: 3, Attributes: map[string]string{"MaximumMessageSize": "1048576"}}

// checkBigQueue fails the test unless w's queue and DLQ take 1 MiB bodies.
func (w *world) checkBigQueue() {
	w.t.Helper()
	for _, url := range []string{w.q.URL, w.q.DLQURL} {
		info, err := queueattr.Describe(context.Background(), w.direct, url)
		if err != nil {
			w.t.Fatal(err)
		}
		if info.MaximumMessageSize != 1<<20 {
			w.t.Fatalf("queue %s: MaximumMessageSize %d, want 1048576", queueattr.NameFromURL(url), info.MaximumMessageSize)
		}
	}
}

func str(v string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
}

// TestScenario6HostileContent: bodies of 1 MiB, bodies full of shell metacharacters and
// control characters, malformed SNS envelopes and attributes with odd names. Each reaches
// the worker byte for byte (stdin, WATCHBOT_MESSAGE_FILE, $Message up to 64 KiB), nothing
// is interpreted by a shell, malformed envelopes pass through as they are, and every
// message is deleted.
func TestScenario6HostileContent(t *testing.T) {
	for _, seed := range []int64{1, 2} {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, bigQueue, seed, nil)
			w.checkBigQueue()
			shell := "$(touch " + w.dir + "/pwned1); `touch " + w.dir + "/pwned2`; echo x > " + w.dir + "/pwned3 | cat & wait; " +
				"${IFS} * ? [a-z] ~ # ! % ^ \\ \" ' <(true) >(true) -- --help -e %s%n%x"
			// XML-valid control characters: SQS refuses the others (and NUL).
			controls := "\t\n\r \x7f \u0085 \u00a0 \u2028 \u2029 \ufeff \ufffd é 日本"
			arn := "arn:aws:sns:us-east-1:000000000000:topic"
			envelope := func(inner, extra string) string {
				m, _ := json.Marshal(inner)
				return `{"Type":"Notification","MessageId":"sns-1","TopicArn":"` + arn + `","Message":` + string(m) + extra + `}`
			}
			big := strings.Repeat(shell+controls, 1<<20/len(shell+controls)+1)[:1<<20]
			if seed == 2 {
				big = strings.Repeat("x", 1<<20) // the plain form: exactly 1 MiB of ASCII
			}
			type message struct {
				name, body string
				attrs      map[string]types.MessageAttributeValue
				// want is the body the worker must get (the inner Message of a valid envelope).
				want string
				// subject and attrs the worker must see (nil: not checked).
				subject   *string
				wantAttrs map[string]string
			}
			subject := "hi $(touch " + w.dir + "/pwned4)\nsecond line"
			longName := strings.Repeat("x", 256)
			msgs := []message{
				{name: "1 MiB", body: big, want: big},
				{name: "shell", body: shell, want: shell},
				{name: "controls", body: controls + shell, want: controls + shell},
				{name: "whitespace only", body: " \n\t ", want: " \n\t "},
				{name: "truncated envelope", body: envelope("inner", "")[:60], want: envelope("inner", "")[:60]},
				{name: "envelope without TopicArn", body: `{"Type":"Notification","Message":"inner"}`, want: `{"Type":"Notification","Message":"inner"}`},
				{name: "envelope with a numeric Message", body: `{"Type":"Notification","TopicArn":"` + arn + `","Message":42}`, want: `{"Type":"Notification","TopicArn":"` + arn + `","Message":42}`},
				{name: "envelope with a null Message", body: `{"Type":"Notification","TopicArn":"` + arn + `","Message":null}`, want: `{"Type":"Notification","TopicArn":"` + arn + `","Message":null}`},
				{name: "envelope with attributes not an object", body: envelope("inner", `,"MessageAttributes":"nope"`), want: envelope("inner", `,"MessageAttributes":"nope"`)},
				{name: "subscription confirmation", body: `{"Type":"SubscriptionConfirmation","TopicArn":"` + arn + `","Message":"confirm"}`, want: `{"Type":"SubscriptionConfirmation","TopicArn":"` + arn + `","Message":"confirm"}`},
				{name: "deeply nested", body: `{"Type":"Notification","a":` + strings.Repeat("[", 20000), want: `{"Type":"Notification","a":` + strings.Repeat("[", 20000)},
				{name: "valid envelope, odd attributes", body: envelope(shell, `,"Subject":`+quote(subject)+`,"MessageAttributes":{"odd.name-x":{"Type":"String","Value":"v1"},"bin":{"Type":"Binary","Value":"AQID"},"num":{"Type":"Number","Value":"1e3"}}`),
					want: shell, subject: &subject, wantAttrs: map[string]string{"WATCHBOT_ATTR_ODD_NAME_X": "v1", "WATCHBOT_ATTR_NUM": "1e3"}},
				{name: "valid envelope, 900 KiB inside", body: envelope(big[:900<<10], ""), want: big[:900<<10]},
				{name: "odd SQS attribute names", body: "attrs", want: "attrs", attrs: map[string]types.MessageAttributeValue{
					"a.b": str("dot"), "A-B_c.d": str("mixed"), longName: str("long"), "9lives": str("digit"),
					"v-newline": str("line1\nline2 $(touch " + w.dir + "/pwned5)"), "v-eq": str("a=b=c"),
					"num":   {DataType: aws.String("Number"), StringValue: aws.String("-1.5e3")},
					"typed": {DataType: aws.String("String.custom"), StringValue: aws.String("custom")},
					"bin":   {DataType: aws.String("Binary"), BinaryValue: []byte{0, 1, 2}},
				}, wantAttrs: map[string]string{
					"WATCHBOT_ATTR_A_B": "dot", "WATCHBOT_ATTR_A_B_C_D": "mixed", "WATCHBOT_ATTR_" + strings.ToUpper(longName): "long",
					"WATCHBOT_ATTR_9LIVES": "digit", "WATCHBOT_ATTR_V_NEWLINE": "line1\nline2 $(touch " + w.dir + "/pwned5)",
					"WATCHBOT_ATTR_V_EQ": "a=b=c", "WATCHBOT_ATTR_NUM": "-1.5e3", "WATCHBOT_ATTR_TYPED": "custom",
				}},
			}
			// Ten names that all become WATCHBOT_ATTR_T_ID: three copies must see the same one.
			colliding := map[string]types.MessageAttributeValue{}
			for _, n := range []string{"t-id", "t_id", "t.id", "T-id", "T_id", "T.id", "t-ID", "t_ID", "T-ID", "T_ID"} {
				colliding[n] = str(n)
			}
			for i := range 3 {
				msgs = append(msgs, message{name: fmt.Sprintf("colliding names %d", i), body: fmt.Sprintf("collide %d", i), want: fmt.Sprintf("collide %d", i), attrs: colliding})
			}

			ids := map[string]message{}
			for _, m := range msgs {
				out, err := w.direct.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(w.q.URL), MessageBody: aws.String(m.body), MessageAttributes: m.attrs})
				if err != nil {
					t.Fatalf("send %s: %v", m.name, err)
				}
				ids[aws.ToString(out.MessageId)] = m
			}
			// What SQS refuses never reaches watchbot: the producer gets the error.
			for _, bad := range []string{"nul \x00 byte", "bell \x07"} {
				if _, err := w.direct.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(w.q.URL), MessageBody: aws.String(bad)}); err == nil {
					t.Errorf("the emulator accepted a body with %q; SQS refuses it", bad)
				}
			}

			cfg := w.config()
			cfg.Concurrency = 4
			stop := w.start(cfg, seed)
			w.eventually("every message processed", 60*time.Second, func() bool { return w.depth(w.q.URL) == 0 })
			if err := stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}
			var keys []string
			for id := range ids {
				keys = append(keys, id)
			}
			got := w.verify(keys, verifyOpts{})
			if got.Deleted != len(msgs) {
				t.Errorf("%d of %d messages deleted after a successful run, want all: %v", got.Deleted, len(msgs), got)
			}
			td := w.readTrace()
			var collided []string
			for id, m := range ids {
				raw, ok := td.seen[id]
				if !ok {
					t.Errorf("%s: the worker never ran", m.name)
					continue
				}
				var s seenRecord
				if err := json.Unmarshal([]byte(raw), &s); err != nil {
					t.Fatalf("%s: seen record %q: %v", m.name, raw, err)
				}
				want := sha(m.want)
				if s.Stdin != want || s.File != want {
					t.Errorf("%s: stdin %s / file %s, want %s (%d bytes)", m.name, s.Stdin[:8], s.File[:8], want[:8], len(m.want))
				}
				switch {
				case len(m.want) > 64<<10 && s.Env != nil:
					t.Errorf("%s: $Message set for a %d-byte body, want it omitted above 64 KiB", m.name, len(m.want))
				case len(m.want) <= 64<<10 && (s.Env == nil || *s.Env != want):
					t.Errorf("%s: $Message missing or different from the body", m.name)
				}
				if m.subject != nil && (s.Subject == nil || *s.Subject != *m.subject) {
					t.Errorf("%s: $Subject = %v, want %q", m.name, s.Subject, *m.subject)
				}
				if m.wantAttrs != nil {
					for k, v := range m.wantAttrs {
						if s.Attrs[k] != v {
							t.Errorf("%s: %s = %q, want %q", m.name, k, s.Attrs[k], v)
						}
					}
					for k := range s.Attrs {
						if _, ok := m.wantAttrs[k]; !ok {
							t.Errorf("%s: unexpected variable %s=%q", m.name, k, s.Attrs[k])
						}
					}
				}
				if m.attrs != nil && m.attrs["t-id"].StringValue != nil {
					if len(s.Names) != 1 || s.Names[0] != "WATCHBOT_ATTR_T_ID" {
						t.Errorf("%s: variables %v, want WATCHBOT_ATTR_T_ID once", m.name, s.Names)
					}
					collided = append(collided, s.Attrs["WATCHBOT_ATTR_T_ID"])
				}
			}
			for _, v := range collided[1:] {
				if v != collided[0] {
					t.Errorf("ten attribute names that all map to WATCHBOT_ATTR_T_ID gave three copies of one message the values %q: which attribute wins must not be random", collided)
					break
				}
			}
			for i := 1; i <= 5; i++ {
				if _, err := os.Stat(filepath.Join(w.dir, fmt.Sprintf("pwned%d", i))); err == nil {
					t.Errorf("message content was executed by a shell: pwned%d exists", i)
				}
			}
		})
	}
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
