package supervisor

import "sync"

// mailbox carries reports to the one goroutine that owns what they are about, without ever
// making the sender wait: post appends under a lock held only for the append, and wakes the
// owner, which selects on ready and takes everything posted. A goroutine that the owner may
// be waiting on (an SQS call's goroutine, the heartbeat) reports this way, so no two
// goroutines can end up waiting on each other.
type mailbox[T any] struct {
	mu    sync.Mutex
	items []T
	ready chan struct{} // holds one wake-up while items are waiting
}

func newMailbox[T any]() *mailbox[T] {
	return &mailbox[T]{ready: make(chan struct{}, 1)}
}

// post adds v for the owner and wakes it.
func (m *mailbox[T]) post(v T) {
	m.mu.Lock()
	m.items = append(m.items, v)
	m.mu.Unlock()
	select {
	case m.ready <- struct{}{}:
	default: // a wake-up is already pending: the owner takes v with it
	}
}

// take returns what was posted since the last take, oldest first.
func (m *mailbox[T]) take() []T {
	m.mu.Lock()
	defer m.mu.Unlock()
	items := m.items
	m.items = nil
	return items
}
