package fakesqs

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/google/go-cmp/cmp"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// TestConformance runs one script of the behaviours that fauxqs 1.9.2 (the project's
// emulator) and the Server share against both, over HTTP through the real SDK, and expects
// the same transcript from each. Message ids are mapped to ordinals; receipt handles,
// timestamps and sequence numbers are left out.
//
// Left out of the script, where fauxqs departs from the AWS documentation (the Server does
// what the documentation says):
//   - FIFO delivery ("FIFO queue delivery logic"): SQS returns as many messages of one group
//     as it can in one receive; fauxqs returns at most one per group per receive. The script
//     only ever has one message per group available.
//   - Error codes. For errors whose code has no "AWS.SimpleQueueService." prefix in the SQS
//     model, fauxqs still adds it: the SDK reports "AWS.SimpleQueueService.InvalidParameterValue",
//     "...MissingParameter", "...InvalidMessageContents", "...InvalidAttributeValue" where SQS
//     gives "InvalidParameterValue", "MissingParameter", "InvalidMessageContents",
//     "InvalidAttributeValue"; and "AWS.SimpleQueueService.QueueNameExists" where SQS gives
//     "QueueAlreadyExists".
//   - A malformed receipt handle: DeleteMessage succeeds and ChangeMessageVisibility gives
//     MessageNotInflight on fauxqs; SQS gives ReceiptHandleIsInvalid to both.
//   - A handle from an earlier receive: ChangeMessageVisibility gives MessageNotInflight on
//     fauxqs; the Server gives InvalidParameterValue, as SQS answers for a handle that no
//     longer names an available message.
//   - The latest handle after the visibility timeout (or a release to 0): DeleteMessage is a
//     no-op on fauxqs; SQS deletes the message on a standard queue and refuses the expired
//     handle with InvalidParameterValue on a FIFO queue.
//   - ApproximateReceiveCount of a dead-lettered message: fauxqs counts the receive that
//     moved it, so the first receive from the DLQ reports maxReceiveCount+2; SQS counts
//     receives "across all queues", which gives maxReceiveCount+1.
//   - A receive without MessageAttributeNames: fauxqs returns every message attribute; SQS
//     returns none. With a prefix or a name list fauxqs returns the MD5 of all the message's
//     attributes, not of those returned (which the SDK for Java would reject).
//   - Characters above U+FFFF: SQS accepts them in a body ("SendMessage" API reference);
//     fauxqs refuses them with InvalidMessageContents.
//   - CreateQueue with an unknown attribute name succeeds on fauxqs (SQS: InvalidAttributeName);
//     a ".fifo" name without FifoQueue=true makes a FIFO queue on fauxqs (SQS refuses the name).
//   - PurgeQueue twice within 60 seconds succeeds on fauxqs (SQS: PurgeQueueInProgress).
//   - ListDeadLetterSourceQueues is not served by fauxqs (InvalidAction).
//   - ApproximateNumberOfMessagesNotVisible on fauxqs counts messages whose visibility timeout
//     has ended until the next receive.
func TestConformance(t *testing.T) {
	emu := testenv.SQS(t)
	fauxqs := client(emu.Endpoint, false)
	prefix := "conf" + strconv.FormatInt(time.Now().UnixNano()%1e9, 10) + "-"
	want := conformanceScript(t, fauxqs, prefix)
	got := conformanceScript(t, client(listen(t, New()), false), prefix)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("transcripts differ (-fauxqs +fakesqs):\n%s", diff)
	}
	t.Logf("transcript:\n%s", strings.Join(got, "\n"))
}

// transcript records what a script saw, normalised so two servers can be compared.
type transcript struct {
	lines []string
	ids   map[string]string // message id -> "msgN"
}

func (tr *transcript) logf(format string, args ...any) {
	tr.lines = append(tr.lines, fmt.Sprintf(format, args...))
}

func (tr *transcript) id(id *string) string {
	if id == nil {
		return "<none>"
	}
	if n, ok := tr.ids[*id]; ok {
		return n
	}
	n := "msg" + strconv.Itoa(len(tr.ids)+1)
	tr.ids[*id] = n
	return n
}

func (tr *transcript) result(what string, err error) {
	if err != nil {
		tr.logf("%s: error %s", what, errorCode(err))
		return
	}
	tr.logf("%s: ok", what)
}

