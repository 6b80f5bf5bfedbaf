package producer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/internal/setting"
	"github.com/watchbot/watchbot/internal/sqsspec"
)

// QueueAPI is the part of the SQS client Deliver calls.
type QueueAPI interface {
	API
	queueattr.API
}

var _ QueueAPI = (*sqs.Client)(nil)

// Body is one message body and where it came from, for error messages ("stdin line 3").
type Body struct {
	Text   string
	Source string
	// Large, when set, holds a body kept out of memory (a file, a spooled line) instead of
	// Text. Only an Offload sends it: the message carries a pointer to it.
	Large *io.SectionReader
}

// Size is the body's length in bytes.
func (b Body) Size() int64 {
	if b.Large != nil {
		return b.Large.Size()
	}
	return int64(len(b.Text))
}

// reader returns the body to write to S3.
func (b Body) reader() io.ReadSeeker {
	if b.Large != nil {
		return b.Large
	}
	return strings.NewReader(b.Text)
}

// Request is what `watchbot send` asks for: bodies that share attributes, delay and group.
type Request struct {
	QueueURL   string
	Bodies     []Body
	Attributes map[string]types.MessageAttributeValue
	// Delay postpones delivery; standard queues only, at most sqsspec.MaxDelay.
	Delay time.Duration
	// GroupID is the MessageGroupId: required on FIFO queues; on a standard queue it names the
	// message's tenant for SQS fair queues ("Amazon SQS fair queues", SQS Developer Guide).
	GroupID string
	// TraceContext is added to every message's attributes where SQS's limits leave room;
	// where they do not, the message is sent without it and its Result says so.
	TraceContext TraceContext
	// Offload, when set, sends bodies too large for the queue (or all, with Always) through
	// S3 as pointers; without it such a body is refused.
	Offload *Offload
}

// Validate checks what can be checked without asking SQS.
func (r Request) Validate() error {
	if err := queueattr.ValidateURL(r.QueueURL); err != nil {
		return setting.Error{Setting: setting.QueueURL, Err: err}
	}
	if len(r.Bodies) == 0 {
		return setting.Refuse("", nil, "nothing to send: give "+setting.Ref(setting.Body)+", "+setting.Ref(setting.File)+" or lines on stdin")
	}
	if r.Delay < 0 || r.Delay > sqsspec.MaxDelay {
		return setting.Refuse(setting.Delay, r.Delay, fmt.Sprintf("must be between 0 and %v", sqsspec.MaxDelay))
	}
	if err := CheckAttributes(r.Attributes); err != nil {
		return setting.Error{Setting: setting.Attrs, Err: err}
	}
	if r.Offload != nil {
		return r.Offload.validate(r.Attributes)
	}
	return nil
}

// InputError lists the inputs SQS would refuse; nothing was sent. A problem with a setting of
// the request is a setting.Error.
type InputError struct {
	Problems []error
}

func (e *InputError) Error() string {
	problems := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		problems[i] = p.Error()
	}
	return fmt.Sprintf("nothing sent: %s", strings.Join(problems, "; "))
}

