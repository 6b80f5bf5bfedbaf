package supervisor

// S3 payloads: a message whose body is an SQS Extended Client pointer has its object
// fetched into the job's message file before the worker runs, from the buckets listen
// allows alone, and deleted once the message succeeds (docs/payloads.md).

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/watchbot/watchbot/alarms"
	"github.com/watchbot/watchbot/internal/listenspec"
	"github.com/watchbot/watchbot/internal/setting"
	"github.com/watchbot/watchbot/payload"
	"github.com/watchbot/watchbot/worker"
)

// PayloadConfig is how listen treats SQS Extended Client pointers (--payload-bucket,
// --keep-payloads).
type PayloadConfig struct {
	// Buckets are the buckets a pointer may name; a pointer to any other is dead-lettered
	// unfetched. None: pointers are not resolved, and reach the worker as their senders wrote
	// them, for a worker that resolves them itself.
	Buckets []string
	// Keep leaves each object in place once its message succeeded; by default it is deleted,
	// as the Extended Client libraries delete it.
	Keep bool
}

// enabled reports whether pointers are resolved.
func (p PayloadConfig) enabled() bool { return len(p.Buckets) > 0 }

// allows reports whether a pointer may name bucket.
func (p PayloadConfig) allows(bucket string) bool { return slices.Contains(p.Buckets, bucket) }

// CheckPayload validates the payload settings: bucket names as S3 names them (Amazon S3 User
// Guide, "General purpose bucket naming rules"), and --keep-payloads only with a bucket.
func CheckPayload(p PayloadConfig) error {
	for _, b := range p.Buckets {
		if strings.HasPrefix(b, "s3://") || strings.HasPrefix(b, "arn:") {
			return setting.Refuse(listenspec.SettingPayloadBuckets, b, "must be a bucket's name alone, such as my-payloads")
		}
		if !validBucket(b) {
			return setting.Refuse(listenspec.SettingPayloadBuckets, b, "is not a bucket name: 3 to 63 lowercase letters, digits, dots and hyphens, starting and ending with a letter or digit")
		}
	}
	if p.Keep && !p.enabled() {
		return setting.Refuse(listenspec.SettingKeepPayloads, nil, "needs "+setting.Ref(listenspec.SettingPayloadBuckets)+": without one, pointers are not resolved and objects never deleted")
	}
	return nil
}

func validBucket(b string) bool {
	if len(b) < 3 || len(b) > 63 {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && c != '.' && c != '-' || (i == 0 || i == len(b)-1) && !alnum {
			return false
		}
	}
	return true
}

// PayloadAPI is what listen calls S3 for: fetching objects and deleting them.
type PayloadAPI interface {
	payload.Getter
	payload.Deleter
}

// payloadFailure is why a pointer message cannot run: rejected (dead-lettered at once) or
// not (retried after the backoff), with its reason.
type payloadFailure struct {
	end    runEnd
	reason string
}

// resolvePayloads fetches the object of each pointer message among live (listed at liveAt in
// results) and returns those that run. A message whose pointer cannot be fetched does not run:
// its result says why. It runs in the run, while the heartbeat keeps every message leased;
// a stop ends a fetch as it ends a worker.
func (r *runner) resolvePayloads(ctx context.Context, live []*job, liveAt []int, results []result) ([]*job, []int) {
	if r.s3 == nil {
		r.passThrough(live)
		return live, liveAt
	}
	keep, keepAt := live[:0:0], liveAt[:0:0]
	for k, j := range live {
		f, fail := r.resolve(ctx, j)
		if fail != nil {
			results[liveAt[k]].End, results[liveAt[k]].Payload = fail.end, fail.reason
			continue
		}
		j.fetched = f
		keep, keepAt = append(keep, j), append(keepAt, liveAt[k])
	}
	return keep, keepAt
}

