package producer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/watchbot/watchbot/internal/setting"
	"github.com/watchbot/watchbot/internal/sqsspec"
	"github.com/watchbot/watchbot/payload"
)

// ObjectAPI is the part of the S3 client an Offload calls: it writes a body, and deletes it
// again when the message pointing at it was refused.
type ObjectAPI interface {
	payload.Putter
	payload.Deleter
}

var _ ObjectAPI = (*s3.Client)(nil)

// Offload sends bodies too large for SQS through S3, as AWS's SQS Extended Client libraries do
// (docs/payloads.md): the body becomes an object under a random UUID key, and the message
// carries the pointer to it (payload.Pointer.Encode) and the ExtendedPayloadSize attribute,
// the body's size in bytes. A receiver that speaks the format (listen, the Java and Python
// libraries) reads the body from S3.
type Offload struct {
	// Bucket is the S3 bucket the bodies are written to.
	Bucket string
	// Threshold is the size above which a body goes to S3: the body plus its message
	// attributes, counted as SQS counts them (Size), as the libraries count them. 0 means the
	// most the queue accepts: its MaximumMessageSize, itself at most 1 MiB.
	Threshold int
	// Always sends every body through S3, whatever its size.
	Always bool
	// API writes and deletes the objects.
	API ObjectAPI
}

// validate checks the offload settings without any I/O.
func (o *Offload) validate(attrs map[string]types.MessageAttributeValue) error {
	if o.Bucket == "" {
		return setting.Refuse(setting.PayloadBucket, nil, "must name the S3 bucket the large bodies are written to")
	}
	if o.Threshold < 0 || o.Threshold > sqsspec.MaxMessageSize {
		return setting.Refuse(setting.PayloadThreshold, o.Threshold, fmt.Sprintf("must be between 1 and %d bytes, the most SQS takes (without it, the queue's MaximumMessageSize)", sqsspec.MaxMessageSize))
	}
	for _, name := range []string{payload.SizeAttribute, payload.LegacySizeAttribute} {
		if _, ok := attrs[name]; ok {
			return setting.Refuse(setting.Attrs, name, "is reserved with "+setting.Ref(setting.PayloadBucket)+": it marks a message whose body is in S3")
		}
	}
	if len(attrs) >= sqsspec.MaxMessageAttributes {
		return setting.Refuse(setting.Attrs, nil, fmt.Sprintf("%d message attributes leave no room for %s, which a body sent through S3 needs (SQS allows %d)",
			len(attrs), payload.SizeAttribute, sqsspec.MaxMessageAttributes))
	}
	return nil
}

// threshold is the size above which a body is offloaded on a queue with limits l.
func (o *Offload) threshold(l Limits) int {
	if o.Threshold > 0 {
		return o.Threshold
	}
	if l.MaxSize > 0 && l.MaxSize < sqsspec.MaxMessageSize {
		return l.MaxSize
	}
	return sqsspec.MaxMessageSize
}

// checkQueue refuses a threshold above what the queue accepts: a body between the two would
// stay in the message and be refused by SQS.
func (o *Offload) checkQueue(l Limits) error {
	if o.Threshold > 0 && l.MaxSize > 0 && o.Threshold > l.MaxSize {
		return setting.Refuse(setting.PayloadThreshold, o.Threshold, fmt.Sprintf("is above the queue's MaximumMessageSize of %d bytes: a message between the two would be refused", l.MaxSize))
	}
	return nil
}

// offloads says whether the message m, whose body is b, goes through S3.
func (o *Offload) offloads(m Message, b Body, l Limits) bool {
	if o.Always {
		return true
	}
	size := int64(Size(m)) - int64(len(m.Body)) + b.Size()
	return size > int64(o.threshold(l))
}

// pointerMessage returns m carrying a pointer to a new object for b instead of b, and the
// object to write before m is sent.
func (o *Offload) pointerMessage(m Message, b Body) (Message, *object) {
	obj := &object{pointer: payload.Pointer{Bucket: o.Bucket, Key: payload.NewKey()}, size: b.Size(), body: b.reader()}
	out := m
	out.Body = obj.pointer.Encode()
	out.Attributes = make(map[string]types.MessageAttributeValue, len(m.Attributes)+1)
	maps.Copy(out.Attributes, m.Attributes)
	out.Attributes[payload.SizeAttribute] = types.MessageAttributeValue{
		DataType:    aws.String(payload.SizeAttributeType),
		StringValue: aws.String(payload.SizeValue(obj.size)),
	}
	return out, obj
}