// messages logs what a receive returned, in body order; counts adds ApproximateReceiveCount.
func (tr *transcript) messages(what string, msgs []types.Message, counts bool) {
	msgs = slices.Clone(msgs)
	slices.SortFunc(msgs, func(a, b types.Message) int { return strings.Compare(aws.ToString(a.Body), aws.ToString(b.Body)) })
	tr.logf("%s: %d messages", what, len(msgs))
	for _, m := range msgs {
		var attrs []string
		for name, v := range m.MessageAttributes {
			value := aws.ToString(v.StringValue)
			if v.BinaryValue != nil {
				value = base64.StdEncoding.EncodeToString(v.BinaryValue)
			}
			attrs = append(attrs, name+"="+aws.ToString(v.DataType)+":"+value)
		}
		slices.Sort(attrs)
		line := fmt.Sprintf("  %q %s md5=%s attrs=[%s] md5attrs=%s", aws.ToString(m.Body), tr.id(m.MessageId),
			aws.ToString(m.MD5OfBody), strings.Join(attrs, " "), aws.ToString(m.MD5OfMessageAttributes))
		if counts {
			line += " count=" + m.Attributes["ApproximateReceiveCount"]
		}
		if g, ok := m.Attributes["MessageGroupId"]; ok {
			line += " group=" + g + " dedup=" + m.Attributes["MessageDeduplicationId"]
		}
		tr.logf("%s", line)
	}
}

