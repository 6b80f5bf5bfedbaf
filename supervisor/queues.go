package supervisor

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/internal/setting"
)

// Queues are the further queues of a listen that serves several, and how the queues share
// the worker slots (docs/queues.md). Weights and reserves are keyed by queue name (the last
// element of its URL).
type Queues struct {
	// More are the queues after Config.QueueURL, in the order given: strict serves them in
	// that order, QueueURL first.
	More []string
	// Policy is how a free slot goes to the queues with work (--queue-policy).
	Policy QueuePolicy
	// Weights are the queues' weights under PolicyWeighted (--queue-weight); 1 when not given.
	Weights map[string]int
	// Reserve are slots kept for a queue, which no other queue uses (--queue-reserve).
	Reserve map[string]int
}

// URLs returns every queue the configuration names, in order: QueueURL, then Queues.More.
func (c Config) URLs() []string { return append([]string{c.QueueURL}, c.Queues.More...) }

// checkQueues checks the queues and how they share the slots. Weights, reserves and the
// policy are accepted with a single queue as well, where they change nothing, so that one
// task definition serves however many queues it is given.
func (c Config) checkQueues() error {
	q := c.Queues
	if q.Policy != PolicyWeighted && q.Policy != PolicyStrict {
		return setting.Refuse(listenspec.SettingQueuePolicy, string(q.Policy), "must be weighted or strict")
	}
	names := map[string]bool{}
	for _, u := range c.URLs() {
		if err := queueattr.ValidateURL(u); err != nil {
			return setting.Refuse(setting.QueueURL, u, err.Error())
		}
		name := queueattr.NameFromURL(u)
		if names[name] {
			return setting.Refuse(setting.QueueURL, u, fmt.Sprintf("names queue %s a second time: give each queue once (queues are told apart by name)", name))
		}
		names[name] = true
	}
	for _, name := range slices.Sorted(maps.Keys(q.Weights)) {
		if !names[name] {
			return setting.Refuse(listenspec.SettingQueueWeight, name, "names no queue given with "+setting.Ref(setting.QueueURL))
		}
		if w := q.Weights[name]; w < 1 || w > maxQueueWeight {
			return setting.Refuse(listenspec.SettingQueueWeight, fmt.Sprintf("%s=%d", name, w), fmt.Sprintf("must be between 1 and %d", maxQueueWeight))
		}
	}
	sum := 0
	for _, name := range slices.Sorted(maps.Keys(q.Reserve)) {
		if !names[name] {
			return setting.Refuse(listenspec.SettingQueueReserve, name, "names no queue given with "+setting.Ref(setting.QueueURL))
		}
		n := q.Reserve[name]
		if n < 1 {
			return setting.Refuse(listenspec.SettingQueueReserve, fmt.Sprintf("%s=%d", name, n), "must keep at least 1 slot")
		}
		sum += n
	}
	if sum > c.Concurrency {
		return setting.Refuse(listenspec.SettingQueueReserve, nil, fmt.Sprintf("keeps %d slots in all, more than %s (%d)", sum, setting.Ref(listenspec.SettingConcurrency), c.Concurrency))
	}
	for _, u := range c.URLs() {
		if name := queueattr.NameFromURL(u); sum == c.Concurrency && q.Reserve[name] == 0 {
			return setting.Refuse(listenspec.SettingQueueReserve, nil, fmt.Sprintf("keeps all %d slots (%s) for other queues: queue %s would never run", sum, setting.Ref(listenspec.SettingConcurrency), name))
		}
	}
	if len(q.More) > 0 && c.Once {
		return setting.Refuse(setting.QueueURL, nil, "is given more than once: --once takes one message from one queue")
	}
	return nil
}

// maxQueueWeight is the largest --queue-weight: beyond it a queue would take every slot of
// even the largest --concurrency before the next queue's turn.
const maxQueueWeight = 1000

// newQueuePool returns the pool of the slots that cfg's queues share: one seat for a single
// queue, which has the slots to itself.
func newQueuePool(cfg Config) *slotPool {
	urls := cfg.URLs()
	weights, reserves := make([]int, len(urls)), make([]int, len(urls))
	for i, u := range urls {
		name := queueattr.NameFromURL(u)
		weights[i] = max(1, cfg.Queues.Weights[name])
		reserves[i] = cfg.Queues.Reserve[name]
	}
	return newSlotPool(runSlots(cfg), cfg.Queues.Policy, weights, reserves)
}

// queueError names the queue in a startup check's error.
func queueError(name string, err error) error {
	var e setting.Error
	if errors.As(err, &e) {
		e.Reason = strings.TrimSuffix(fmt.Sprintf("queue %s: %s", name, e.Reason), ": ")
		return e
	}
	return fmt.Errorf("queue %s: %w", name, err)
}
