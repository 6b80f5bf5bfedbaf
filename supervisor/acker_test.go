package supervisor

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func TestAckerUrgentOpsLingerBriefly(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		a, q, handles, stop := ackerRig(t, 3)
		defer stop()
		start := time.Now()
		// A plain delete lingers for the 20 ms batch; two urgent ones submitted beside it cut
		// the wait to urgentLinger, and the three share one call.
		plain := a.submit(ackDelete, handles[0], 0)
		urgent := []<-chan error{a.enqueue(ackOp{kind: ackDelete, handle: handles[1], urgent: true}),
			a.enqueue(ackOp{kind: ackDelete, handle: handles[2], urgent: true})}
		for _, ch := range append(urgent, plain) {
			if err := <-ch; err != nil {
				t.Fatal(err)
			}
		}
		if took := time.Since(start); took != urgentLinger {
			t.Errorf("deletes answered after %v, want the urgent linger (%v)", took, urgentLinger)
		}
		if n := q.count("DeleteMessageBatch"); n != 1 {
			t.Errorf("%d batch calls, want one for all three", n)
		}
	})
}

// ackerRig is an acknowledger with a 20 ms linger, running over a fakeQueue that holds n
// received messages, whose receipt handles it returns. stop closes the acknowledger.
func ackerRig(t *testing.T, n int) (a *acker, q *fakeQueue, handles []string, stop func()) {
	q = newFakeQueue()
	a = newAcker(q, "q", 20*time.Millisecond, time.Second, nil, nil)
	var wg sync.WaitGroup
	wg.Go(func() { a.run(t.Context()) })
	for i := range n {
		q.add(string(rune('a'+i)), "b")
		m, _ := q.receive(time.Minute)
		handles = append(handles, *m.ReceiptHandle)
	}
	return a, q, handles, func() { a.close(); wg.Wait() }
}

func TestAckerBatchesAndReportsEachEntry(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		a, q, handles, stop := ackerRig(t, 12)
		handles = append(handles, "stale-handle")
		errs := make([]<-chan error, len(handles))
		for i, h := range handles {
			errs[i] = a.submit(ackDelete, h, 0)
		}
		for i, ch := range errs {
			err := <-ch
			if (err != nil) != (i == len(handles)-1) {
				t.Errorf("handle %d: err = %v", i, err)
			}
		}
		stop()
		// 13 deletes: one full batch of 10 and one of 3, each entry answered on its own.
		if n := q.count("DeleteMessage"); n != 13 {
			t.Errorf("%d deletes, want 13", n)
		}
		if n := q.count("DeleteMessageBatch"); n != 2 {
			t.Errorf("%d batch calls, want 2 (10 + 3)", n)
		}
	})
}