// Deliver checks every body against the queue (FIFO or not, MaximumMessageSize, characters)
// and, only when all pass, sends them in batches. A bad input is an *InputError naming each
// bad body and nothing is sent. Otherwise it returns one Result per body, in order.
func Deliver(ctx context.Context, api QueueAPI, r Request) ([]Result, error) {
	if err := r.Validate(); err != nil {
		return nil, &InputError{Problems: []error{err}}
	}
	info, err := queueattr.Describe(ctx, api, r.QueueURL)
	if err != nil {
		return nil, err
	}
	name, groupID := queueattr.NameFromURL(r.QueueURL), setting.Ref(setting.GroupID)
	refuse := func(reason string) error { return &InputError{Problems: []error{setting.Refuse("", nil, reason)}} }
	switch {
	case info.FIFO && r.GroupID == "":
		return nil, refuse(groupID + " is required: " + name + " is a FIFO queue")
	case info.FIFO && r.Delay > 0:
		return nil, refuse(setting.Ref(setting.Delay) + " is not allowed: " + name + " is a FIFO queue (set the queue's DelaySeconds instead)")
	}
	contentDedup := false
	if info.FIFO {
		out, err := api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
			QueueUrl:       aws.String(r.QueueURL),
			AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameContentBasedDeduplication},
		})
		if err != nil {
			return nil, fmt.Errorf("read attributes of %s: %w", r.QueueURL, err)
		}
		contentDedup = out.Attributes[string(types.QueueAttributeNameContentBasedDeduplication)] == "true"
	}
	limits := Limits{MaxSize: info.MaximumMessageSize, FIFO: info.FIFO}
	if r.Offload != nil {
		if err := r.Offload.checkQueue(limits); err != nil {
			return nil, &InputError{Problems: []error{err}}
		}
	}
	msgs := make([]Message, len(r.Bodies))
	objects := make([]*object, len(r.Bodies))
	warnings := make([]string, len(r.Bodies))
	var problems []error
	for i, b := range r.Bodies {
		m := Message{Body: b.Text, Attributes: r.Attributes, GroupID: r.GroupID, Delay: r.Delay}
		if info.FIFO && !contentDedup {
			m.DeduplicationID = NewDeduplicationID()
		}
		var err error
		switch {
		case r.Offload != nil && b.Size() == 0:
			err = errors.New("the body is empty (SQS refuses empty messages)")
		case r.Offload != nil && b.Size() > MaxObjectSize:
			err = fmt.Errorf("the body is %d bytes, more than the %d S3 takes in one PutObject", b.Size(), int64(MaxObjectSize))
		case r.Offload != nil && r.Offload.offloads(m, b, limits):
			// S3 holds any bytes, so SQS's character rules do not apply to the body.
			m, objects[i] = r.Offload.pointerMessage(m, b)
			err = Check(m, limits)
		case b.Large != nil:
			err = setting.Refuse("", nil, fmt.Sprintf("the body is %d bytes, more than the queue's MaximumMessageSize of %d: send it through S3 with %s", b.Size(), limits.MaxSize, setting.Ref(setting.PayloadBucket)))
		default:
			err = Check(m, limits)
			if err != nil && r.Offload == nil && limits.MaxSize > 0 && Size(m) > limits.MaxSize {
				err = setting.Refuse("", nil, err.Error()+": send it through S3 with "+setting.Ref(setting.PayloadBucket))
			}
		}
		if err != nil {
			problems = append(problems, fmt.Errorf("%s: %w", b.Source, err))
		}
		msgs[i], warnings[i] = withTraceContext(m, r.TraceContext, limits)
	}
	if len(problems) > 0 {
		return nil, &InputError{Problems: problems}
	}
	results := make([]Result, len(msgs))
	report := func(i int, res Result) {
		res.Warning = warnings[i]
		results[i] = res
	}
	if r.Offload != nil {
		sendOffloaded(ctx, api, r.Offload.API, r.QueueURL, msgs, objects, report)
	} else {
		Send(ctx, api, r.QueueURL, msgs, report)
	}
	return results, nil
}

// maxLine is the longest stdin line ReadLines accepts: a 1 MiB body and its line ending.
const maxLine = sqsspec.MaxMessageSize + 2

// ReadLines reads one body per line ("\n" or "\r\n" ends a line), naming each "<name> line N".
// Empty lines are kept so that Deliver refuses them by line number rather than skipping input
// silently.
func ReadLines(r io.Reader, name string) ([]Body, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), maxLine)
	var bodies []Body
	n := 0
	for sc.Scan() {
		n++
		bodies = append(bodies, Body{Text: strings.TrimSuffix(sc.Text(), "\r"), Source: fmt.Sprintf("%s line %d", name, n)})
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("%s line %d: longer than 1 MiB, SQS's largest message", name, n+1)
		}
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return bodies, nil
}

// Spool is where ReadLinesSpooled keeps the lines too long for memory: a temporary file, read
// back (at offsets) only to write each line to S3.
type Spool interface {
	io.Writer
	io.ReaderAt
}

