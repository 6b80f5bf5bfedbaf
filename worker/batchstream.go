package worker

// Batches with S3 payloads: a fetched payload's body goes into its line of the batch file
// straight from its own file, escaped as a JSON string on the way, so no payload is ever held
// whole in memory.

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"time"
	"unicode/utf8"
)

// batchRest is a batch line's fields after its body, for a line whose body is streamed.
type batchRest struct {
	Subject       string            `json:"subject,omitempty"`
	Attributes    map[string]string `json:"attributes"`
	Attempt       int               `json:"attempt"`
	SentTimestamp string            `json:"sentTimestamp,omitempty"`
	GroupID       string            `json:"groupId,omitempty"`
	PayloadS3URI  string            `json:"payloadS3Uri,omitempty"`
}

// writeBatch writes a batch as the worker reads it, one JSON object per line, the bodies of
// fetched payloads streamed from their files. asArray writes the lines as the elements of one
// JSON array instead (an HTTP worker's batch).
func writeBatch(w io.Writer, msgs []Message, asArray bool) error {
	bw := bufio.NewWriterSize(w, 64*1024)
	sep := "\n"
	if asArray {
		bw.WriteString("[")
		sep = ","
	}
	for i, m := range msgs {
		if i > 0 && asArray {
			bw.WriteString(sep)
		}
		if err := writeBatchLine(bw, m); err != nil {
			return err
		}
		if !asArray {
			bw.WriteString(sep)
		}
	}
	if asArray {
		bw.WriteString("]")
	}
	return bw.Flush()
}

func writeBatchLine(bw *bufio.Writer, m Message) error {
	if m.Payload == nil {
		line, _ := json.Marshal(batchLineOf(m)) // strings and maps of strings always encode
		_, err := bw.Write(line)
		return err
	}
	id, _ := json.Marshal(m.ID)
	bw.WriteString(`{"id":`)
	bw.Write(id)
	bw.WriteString(`,"body":"`)
	esc := &jsonEscaper{w: bw}
	if _, err := io.Copy(esc, io.NewSectionReader(m.Payload.files.stdin, 0, m.Payload.files.size)); err != nil {
		return err
	}
	esc.flush()
	bw.WriteString(`"`)
	rest := batchRest{Subject: m.Subject, Attributes: m.Attributes, Attempt: m.Attempt, GroupID: m.GroupID, PayloadS3URI: m.Payload.URI}
	if !m.SentAt.IsZero() {
		rest.SentTimestamp = m.SentAt.Format(time.RFC3339Nano)
	}
	tail, _ := json.Marshal(rest)
	bw.WriteString(",")
	_, err := bw.Write(tail[1:]) // the object's fields and its closing brace
	return err
}

// batchLineOf is m's line of a batch, its body in memory.
func batchLineOf(m Message) batchLine {
	line := batchLine{ID: m.ID, Body: m.Body, Subject: m.Subject, Attributes: m.Attributes, Attempt: m.Attempt, GroupID: m.GroupID}
	if !m.SentAt.IsZero() {
		line.SentTimestamp = m.SentAt.Format(time.RFC3339Nano)
	}
	return line
}

// jsonEscaper writes what is written to it as the inside of a JSON string, exactly as
// encoding/json writes a string with SetEscapeHTML(false): invalid UTF-8 becomes U+FFFD, and
// U+2028 and U+2029 are escaped. A rune split between two writes is held until the next.
type jsonEscaper struct {
	w       *bufio.Writer
	pending [utf8.UTFMax]byte
	held    int
}

const hexDigits = "0123456789abcdef"

func (e *jsonEscaper) Write(p []byte) (int, error) {
	n := len(p)
	// A held rune takes the bytes it needs, one at a time, until it is whole or proves
	// invalid; what it does not use is escaped in its turn.
	for e.held > 0 && len(p) > 0 {
		e.pending[e.held] = p[0]
		e.held, p = e.held+1, p[1:]
		for e.held > 0 && utf8.FullRune(e.pending[:e.held]) {
			_, size := utf8.DecodeRune(e.pending[:e.held])
			e.escape(e.pending[:size], false)
			e.held = copy(e.pending[:], e.pending[size:e.held])
		}
	}
	if e.held > 0 {
		return n, nil
	}
	e.held = copy(e.pending[:], e.escape(p, true))
	return n, nil
}

// escape writes p, and returns its last bytes, unwritten, when they may start a rune that the
// next write completes (only when more may come).
func (e *jsonEscaper) escape(p []byte, more bool) []byte {
	start := 0
	for i := 0; i < len(p); {
		b := p[i]
		if b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			e.w.Write(p[start:i])
			switch b {
			case '"', '\\':
				e.w.WriteByte('\\')
				e.w.WriteByte(b)
			case '\n':
				e.w.WriteString(`\n`)
			case '\r':
				e.w.WriteString(`\r`)
			case '\t':
				e.w.WriteString(`\t`)
			case '\b':
				e.w.WriteString(`\b`)
			case '\f':
				e.w.WriteString(`\f`)
			default:
				e.w.WriteString(`\u00`)
				e.w.WriteByte(hexDigits[b>>4])
				e.w.WriteByte(hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		if more && !utf8.FullRune(p[i:]) {
			e.w.Write(p[start:i])
			return p[i:]
		}
		r, size := utf8.DecodeRune(p[i:])
		if r == utf8.RuneError && size == 1 {
			e.w.Write(p[start:i])
			e.w.WriteString(`\ufffd`)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			e.w.Write(p[start:i])
			e.w.WriteString(`\u202`)
			e.w.WriteByte(hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	e.w.Write(p[start:])
	return nil
}

// flush writes a rune still held at the end: incomplete, so invalid.
func (e *jsonEscaper) flush() {
	if e.held > 0 {
		e.escape(e.pending[:e.held], false)
		e.held = 0
	}
}

// batchFile writes a batch with fetched payloads into a file of its own for the run, open at
// its start: the message file of a command worker, the body of an HTTP worker's POST.
func (d *Dirs) batchFile(msgs []Message, asArray bool) (*jobFiles, error) {
	return d.ownFiles(func(err error) error { return err }, func(f *os.File) (int64, error) {
		if err := writeBatch(f, msgs, asArray); err != nil {
			return 0, err
		}
		return f.Seek(0, io.SeekCurrent)
	})
}
