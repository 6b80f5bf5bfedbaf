package worker

// The worker's environment: the per-message contract's variables (Watchbot's names and
// WATCHBOT_*), or a batch's.

import (
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/watchbot/watchbot/internal/queueattr"
)

// env returns the worker's variables: the message's (Watchbot's names and WATCHBOT_*), or a
// batch's.
func (p *Process) env(job Job, files jobFiles, deadline time.Time) []string {
	if !job.Batch {
		m := job.Messages[0]
		return buildEnv(m, jobEnv{QueueURL: job.QueueURL, MaxAttempts: job.MaxAttempts,
			MessageFile: files.message, ResultFile: files.result, Deadline: deadline, Payload: payloadEnv(m, files)})
	}
	env := []string{
		"WATCHBOT_MESSAGE_FILE=" + files.message,
		"WATCHBOT_RESULT_FILE=" + files.result,
		"WATCHBOT_BATCH_SIZE=" + strconv.Itoa(len(job.Messages)),
		"WATCHBOT_MAX_ATTEMPTS=" + strconv.Itoa(job.MaxAttempts),
		"WATCHBOT_QUEUE_URL=" + job.QueueURL,
		"WATCHBOT_QUEUE_NAME=" + queueattr.NameFromURL(job.QueueURL),
	}
	if !deadline.IsZero() {
		env = append(env, "WATCHBOT_DEADLINE="+deadline.UTC().Format(time.RFC3339))
	}
	return env
}

// maxEnvMessage is the largest body placed in the Message variable. Linux limits one
// environment string to 128 KiB; larger bodies are read from WATCHBOT_MESSAGE_FILE or stdin.
const maxEnvMessage = 64 * 1024

// jobEnv is what a worker's environment is built from, beyond the message itself.
type jobEnv struct {
	QueueURL    string
	MaxAttempts int
	MessageFile string
	ResultFile  string
	Deadline    time.Time // zero: none
	// Payload, when the body was fetched from S3, stands in for the message's body.
	Payload *envPayload
}

// envPayload is a fetched payload as the environment shows it: its object, and its body when
// that fits the Message variable.
type envPayload struct {
	URI    string
	Inline string
	Fits   bool
}

// payloadEnv is the payload of m's run, whose message file is files; nil without one.
func payloadEnv(m Message, files jobFiles) *envPayload {
	if m.Payload == nil {
		return nil
	}
	p := &envPayload{URI: m.Payload.URI}
	if files.size <= maxEnvMessage {
		b, err := os.ReadFile(files.message)
		p.Inline, p.Fits = string(b), err == nil && envSafe(string(b))
	}
	return p
}

// buildEnv returns the worker's variables (docs/worker-contract.md), to be appended to
// the supervisor's own environment. Values never pass through a shell.
func buildEnv(m Message, j jobEnv) []string {
	env := []string{
		"MessageId=" + m.ID,
		"ApproximateReceiveCount=" + strconv.Itoa(m.Receives),
		"WATCHBOT_MESSAGE_FILE=" + j.MessageFile,
		"WATCHBOT_RESULT_FILE=" + j.ResultFile,
		"WATCHBOT_ATTEMPT=" + strconv.Itoa(m.Attempt),
		"WATCHBOT_MAX_ATTEMPTS=" + strconv.Itoa(j.MaxAttempts),
		"WATCHBOT_QUEUE_URL=" + j.QueueURL,
		"WATCHBOT_QUEUE_NAME=" + queueattr.NameFromURL(j.QueueURL),
	}
	switch p := j.Payload; {
	case p != nil:
		env = append(env, "WATCHBOT_PAYLOAD_S3_URI="+p.URI)
		if p.Fits {
			env = append(env, "Message="+p.Inline)
		}
	case len(m.Body) <= maxEnvMessage && envSafe(m.Body):
		env = append(env, "Message="+m.Body)
	}
	if m.Subject != "" && envSafe(m.Subject) {
		env = append(env, "Subject="+m.Subject)
	}
	if !m.SentAt.IsZero() {
		env = append(env, "SentTimestamp="+m.SentAt.Format(time.RFC3339Nano))
	}
	if !m.FirstReceive.IsZero() {
		env = append(env, "ApproximateFirstReceiveTimestamp="+m.FirstReceive.Format(time.RFC3339Nano))
	}
	if !j.Deadline.IsZero() {
		env = append(env, "WATCHBOT_DEADLINE="+j.Deadline.UTC().Format(time.RFC3339))
	}
	if m.GroupID != "" {
		env = append(env, "WATCHBOT_GROUP_ID="+m.GroupID)
	}
	// Names that differ only in case or punctuation map to one variable: the first name in
	// byte order wins, so the worker sees the same value on every delivery.
	seen := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(m.Attributes)) {
		v, key := m.Attributes[name], "WATCHBOT_ATTR_"+envName(name)
		if seen[key] || !envSafe(v) || len(v) > maxEnvMessage {
			continue
		}
		seen[key] = true
		env = append(env, key+"="+v)
	}
	return env
}

// envName upper-cases an attribute name and replaces every non-alphanumeric byte with _.
func envName(name string) string {
	b := []byte(strings.ToUpper(name))
	for i, c := range b {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			b[i] = '_'
		}
	}
	return string(b)
}

// envSafe reports whether s can be an environment value (no NUL byte).
func envSafe(s string) bool { return !strings.ContainsRune(s, 0) }

// inheritedEnv returns the part of watchbot's own environment (environ) that every worker
// inherits: all of it but TRACEPARENT, TRACESTATE and BAGGAGE. A worker's trace context is
// its message's, or none; one that whatever started watchbot left in its environment would
// otherwise reach the worker of every message without a context of its own, and mix with
// the context of a message that has a traceparent but no tracestate or baggage.
func inheritedEnv(environ []string) []string {
	return slices.DeleteFunc(slices.Clone(environ), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return name == "TRACEPARENT" || name == "TRACESTATE" || name == "BAGGAGE"
	})
}