var _ Spool = (*os.File)(nil)

// ReadLinesSpooled reads lines as ReadLines does, for a send that offloads large bodies to
// S3: a line longer than SQS's largest message is written to spool rather than kept in memory,
// and its Body reads it back from there (Body.Large). Memory then holds the short lines and
// 1 MiB of the line being read, whatever the lines' length.
func ReadLinesSpooled(r io.Reader, name string, spool Spool) ([]Body, error) {
	br := bufio.NewReaderSize(r, 64*1024)
	var (
		bodies  []Body
		n       int
		line    []byte // the line read so far, while it fits in memory
		spooled = int64(-1)
		start   int64 // where the line begins in the spool, once spooled
		end     int64 // the spool's length
		heldCR  bool  // a "\r" at the end of what was read, written only if no "\n" follows
	)
	write := func(p []byte) error {
		if len(p) == 0 {
			return nil
		}
		if heldCR {
			if _, err := spool.Write([]byte{'\r'}); err != nil {
				return err
			}
			end++
			heldCR = false
		}
		if len(p) > 0 && p[len(p)-1] == '\r' {
			p, heldCR = p[:len(p)-1], true
		}
		k, err := spool.Write(p)
		end += int64(k)
		return err
	}
	for {
		chunk, err := br.ReadSlice('\n')
		complete := len(chunk) > 0 && chunk[len(chunk)-1] == '\n'
		if complete {
			chunk = chunk[:len(chunk)-1]
		}
		if len(chunk) > 0 || complete {
			if spooled < 0 && len(line)+len(chunk) > maxLine-2 {
				spooled, start = 0, end
				if werr := write(line); werr != nil {
					return nil, fmt.Errorf("%s line %d: spool: %w", name, n+1, werr)
				}
				line = line[:0]
			}
			if spooled >= 0 {
				if werr := write(chunk); werr != nil {
					return nil, fmt.Errorf("%s line %d: spool: %w", name, n+1, werr)
				}
			} else {
				line = append(line, chunk...)
			}
		}
		eof := errors.Is(err, io.EOF)
		if complete || (eof && (len(line) > 0 || spooled >= 0)) {
			n++
			source := fmt.Sprintf("%s line %d", name, n)
			if spooled >= 0 {
				// A "\r" held back ends the line: it is dropped, as ReadLines drops it.
				heldCR = false
				bodies = append(bodies, Body{Source: source, Large: io.NewSectionReader(spool, start, end-start)})
			} else {
				bodies = append(bodies, Body{Text: strings.TrimSuffix(string(line), "\r"), Source: source})
			}
			line, spooled = line[:0], -1
		}
		if eof {
			return bodies, nil
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
	}
}

// ErrTooLarge is a body longer than SQS ever takes, read without a spool.
var ErrTooLarge = errors.New("longer than 1 MiB, the most SQS takes")

// ReadWhole reads all of r as one body named name. It stays in memory up to SQS's largest
// message; beyond that it goes to spool and the Body reads it from there (Body.Large), or,
// without a spool, it is refused.
func ReadWhole(r io.Reader, name string, spool Spool) (Body, error) {
	head, err := io.ReadAll(io.LimitReader(r, sqsspec.MaxMessageSize+1))
	if err != nil {
		return Body{}, fmt.Errorf("read %s: %w", name, err)
	}
	if len(head) <= sqsspec.MaxMessageSize {
		return Body{Text: string(head), Source: name}, nil
	}
	if spool == nil {
		return Body{}, fmt.Errorf("%s is %w", name, ErrTooLarge)
	}
	if _, err := spool.Write(head); err != nil {
		return Body{}, fmt.Errorf("%s: spool: %w", name, err)
	}
	rest, err := io.Copy(spool, r)
	if err != nil {
		return Body{}, fmt.Errorf("%s: spool: %w", name, err)
	}
	return Body{Source: name, Large: io.NewSectionReader(spool, 0, int64(len(head))+rest)}, nil
}
