package worker

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// Payload is a message's body fetched into a file of its own for one run (an S3 payload):
// the message file of a process's run of one message, the source of its line in a batch, or
// the body of an HTTP worker's POST. A run that takes its file as its own removes it; Remove
// removes one no run took.
type Payload struct {
	// URI names the object the body was fetched from (s3://bucket/key).
	URI   string
	files *jobFiles // message: the object, open at its start
}

// Payload makes a file for uri's object and has fill write it: in the spill directory when
// there is one (payloads are large by nature, and pages of /dev/shm count against the
// container's memory), else in the work directory.
func (d *Dirs) Payload(uri string, fill func(*os.File) (int64, error)) (*Payload, error) {
	files, err := d.ownFiles(func(err error) error { return fmt.Errorf("payload file: %w", err) }, fill)
	if err != nil {
		return nil, err
	}
	return &Payload{URI: uri, files: files}, nil
}

// ownFiles makes a message file of a run's own (payloadFiles), has fill write it and say its
// size, and leaves it open at its start. opening wraps an error in making the file.
func (d *Dirs) ownFiles(opening func(error) error, fill func(*os.File) (int64, error)) (*jobFiles, error) {
	files, err := d.payloadFiles()
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(files.message, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, opening(err)
	}
	files.stdin = f
	n, err := fill(f)
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		files.remove()
		return nil, err
	}
	files.size = n
	return files, nil
}

// Size is the payload's size in bytes.
func (p *Payload) Size() int64 { return p.files.size }

// Remove removes the payload's file, unless a run took it.
func (p *Payload) Remove() {
	if p != nil && p.files != nil {
		p.files.remove()
		p.files = nil
	}
}

// take hands the payload's file to the run, which removes it with its own.
func (p *Payload) take() *jobFiles {
	f := p.files
	p.files = nil
	return f
}

// payloadFiles names the files of a fetched payload, or of a batch written with one: in the
// spill directory when there is one, else in the work directory.
func (d *Dirs) payloadFiles() (*jobFiles, error) {
	if d == nil {
		return nil, errors.New("no directory for the payload")
	}
	dir := d.work
	if d.spillParent != "" {
		if spill, err := d.spillDir(); err == nil {
			dir = spill
		}
	}
	return d.newJobFiles(dir), nil
}

// hasPayload reports whether any message of a job has a fetched payload.
func hasPayload(msgs []Message) bool {
	for _, m := range msgs {
		if m.Payload != nil {
			return true
		}
	}
	return false
}