func conformanceScript(t *testing.T, c *sqs.Client, prefix string) []string {
	ctx := context.Background()
	tr := &transcript{ids: map[string]string{}}
	receiveAll := func(url string, max, wait int32) []types.Message {
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: max, WaitTimeSeconds: wait,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{"All"}, MessageAttributeNames: []string{"All"},
		})
		if err != nil {
			tr.logf("receive: error %s", errorCode(err))
			return nil
		}
		return out.Messages
	}
	handleOf := func(msgs []types.Message, body string) *string {
		for _, m := range msgs {
			if aws.ToString(m.Body) == body {
				return m.ReceiptHandle
			}
		}
		return aws.String("missing")
	}
	changeVisibility := func(url string, handle *string, seconds int32) error {
		_, err := c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: handle, VisibilityTimeout: seconds})
		return err
	}
	deleteMessage := func(url string, handle *string) error {
		_, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: handle})
		return err
	}

	// A standard queue whose messages go to a dead-letter queue after 2 receives.
	dlq := createQueue(t, c, prefix+"dlq", map[string]string{"MessageRetentionPeriod": "1209600"})
	std := createQueue(t, c, prefix+"std", map[string]string{
		"VisibilityTimeout": "30",
		"RedrivePolicy":     `{"deadLetterTargetArn":"` + queueARN(t, c, dlq) + `","maxReceiveCount":"2"}`,
	})
	attrs := map[string]types.MessageAttributeValue{
		"s": {DataType: aws.String("String"), StringValue: aws.String("text")},
		"n": {DataType: aws.String("Number"), StringValue: aws.String("42")},
		"b": {DataType: aws.String("Binary"), BinaryValue: []byte{1, 2, 3}},
	}
	for _, body := range []string{"a", "b"} {
		out, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(std), MessageBody: aws.String(body), MessageAttributes: attrs})
		if err != nil {
			tr.result("send "+body, err)
			continue
		}
		tr.logf("send %s: %s md5=%s md5attrs=%s", body, tr.id(out.MessageId), aws.ToString(out.MD5OfMessageBody), aws.ToString(out.MD5OfMessageAttributes))
	}
	first := receiveAll(std, 10, 0)
	tr.messages("receive", first, true)
	tr.messages("receive while in flight", receiveAll(std, 10, 0), true)
	tr.result("release a", changeVisibility(std, handleOf(first, "a"), 0))
	second := receiveAll(std, 10, 0)
	tr.messages("receive after the release", second, true)
	tr.result("delete a with the handle of its first receive", deleteMessage(std, handleOf(first, "a")))
	tr.messages("receive while a is in flight", receiveAll(std, 10, 0), true)
	tr.result("release a again", changeVisibility(std, handleOf(second, "a"), 0))
	tr.result("change the visibility of a released message", changeVisibility(std, handleOf(second, "a"), 10))
	tr.messages("receive after 2 receives of a (redrive)", receiveAll(std, 10, 0), true)
	moved := receiveAll(dlq, 10, 0)
	tr.messages("receive from the dead-letter queue", moved, false)
	tr.result("delete b", deleteMessage(std, handleOf(first, "b")))
	tr.result("delete a from the dead-letter queue", deleteMessage(dlq, handleOf(moved, "a")))

	// Batches with a bad entry.
	sent, err := c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(std), Entries: []types.SendMessageBatchRequestEntry{
		{Id: aws.String("one"), MessageBody: aws.String("one")},
		{Id: aws.String("bad"), MessageBody: aws.String("nul \x00")},
		{Id: aws.String("two"), MessageBody: aws.String("two")},
	}})
	tr.result("send batch", err)
	if err == nil {
		tr.batch("send batch", len(sent.Successful), sent.Failed)
		for _, e := range sent.Successful {
			tr.logf("  sent %s: %s md5=%s", aws.ToString(e.Id), tr.id(e.MessageId), aws.ToString(e.MD5OfMessageBody))
		}
	}
	batchMsgs := receiveAll(std, 10, 0)
	tr.messages("receive the batch", batchMsgs, true)
	changed, err := c.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(std), Entries: []types.ChangeMessageVisibilityBatchRequestEntry{
		{Id: aws.String("ok"), ReceiptHandle: handleOf(batchMsgs, "one"), VisibilityTimeout: 60},
		{Id: aws.String("range"), ReceiptHandle: handleOf(batchMsgs, "two"), VisibilityTimeout: 43201},
	}})
	tr.result("change visibility batch", err)
	if err == nil {
		tr.batch("change visibility batch", len(changed.Successful), changed.Failed)
	}
	deleted, err := c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(std), Entries: []types.DeleteMessageBatchRequestEntry{
		{Id: aws.String("one"), ReceiptHandle: handleOf(batchMsgs, "one")},
		{Id: aws.String("two"), ReceiptHandle: handleOf(batchMsgs, "two")},
	}})
	tr.result("delete batch", err)
	if err == nil {
		tr.batch("delete batch", len(deleted.Successful), deleted.Failed)
	}
	counts, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(std), AttributeNames: []types.QueueAttributeName{
		"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed", "VisibilityTimeout", "RedrivePolicy",
	}})
	tr.result("queue attributes", err)
	if err == nil {
		for _, k := range []string{"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed", "VisibilityTimeout"} {
			tr.logf("  %s=%s", k, counts.Attributes[k])
		}
		p, err := parseRedrivePolicy(counts.Attributes["RedrivePolicy"])
		tr.logf("  RedrivePolicy maxReceiveCount=%d (%v)", p.maxReceiveCount, err)
	}

	// FIFO: deduplication, and group locking with one message per group available.
	fifo := createQueue(t, c, prefix+"f.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})
	sendFIFO := func(group, body string, dedupID *string) {
		out, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(fifo), MessageBody: aws.String(body), MessageGroupId: aws.String(group), MessageDeduplicationId: dedupID})
		if err != nil {
			tr.result("send "+body, err)
			return
		}
		tr.logf("send %s to %s: %s", body, group, tr.id(out.MessageId))
	}
	sendFIFO("g1", "x", nil)
	sendFIFO("g1", "x", nil) // a duplicate by content
	sendFIFO("g2", "y", aws.String("dedup-y"))
	sendFIFO("g2", "not y", aws.String("dedup-y")) // a duplicate by id
	fx := receiveAll(fifo, 1, 0)
	tr.messages("receive 1", fx, true)
	fy := receiveAll(fifo, 1, 0)
	tr.messages("receive 1 more", fy, true)
	tr.messages("receive with both groups in flight", receiveAll(fifo, 10, 0), true)
	sendFIFO("g1", "z", nil)
	tr.messages("receive with g1 in flight", receiveAll(fifo, 10, 0), true)
	tr.result("delete x", deleteMessage(fifo, handleOf(fx, "x")))
	fz := receiveAll(fifo, 10, 0)
	tr.messages("receive after deleting x", fz, true)
	tr.result("delete y", deleteMessage(fifo, handleOf(fy, "y")))
	tr.result("delete z", deleteMessage(fifo, handleOf(fz, "z")))

	// Long polling returns when a message arrives.
	go func() {
		time.Sleep(300 * time.Millisecond)
		_, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(std), MessageBody: aws.String("late")})
		if err != nil {
			t.Errorf("send late: %v", err)
		}
	}()
	start := time.Now()
	late := receiveAll(std, 10, 5)
	tr.messages("long poll", late, true)
	tr.logf("long poll returned before its wait ended: %v", time.Since(start) < 4*time.Second)
	tr.result("delete late", deleteMessage(std, handleOf(late, "late")))

	// Errors both give as SQS does.
	_, err = c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(prefix + "missing")})
	tr.result("unknown queue", err)
	var eleven []types.SendMessageBatchRequestEntry
	for i := range 11 {
		eleven = append(eleven, types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String("x")})
	}
	_, err = c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(std), Entries: eleven})
	tr.result("eleven entries", err)
	_, err = c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(std), Entries: []types.SendMessageBatchRequestEntry{}})
	tr.result("no entries", err)
	_, err = c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(std), Entries: eleven[:1:1]})
	tr.result("one entry", err)
	_, err = c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(std), Entries: []types.DeleteMessageBatchRequestEntry{
		{Id: aws.String("same"), ReceiptHandle: aws.String("h")}, {Id: aws.String("same"), ReceiptHandle: aws.String("h")},
	}})
	tr.result("ids not distinct", err)
	_, err = c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(std), Entries: []types.SendMessageBatchRequestEntry{
		{Id: aws.String("a:b"), MessageBody: aws.String("x")},
	}})
	tr.result("bad entry id", err)
	return tr.lines
}

// batch logs a batch answer's failures by entry id.
func (tr *transcript) batch(what string, successes int, failed []types.BatchResultErrorEntry) {
	failed = slices.Clone(failed)
	slices.SortFunc(failed, func(a, b types.BatchResultErrorEntry) int {
		return strings.Compare(aws.ToString(a.Id), aws.ToString(b.Id))
	})
	tr.logf("%s: %d succeeded, failed %v", what, successes, failures(failed))
}
