package alarms

import (
	"context"
	"sync"

	"github.com/watchbot/watchbot/internal/queueattr"
)

// DLQDepth returns a PublisherConfig.DLQDepth: the visible messages of the dead-letter queue
// that queueURL's redrive policy names. The DLQ's URL is looked up on the first sample that
// can, then kept: a redrive policy that changes while watchbot runs is read again only at its
// next start. The lock guards that URL alone, never a call to SQS, so a sample stuck on a
// slow call holds up no other.
func DLQDepth(api queueattr.API, queueURL string) func(ctx context.Context) (int64, error) {
	var mu sync.Mutex
	var dlq string
	return func(ctx context.Context) (int64, error) {
		mu.Lock()
		url := dlq
		mu.Unlock()
		if url == "" {
			info, err := queueattr.Describe(ctx, api, queueURL)
			if err != nil {
				return 0, err
			}
			if url, err = queueattr.DeadLetterQueue(ctx, api, info); err != nil {
				return 0, err
			}
			mu.Lock()
			dlq = url
			mu.Unlock()
		}
		info, err := queueattr.Describe(ctx, api, url)
		if err != nil {
			return 0, err
		}
		return info.Visible, nil
	}
}
