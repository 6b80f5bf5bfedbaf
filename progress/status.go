package progress

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/watchbot/watchbot/internal/ddbattr"
)

// Status is a job as status reports it. Its JSON is what `watchbot progress status --json`
// prints; Compat gives watchbot-progress's shape.
type Status struct {
	Job string `json:"job"`
	// Total is the job's number of parts; 0 until set-total.
	Total int64 `json:"total"`
	// Done is the number of parts counted complete. A call that stopped between its two
	// writes has set its part's bit (PartComplete) but not counted it yet; the next call for
	// that part's shard counts it.
	Done int64 `json:"done"`
	// Progress is Done/Total rounded down to hundredths, as watchbot-progress reports it: 1
	// only once every part is done.
	Progress float64 `json:"progress"`
	// Complete: every part is done.
	Complete bool `json:"complete"`
	// Failed and Reason: fail-job was called, with this reason.
	Failed bool   `json:"failed"`
	Reason string `json:"reason,omitempty"`
	// Metadata is the document set-metadata stored, compact; absent when none was.
	Metadata json.RawMessage `json:"metadata,omitempty"`
	// ReduceSent: reduce-sent was called.
	ReduceSent bool `json:"reduceSent"`
	// Part and PartComplete answer status --part; absent without it, or before set-total.
	Part         int64 `json:"part,omitempty"`
	PartComplete *bool `json:"partComplete,omitempty"`
}

// Status reads job: its job and info items, and with part > 0 the part's shard, in one
// strongly consistent BatchGetItem. A job nothing was recorded for has progress 0, as in
// watchbot-progress; a part beyond the job's total is refused.
func (s *Store) Status(ctx context.Context, job string, part int64) (Status, error) {
	st := Status{Job: job}
	if err := ValidateJobID(job); err != nil {
		return st, err
	}
	if part < 0 || part > MaxParts {
		return st, fmt.Errorf("part %d is outside 1..%d", part, MaxParts)
	}
	want := []string{jobItem, infoItem}
	shard, bit := locate(max(part, 1))
	if part > 0 {
		want = append(want, shardKey(shard))
	}
	items, err := s.read(ctx, "status", job, want...)
	if err != nil {
		return st, err
	}
	if item, ok := items[jobItem]; ok {
		j, err := s.decodeJob(job, item)
		if err != nil {
			return st, err
		}
		st.Total, st.Done = j.total, j.total-j.remaining
		st.Progress, st.Complete = progressOf(st.Done, st.Total), st.Done == st.Total
	}
	info := items[infoItem]
	st.Reason = ddbattr.String(info, attrReason)
	st.Failed = st.Reason != ""
	if m := ddbattr.String(info, attrMetadata); m != "" {
		st.Metadata = json.RawMessage(m)
	}
	st.ReduceSent = boolOf(info, attrReduceSent)
	if part > 0 && st.Total > 0 {
		if part > st.Total {
			return st, fmt.Errorf("part %d of job %s is outside 1..%d (its total)", part, strconv.Quote(job), st.Total)
		}
		done := decodeShard(items[shardKey(shard)]).bits.has(bit)
		st.Part, st.PartComplete = part, &done
	}
	return st, nil
}

// progressOf is done/total rounded down to hundredths, so that it reads 1 only when every
// part is done. watchbot-progress computes it in floating point, Math.floor(done/total*100)
// * 0.01, which rounds some exact hundredths one down (29 of 100 parts read 0.28); this is
// the exact quotient (0.29).
func progressOf(done, total int64) float64 {
	if total <= 0 {
		return 0
	}
	// done ≤ MaxParts, so done*100 cannot overflow.
	return float64(done*100/total) / 100
}

// Compat returns the JSON object watchbot-progress's status printed, field for field and in
// its order: progress, failed (the reason) when failed, metadata when set, partComplete when a
// part was asked for, reduceSent when sent.
func (st Status) Compat() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // JSON.stringify does not escape <, > and &
	err := enc.Encode(struct {
		Progress     float64         `json:"progress"`
		Failed       string          `json:"failed,omitempty"`
		Metadata     json.RawMessage `json:"metadata,omitempty"`
		PartComplete *bool           `json:"partComplete,omitempty"`
		ReduceSent   bool            `json:"reduceSent,omitempty"`
	}{st.Progress, st.Reason, st.Metadata, st.PartComplete, st.ReduceSent})
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), err
}