// MaxObjectSize is the largest body an Offload sends: S3 takes at most 5 GiB in one PutObject
// ("Uploading objects", Amazon S3 User Guide), and the libraries write with one PutObject too.
const MaxObjectSize = 5 << 30

// object is a body to be written to S3 before the message pointing at it is sent.
type object struct {
	pointer payload.Pointer
	size    int64
	body    io.ReadSeeker
}

// cleanupTimeout bounds the delete of an object whose message was refused; it runs even after
// the command was interrupted, so that nothing is left behind.
const cleanupTimeout = 30 * time.Second

// put writes the object. On a failure S3 did not answer (the connection broke), the object
// may exist all the same: it is deleted, and the error says so if that fails too.
func (o *object) put(ctx context.Context, api ObjectAPI) error {
	if _, err := o.body.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("read the body: %w", err)
	}
	_, err := api.PutObject(ctx, &s3.PutObjectInput{
		Bucket:        aws.String(o.pointer.Bucket),
		Key:           aws.String(o.pointer.Key),
		Body:          o.body,
		ContentLength: aws.Int64(o.size),
	})
	if err == nil {
		return nil
	}
	err = fmt.Errorf("store the body in %s: %w", o.pointer, err)
	var answered smithy.APIError
	if errors.As(err, &answered) {
		return err
	}
	if derr := o.remove(ctx, api); derr != nil {
		return fmt.Errorf("%w; the object may exist all the same and could not be deleted: %v", err, derr)
	}
	return err
}

// remove deletes the object, with a context that outlives an interruption.
func (o *object) remove(ctx context.Context, api ObjectAPI) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	return payload.Delete(ctx, api, o.pointer)
}

// undo handles a message that was not sent after its object was written. When SQS refused it
// (an entry in the batch's Failed list, or an error answer to the call), the object is
// deleted: nothing points at it. When the fate of the call is unknown (the connection broke,
// SQS returned no result for the entry), the message may have been sent, and deleting its
// body would break it: the object is kept, and the error says where it is.
func (o *object) undo(ctx context.Context, api ObjectAPI, sendErr error) error {
	var entry *sqsspec.EntryError
	var answered smithy.APIError
	if !errors.As(sendErr, &entry) && !errors.As(sendErr, &answered) {
		return fmt.Errorf("%w; the message may have been sent all the same, so its body is kept in %s (delete it if the message did not arrive)", sendErr, o.pointer)
	}
	if err := o.remove(ctx, api); err != nil {
		return fmt.Errorf("%w; its body is left in %s, which could not be deleted: %v", sendErr, o.pointer, err)
	}
	return sendErr
}

// sendOffloaded sends msgs as Send does, writing each one's object (objects[i], nil for an
// inline body) right before the batch that carries its message, and undoing the object of
// each message not sent. A message whose object could not be written is not sent. report is
// called once per message, not necessarily in order.
func sendOffloaded(ctx context.Context, api API, s3api ObjectAPI, queueURL string, msgs []Message, objects []*object, report func(i int, r Result)) {
	for _, b := range Batches(msgs) {
		if err := ctx.Err(); err != nil {
			for i := b[0]; i < len(msgs); i++ {
				report(i, Result{Err: err})
			}
			return
		}
		var send []int
		for i := b[0]; i < b[1]; i++ {
			if objects[i] != nil {
				if err := objects[i].put(ctx, s3api); err != nil {
					report(i, Result{Err: err})
					continue
				}
			}
			send = append(send, i)
		}
		batch := make([]Message, len(send))
		for j, i := range send {
			batch[j] = msgs[i]
		}
		for j, r := range SendBatch(ctx, api, queueURL, batch) {
			i := send[j]
			if r.Err != nil && objects[i] != nil {
				r.Err = objects[i].undo(ctx, s3api, r.Err)
			}
			report(i, r)
		}
	}
}
