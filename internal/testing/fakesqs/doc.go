// Package fakesqs is an Amazon SQS stand-in for tests that behaves as the AWS documentation
// says SQS behaves, where the project's emulator (fauxqs) does not. It exists for FIFO
// delivery above all: SQS returns several messages of one message group in one receive, in
// order, and fauxqs at most one, so a supervisor that runs a receive's messages side by side
// looks correct on fauxqs and breaks group order on SQS.
//
// A *Server is used two ways. In memory, its methods have the signatures of *sqs.Client's,
// so it is the SQS client of unit tests, including under testing/synctest: it starts no
// goroutines, reads time from time.Now and waits only on channels and timers, so a
// goroutine in a long poll is durably blocked. Over HTTP (ServeHTTP, Listen), it speaks the
// AWS JSON 1.0 protocol, so the watchbot binary and the AWS SDK for Go v2 can use it through
// an endpoint URL. Both faces return the same errors: the value the SDK returns for the same
// answer from SQS (its modelled error type, or *smithy.GenericAPIError), with the same
// ErrorCode().
//
// Queue URLs are http://sqs.us-east-1.localhost/000000000000/NAME in memory and
// http://sqs.us-east-1.localhost:PORT/000000000000/NAME over HTTP; queues are found by the
// URL's last path segment, so either form works. ARNs are arn:aws:sqs:us-east-1:000000000000:NAME.
//
// # What it reproduces, and where the AWS documentation says so
//
// SQS Developer Guide (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/):
//
//   - "FIFO queue delivery logic in Amazon SQS": messages of a group are delivered in send
//     order; a group with any message in flight gives nothing more; a receive takes as many
//     of the first available group's messages as it can, in order, then continues with the
//     next groups (ordered by their oldest message) while it has room; a message whose
//     visibility ends, or is set to 0, comes back before its successors.
//   - "Amazon SQS visibility timeout": a received message is hidden for the call's
//     VisibilityTimeout or the queue's; every receive raises ApproximateReceiveCount and the
//     first sets ApproximateFirstReceiveTimestamp.
//   - "Amazon SQS short and long polling": with WaitTimeSeconds (or the queue's
//     ReceiveMessageWaitTimeSeconds) a receive returns as soon as a message is available,
//     or empty when the wait ends; in memory it returns ctx's error if ctx ends first, and
//     over HTTP it stops waiting when the request's context ends.
//   - "Using the Amazon SQS receive request attempt ID" (and ReceiveMessage's
//     ReceiveRequestAttemptId): on a FIFO queue, a retry with the same id within 5 minutes
//     returns the same messages with the same receipt handles and restarts their visibility
//     timeout, as long as none was deleted, had its visibility changed or was received
//     again; so a receive whose answer was lost can be retried at once. Standard queues
//     ignore the id.
//   - "Exactly-once processing in Amazon SQS" and "Amazon SQS FIFO queue key terms": a send
//     whose deduplication id (given, or the SHA-256 of the body with
//     ContentBasedDeduplication) was seen in the last 5 minutes is accepted, answered with
//     the first message's id and sequence number, and not enqueued, even if that message was
//     deleted since; DeduplicationScope=messageGroup scopes ids to a group.
//   - "Using dead-letter queues in Amazon SQS": a message whose receive count has reached
//     maxReceiveCount moves to the dead-letter queue on the next receive that would return
//     it, keeping its MessageId, body, message attributes, SentTimestamp and, on FIFO queues,
//     group and deduplication ids. "Setting-up dead-letter queue retention in Amazon SQS":
//     its retention runs from the original enqueue on a standard queue and restarts on a
//     FIFO one.
//   - "Message metadata for Amazon SQS": at most 10 message attributes, their naming and
//     type rules, their size counted toward MaximumMessageSize, and MD5OfMessageAttributes
//     as "Calculating the MD5 message digest for message attributes" specifies.
//   - "Interpreting Amazon SQS JSON API responses": errors carry "__type", the
//     x-amzn-query-error header the SDK reads its ErrorCode() from, and status 400 or 500.
//
// Amazon SQS API Reference (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/):
//
//   - CreateQueue: attribute ranges, defaults and names; FIFO names end in ".fifo"; a FIFO
//     queue's dead-letter queue is FIFO and a standard queue's standard; the same name with
//     the same attributes returns the existing queue, with others QueueNameExists.
//   - GetQueueUrl, GetQueueAttributes ("All" or names; the approximate counts of visible,
//     in-flight and delayed messages; QueueArn, RedrivePolicy, FifoQueue...),
//     SetQueueAttributes (FifoQueue only at creation).
//   - SendMessage, SendMessageBatch: a body of 1 byte to MaximumMessageSize of the
//     characters #x9 #xA #xD #x20-#xD7FF #xE000-#xFFFD #x10000-#x10FFFF (InvalidMessageContents
//     otherwise); MD5OfMessageBody; DelaySeconds 0 to 900 per message on standard queues
//     only; MessageGroupId required on FIFO queues; sequence numbers.
//   - ReceiveMessage: MaxNumberOfMessages 1 to 10, WaitTimeSeconds 0 to 20, VisibilityTimeout
//     0 to 43200; system attributes by MessageSystemAttributeNames or the deprecated
//     AttributeNames; MessageAttributeNames "All", ".*", "prefix.*" and names.
//   - DeleteMessage: a handle from an earlier receive of a message received again succeeds
//     without deleting it ("the request will succeed, but the message might not be deleted");
//     a handle this queue never issued is ReceiptHandleIsInvalid.
//   - ChangeMessageVisibility: 0 to 43200 seconds from now, within 12 hours of the receive;
//     MessageNotInflight for a message no longer in flight. InFlightLimit scales the 12
//     hours down for tests of what happens at the limit.
//   - The batch calls: 1 to 10 entries with distinct ids of alphanumerics, '-' and '_' (at
//     most 80), SendMessageBatch at most 1 MiB in all; each entry fails on its own in Failed.
//   - PurgeQueue (one per 60 seconds), ListDeadLetterSourceQueues (with MaxResults and
//     NextToken); "Common Errors" (InvalidParameterValue, MissingParameter, InternalFailure).
//
// # Choices where the documentation leaves room
//
// Each is a behaviour SQS may show:
//
//   - A short poll returns every available message up to MaxNumberOfMessages (SQS samples
//     servers and may return fewer), and a standard queue delivers oldest first.
//   - DeleteMessage with the latest receipt handle after its visibility timeout deletes the
//     message on a standard queue and, on a FIFO queue, fails with InvalidParameterValue
//     "The receipt handle has expired" (the ChangeMessageVisibility reference: such a call
//     "might result in an error").
//   - ChangeMessageVisibility with a handle from an earlier receive, or of a deleted
//     message, fails with InvalidParameterValue ("Message does not exist or is not available
//     for visibility timeout change"), as SQS answers; with the latest handle of a message no
//     longer in flight, MessageNotInflight.
//   - A ReceiveRequestAttemptId whose messages were modified since is forgotten and the call
//     is a new receive; a receive that returned nothing is not remembered; a replay does not
//     raise receive counts (it is the same receive).
//   - A redriven message keeps its SequenceNumber and gains the DeadLetterQueueSourceArn
//     system attribute; its receive count carries over ("across all queues").
//   - MD5OfMessageAttributes of a received message covers the attributes returned.
//   - The Code of a failed batch entry is the ErrorCode() the single call would return.
//   - PurgeQueue deletes at once; a redrive policy must name an existing queue; SenderId is
//     the account id 000000000000; MaximumMessageSize defaults to 1 MiB, as the CreateQueue
//     reference now gives.
//   - The SDK's input types cannot carry an explicit 0 in MaxNumberOfMessages,
//     VisibilityTimeout, WaitTimeSeconds or DelaySeconds, so 0 means "not given" (1 message,
//     the queue's setting). A required member left nil in memory, which the SDK would refuse
//     before sending, is MissingParameter.
//   - Faults injected with Fail are InternalFailure, the 500 of "Common Errors". Message ids
//     and receipt handles are opaque but deterministic.
package fakesqs
