package app

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/watchbot/watchbot/internal/setting"
	"github.com/watchbot/watchbot/limits"
)

// CallerAPI is the part of the STS client that names who runs a fleet command.
type CallerAPI interface {
	GetCallerIdentity(ctx context.Context, in *sts.GetCallerIdentityInput, opts ...func(*sts.Options)) (*sts.GetCallerIdentityOutput, error)
}

var _ CallerAPI = (*sts.Client)(nil)

// callerTimeout bounds the ask of who the caller is: the change does not wait on it.
const callerTimeout = 2 * time.Second

// Caller returns the ARN of the credentials in use, as STS names them; "" when api is nil
// (there is no STS to ask, as beside an emulator) or STS does not answer. Who asked is for
// the tasks' logs: a change goes ahead without it.
func Caller(ctx context.Context, api CallerAPI) string {
	if api == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, callerTimeout)
	defer cancel()
	out, err := api.GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
	if err != nil {
		return ""
	}
	return aws.ToString(out.Arn)
}

// FleetChange is what one `watchbot fleet pause`, `resume` or `set` asks of the fleet.
type FleetChange struct {
	// What is limits.ChangePause, ChangeResume or ChangeSet.
	What string
	// Queue is the queue a pause or resume names ("" every queue); For is how long a pause
	// lasts (0: until a resume).
	Queue string
	For   time.Duration
	// Settings are what a set changes; OwnConcurrency and OwnBatchSize give each task its own
	// --concurrency or --batch-size back.
	Settings                     limits.Settings
	OwnConcurrency, OwnBatchSize bool
	// Reason and By say why and who, for the tasks' logs.
	Reason, By string
}

// FleetResult is what a change did: the control written, and the live tasks as the wait
// last read them, with those that did not apply it yet. Unserved says that the queue the
// change names is served by none of the live tasks when it was written (a pause of it holds
// for any task that serves it later, so it is no error, but a mistyped name looks the same).
type FleetResult struct {
	Control  limits.Control
	Tasks    limits.Tasks
	Lagging  []string
	Took     time.Duration
	Unserved bool
}

// SteerFleet writes ch to the fleet's control, one version up, and, unless wait is 0, waits
// up to wait until every live task applies it. A change that cannot do what it says is
// refused (a setting.Error naming why, and for a set the settings and the tasks) and nothing
// is written.
func SteerFleet(ctx context.Context, store limits.Store, ch FleetChange, wait time.Duration, clock func() time.Time) (FleetResult, error) {
	start := clock()
	var r FleetResult
	c, err := limits.Steer(ctx, store, start, func(c limits.Control, live []limits.TaskRecord) (limits.Control, error) {
		r.Unserved = ch.Queue != "" && !slices.ContainsFunc(live, func(t limits.TaskRecord) bool { return slices.Contains(t.Queues, ch.Queue) })
		return ch.apply(c, live, start)
	})
	if err != nil {
		return FleetResult{}, err
	}
	r.Control = c
	if wait <= 0 {
		return r, nil
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	r.Tasks, err = limits.Await(wctx, store, c.Version, clock)
	r.Lagging, r.Took = r.Tasks.Lagging(c.Version), clock().Sub(start)
	return r, err
}

// apply returns c changed as ch asks at now, the live tasks as they are, or refuses.
func (ch FleetChange) apply(c limits.Control, live []limits.TaskRecord, now time.Time) (limits.Control, error) {
	switch ch.What {
	case limits.ChangePause:
		var until time.Time
		if ch.For > 0 {
			until = now.Add(ch.For)
		}
		c = c.Pause(ch.Queue, until)
	case limits.ChangeResume:
		if end, all := c.Pauses[""]; all && ch.Queue != "" && (end.IsZero() || now.Before(end)) {
			return c, setting.Error{Reason: fmt.Sprintf("--queue %s: every queue is paused, and a resume of one queue would leave it paused: "+
				"resume every queue (no --queue), then pause the others by name", ch.Queue)}
		}
		c = c.Resume(ch.Queue)
	case limits.ChangeSet:
		if refused := limits.Refusals(ch.Settings, live); len(refused) > 0 {
			return c, setting.Error{Reason: "refused, nothing changed: " + strings.Join(refused, "; ")}
		}
		c.Settings = c.Settings.Over(ch.Settings)
		if ch.OwnConcurrency {
			c.Settings.Concurrency = 0
		}
		if ch.OwnBatchSize {
			c.Settings.BatchSize = 0
		}
	default:
		return c, fmt.Errorf("unknown change %q", ch.What)
	}
	c.Change = limits.Change{What: ch.What, Queue: ch.Queue, Reason: ch.Reason, By: ch.By, At: now.UTC()}
	return c, nil
}