// passThrough notes pointers that reach the worker unresolved, without --payload-bucket.
func (r *runner) passThrough(live []*job) {
	for _, j := range live {
		if p, err := payload.Parse(j.msg.Body); err == nil {
			level := slog.LevelDebug
			if r.passThroughWarned.CompareAndSwap(false, true) {
				level = slog.LevelWarn
			}
			j.log.Log(context.Background(), level, "the body is an S3 payload pointer, passed to the worker as it is: without --payload-bucket, watchbot resolves none",
				"payload", p.URI())
		}
	}
}

// resolve reads a message's pointer, if it has one, and fetches its object; (nil, nil) is a
// message without one.
func (r *runner) resolve(ctx context.Context, j *job) (*worker.Payload, *payloadFailure) {
	p, ok, err := payload.Detect(j.msg.Body, payload.SizeOf(j.msg.Attributes))
	switch {
	case err != nil:
		return nil, &payloadFailure{endPayloadRejected, "payload pointer unreadable: " + err.Error()}
	case !ok:
		return nil, nil
	case !r.cfg.Payload.allows(p.Bucket):
		return nil, &payloadFailure{endPayloadRejected, fmt.Sprintf("payload bucket %q is not allowed (--payload-bucket): %s", p.Bucket, p.URI())}
	}
	j.payload = &p
	log := j.log.With("payload", p.URI())
	f, err := r.fetch(ctx, p)
	if err == nil {
		if want := payload.SizeOf(j.msg.Attributes); want.Present() && want.Bytes != f.Size() {
			log.Warn("the payload's size differs from what its message says", "bytes", f.Size(), want.Name, want.Bytes)
		}
		log.Debug("payload fetched", "bytes", f.Size())
		return f, nil
	}
	if cause := context.Cause(ctx); cause != nil {
		// Stopped as a worker is stopped: the outcome is a stopped run's.
		log.Info("payload fetch stopped", "cause", cause)
		return nil, &payloadFailure{end: endFor(cause)}
	}
	r.metrics.Add(alarms.PayloadFetchErrors, 1)
	if code, permanent := payload.Permanent(err); permanent {
		return nil, &payloadFailure{endPayloadRejected, fmt.Sprintf("payload %s cannot be fetched: %s", p.URI(), code)}
	}
	log.Warn("payload fetch failed", "error", err)
	return nil, &payloadFailure{endPayloadError, "payload fetch failed: " + err.Error()}
}

// fetch streams p's object into a file of the job's own, which the worker reads.
func (r *runner) fetch(ctx context.Context, p payload.Pointer) (*worker.Payload, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A stop ends the fetch with the run; the stop's last moment ends it whatever S3 does.
	defer r.cut.cuts(cancel)()
	if r.cfg.MaxJobDuration > 0 {
		ctx, cancel = context.WithTimeout(ctx, r.cfg.MaxJobDuration)
		defer cancel()
	}
	return r.dirs.Payload(p.URI(), func(f *os.File) (int64, error) { return payload.Fetch(ctx, r.s3, p, f) })
}

// dropFetched removes the payload files of a run's jobs.
func dropFetched(jobs []*job) {
	for _, j := range jobs {
		if j.fetched != nil {
			j.fetched.Remove()
			j.fetched = nil
		}
	}
}

// deletePayload deletes the object of a message that succeeded, unless --keep-payloads. A
// delete that fails is logged and counted, never the job's failure: the bucket's lifecycle
// rule expires the object.
func (r *runner) deletePayload(ctx context.Context, j *job, log *slog.Logger) {
	if j.payload == nil || r.s3 == nil || r.cfg.Payload.Keep {
		return
	}
	ctx, cancel := r.cut.bound(context.WithoutCancel(ctx), r.cfg.AckTimeout)
	defer cancel()
	if err := payload.Delete(ctx, r.s3, *j.payload); err != nil {
		r.metrics.Add(alarms.PayloadDeleteErrors, 1)
		log.Warn("could not delete the payload; the message is done, the object stays", "payload", j.payload.URI(), "error", err)
		return
	}
	log.Debug("payload deleted", "payload", j.payload.URI())
}
