package deadletter

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/internal/setting"
)

// OldestAgeNote says why QueueStatus has no oldest-message age. SQS's API does not report it,
// and reading the oldest message would change it (receive count, visibility), which a status
// view must not do. CloudWatch computes it from inside SQS.
const OldestAgeNote = "not available from the SQS API without consuming messages; " +
	"see the CloudWatch metric AWS/SQS ApproximateAgeOfOldestMessage (dimension QueueName)"

// QueueStatus is what `watchbot status` shows.
type QueueStatus struct {
	Name string `json:"name"`
	URL  string `json:"url"`
	FIFO bool   `json:"fifo"`
	Counts
	// OldestMessageAge is always nil; see OldestAgeNote.
	OldestMessageAge  *float64 `json:"oldestMessageAgeSeconds"`
	OldestAgeNote     string   `json:"oldestMessageAgeNote"`
	VisibilityTimeout float64  `json:"visibilityTimeoutSeconds"`
	RetentionPeriod   float64  `json:"retentionPeriodSeconds"`
	// Redrive is nil when the queue has no redrive policy.
	Redrive *RedriveStatus `json:"redrive"`
	// Tenants are a listen's per-tenant figures for the queue (status --metrics-url), nil
	// when not asked for.
	Tenants []alarms.TenantFigure `json:"tenants,omitempty"`
	// DLQSample counts the pointer messages among a sample of the DLQ's messages, when one
	// was asked for (SamplePayloads); nil otherwise.
	DLQSample *PayloadSample `json:"deadLetterSample,omitempty"`
}

// RedriveStatus is the queue's redrive policy and its DLQ's depth.
type RedriveStatus struct {
	DeadLetterQueue string `json:"deadLetterQueue"`
	DLQURL          string `json:"deadLetterQueueUrl"`
	MaxReceiveCount int    `json:"maxReceiveCount"`
	DLQ             Counts `json:"deadLetterQueueCounts"`
}

// Status reads a queue's counts and settings, and its DLQ's counts. It changes nothing.
func Status(ctx context.Context, api queueattr.API, queueURL string) (QueueStatus, error) {
	if err := queueattr.ValidateURL(queueURL); err != nil {
		return QueueStatus{}, setting.Error{Setting: setting.QueueURL, Err: err}
	}
	info, err := queueattr.Describe(ctx, api, queueURL)
	if err != nil {
		return QueueStatus{}, err
	}
	s := QueueStatus{
		Name:              queueattr.NameFromURL(queueURL),
		URL:               queueURL,
		FIFO:              info.FIFO,
		Counts:            Counts{Visible: info.Visible, InFlight: info.InFlight, Delayed: info.Delayed},
		OldestAgeNote:     OldestAgeNote,
		VisibilityTimeout: info.VisibilityTimeout.Seconds(),
		RetentionPeriod:   info.RetentionPeriod.Seconds(),
	}
	if info.Redrive == nil {
		return s, nil
	}
	dlq, err := queueattr.DescribeDeadLetterQueue(ctx, api, info)
	if err != nil {
		return QueueStatus{}, err
	}
	s.Redrive = &RedriveStatus{
		DeadLetterQueue: queueattr.NameFromURL(dlq.URL),
		DLQURL:          dlq.URL,
		MaxReceiveCount: info.Redrive.MaxReceiveCount,
		DLQ:             Counts{Visible: dlq.Visible, InFlight: dlq.InFlight, Delayed: dlq.Delayed},
	}
	return s, nil
}

// WriteStatus writes s for a reader.
func WriteStatus(w io.Writer, s QueueStatus) error {
	var b strings.Builder
	kind := "standard"
	if s.FIFO {
		kind = "FIFO"
	}
	fmt.Fprintf(&b, "queue:       %s (%s)\n", s.Name, kind)
	fmt.Fprintf(&b, "url:         %s\n", s.URL)
	fmt.Fprintf(&b, "visible:     %d\n", s.Visible)
	fmt.Fprintf(&b, "in flight:   %d\n", s.InFlight)
	fmt.Fprintf(&b, "delayed:     %d\n", s.Delayed)
	fmt.Fprintf(&b, "oldest age:  n/a (%s)\n", s.OldestAgeNote)
	fmt.Fprintf(&b, "visibility:  %v\n", time.Duration(s.VisibilityTimeout*float64(time.Second)))
	fmt.Fprintf(&b, "retention:   %v\n", time.Duration(s.RetentionPeriod*float64(time.Second)))
	if s.Redrive == nil {
		fmt.Fprintf(&b, "redrive:     none (no dead-letter queue: failing messages are retried until retention ends)\n")
	} else {
		r := s.Redrive
		fmt.Fprintf(&b, "redrive:     to %s after %d receives\n", r.DeadLetterQueue, r.MaxReceiveCount)
		fmt.Fprintf(&b, "dlq depth:   %d (visible %d, in flight %d, delayed %d)\n", r.DLQ.Total(), r.DLQ.Visible, r.DLQ.InFlight, r.DLQ.Delayed)
	}
	if p := s.DLQSample; p != nil {
		fmt.Fprintf(&b, "dlq sample:  %d of %d peeked point to bodies in S3 (%d bytes)\n", p.Pointers, p.Peeked, p.Bytes)
	}
	if s.Tenants != nil {
		writeTenants(&b, s.Tenants)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeTenants writes the per-tenant figures as a table: runs, mean and longest wait.
func writeTenants(b *strings.Builder, rows []alarms.TenantFigure) {
	if len(rows) == 0 {
		fmt.Fprintf(b, "tenants:     none counted (no message with a MessageGroupId has run)\n")
		return
	}
	fmt.Fprintf(b, "tenants:     %-24s %8s %10s %10s\n", "TENANT", "RUNS", "MEAN WAIT", "MAX WAIT")
	for _, r := range rows {
		mean := time.Duration(r.MeanWaitSeconds() * float64(time.Second)).Round(time.Millisecond)
		longest := time.Duration(r.MaxWaitSeconds * float64(time.Second)).Round(time.Millisecond)
		fmt.Fprintf(b, "             %-24s %8d %10v %10v\n", r.Tenant, r.Runs, mean, longest)
	}
}
