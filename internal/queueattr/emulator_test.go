package queueattr_test

// An external test package: testenv, which these tests use, imports queueattr.

import (
	"errors"
	"testing"
	"time"

	"github.com/watchbot/watchbot/internal/queueattr"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

func TestDescribeAgainstEmulator(t *testing.T) {
	emu := testenv.SQS(t)
	c := emu.Client()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3, VisibilityTimeout: 45 * time.Second})

	info, err := queueattr.Describe(t.Context(), c, q.URL)
	if err != nil {
		t.Fatal(err)
	}
	if info.Redrive == nil || info.Redrive.MaxReceiveCount != 3 || info.Redrive.DeadLetterTargetARN != q.DLQARN {
		t.Fatalf("redrive = %+v, want max 3 to %s", info.Redrive, q.DLQARN)
	}
	if info.VisibilityTimeout != 45*time.Second {
		t.Errorf("visibility = %v", info.VisibilityTimeout)
	}
	dlq, err := queueattr.DeadLetterQueue(t.Context(), c, info)
	if err != nil {
		t.Fatal(err)
	}
	if dlq != q.DLQURL {
		t.Errorf("dlq = %s, want %s", dlq, q.DLQURL)
	}

	plain := emu.NewQueue(t, testenv.QueueOptions{})
	info, err = queueattr.Describe(t.Context(), c, plain.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := queueattr.DeadLetterQueue(t.Context(), c, info); !errors.Is(err, queueattr.ErrNoRedrivePolicy) {
		t.Errorf("err = %v, want queueattr.ErrNoRedrivePolicy", err)
	}
	if _, err := queueattr.Describe(t.Context(), c, plain.URL+"-missing"); err == nil {
		t.Error("queueattr.Describe of a missing queue succeeded")
	}
}
