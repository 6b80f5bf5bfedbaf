package worker

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// batchLine is one message of a batch as the worker reads it: one JSON object per line on
// stdin and in WATCHBOT_MESSAGE_FILE.
type batchLine struct {
	ID            string            `json:"id"`
	Body          string            `json:"body"`
	Subject       string            `json:"subject,omitempty"`
	Attributes    map[string]string `json:"attributes"`
	Attempt       int               `json:"attempt"`
	SentTimestamp string            `json:"sentTimestamp,omitempty"`
	GroupID       string            `json:"groupId,omitempty"`
}

// encodeBatch writes a batch as the worker reads it, in the order the batch was built (a
// FIFO group's messages in their order).
func encodeBatch(msgs []Message) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for _, m := range msgs {
		_ = enc.Encode(batchLineOf(m)) // strings and maps of strings always encode
	}
	return buf.Bytes()
}

// maxBatchResults bounds how much of a batch's result file is read.
const maxBatchResults = 16 << 20

// parseBatchResults reads a batch's result file: one JSON object per line,
// {"id":…,"action":"ack"|"retry"|"dead-letter","delaySeconds":…,"reason":…}. The first valid
// line for a message wins. Lines that are malformed, name a message not in the batch, or
// repeat one already decided are returned as warnings and otherwise ignored.
func parseBatchResults(r io.Reader, ids map[string]bool) (map[string]*Directive, []string) {
	results := map[string]*Directive{}
	var warnings []string
	br := bufio.NewReaderSize(io.LimitReader(r, maxBatchResults), 64*1024)
	for n := 1; ; n++ {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			warnings = append(warnings, fmt.Sprintf("result line %d: longer than 64 KiB; ignored", n))
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			if err != nil {
				break
			}
			continue
		}
		if trimmed := bytes.TrimSpace(line); len(trimmed) > 0 {
			if w := addBatchResult(results, ids, trimmed); w != "" {
				warnings = append(warnings, fmt.Sprintf("result line %d: %s", n, w))
			}
		}
		if err != nil {
			break
		}
	}
	return results, warnings
}

func addBatchResult(results map[string]*Directive, ids map[string]bool, line []byte) string {
	var res struct {
		ID string `json:"id"`
		Directive
	}
	if err := json.Unmarshal(line, &res); err != nil {
		return fmt.Sprintf("not a JSON object (%v); ignored", err)
	}
	d := res.Directive
	if err := d.validate(); err != nil {
		return fmt.Sprintf("%v; ignored", err)
	}
	switch {
	case res.ID == "":
		return "no id; ignored"
	case !ids[res.ID]:
		return fmt.Sprintf("message %q is not in this batch; ignored", res.ID)
	case results[res.ID] != nil:
		return fmt.Sprintf("message %q already has a result; the first one stands", res.ID)
	}
	results[res.ID] = &d
	return ""
}
