package worker

// The job files: the message and result files of each run, from a pool of slots in the work
// directory, or of their own in the spill directory.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
)

// jobFiles are one job's message and result files.
type jobFiles struct {
	message, result string
	// stdin is the message file, open at its start: the worker's stdin.
	stdin *os.File
	// noResult: the result file was looked for and the worker had not written it.
	noResult bool
	// kept is the pool the files' slot is from, which keeps the message file for a later
	// job; nil for files of this job alone (a spill).
	kept *slotFiles
	slot int
	size int64 // of the message file, once written
}

// slotFiles are the names of the work directory's job files, a message and a result file
// per run at a time, used by one job after another. Creating and removing a file per job
// changes the directory twice, under its lock, and costs several times more than writing a
// file that is there (docs/performance.md); and looking for a result
// file under a new name each time leaves the kernel a cached entry per job. A process a
// worker left outside its process group, which outlives the worker, could still write to a
// slot's files while a later job has them: a worker must not leave one doing so.
type slotFiles struct {
	dir  string
	mu   sync.Mutex
	free []int
	next int
}

func (m *slotFiles) take() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n := len(m.free); n > 0 {
		slot := m.free[n-1]
		m.free = m.free[:n-1]
		return slot
	}
	m.next++
	return m.next
}

func (m *slotFiles) put(slot int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.free = append(m.free, slot)
}

// slotJobFiles names a job's files: a slot's of the pool, for the job's time.
func (d *Dirs) slotJobFiles() *jobFiles {
	slot := d.slots.take()
	n := filepath.Join(d.slots.dir, strconv.Itoa(slot))
	return &jobFiles{message: n + ".message", result: n + ".result.json", kept: &d.slots, slot: slot}
}

// newJobFiles names files of a job's own in dir: unique, created by no one yet.
func (d *Dirs) newJobFiles(dir string) *jobFiles {
	n := filepath.Join(dir, strconv.FormatUint(d.seq.Add(1), 10))
	return &jobFiles{message: n + ".message", result: n + ".result.json"}
}

// writeJobFiles writes the message file, one of the pool's in the work directory, or one of
// its own in the spill directory when the work directory is full, and leaves it open at its
// start for the worker's stdin. When neither takes it, the error says so and names
// --temp-dir: the job then fails its attempt, as a worker that could not start.
func (d *Dirs) writeJobFiles(body string) (*jobFiles, error) {
	files := d.slotJobFiles()
	err := files.write(body)
	if err != nil && d.spillParent != "" {
		files.remove()
		spill, serr := d.spillDir()
		if serr != nil {
			return nil, fmt.Errorf("write message file: %w; %w (set --temp-dir to a writable volume)", err, serr)
		}
		files = d.newJobFiles(spill)
		err = files.write(body)
	}
	if err != nil {
		files.remove()
		return nil, fmt.Errorf("write message file: %w", err)
	}
	return files, nil
}

// keptBody is the most of a body a kept message file holds on to while its slot waits.
// Emptying the file frees its pages, and the next job allocates them again: that costs more
// than the whole rest of writing a small message (docs/performance.md), so a small
// body is written over instead, and only a larger one is emptied out.
const keptBody = 64 * 1024

// remove closes the job's files and removes them, but a kept message file: that goes back to
// the pool, emptied when its body is large. A slot whose result file stays goes out of use.
func (f *jobFiles) remove() {
	gone := true
	if !f.noResult {
		err := os.Remove(f.result)
		gone = err == nil || errors.Is(err, os.ErrNotExist)
	}
	if f.kept == nil {
		_ = os.Remove(f.message)
	} else if f.stdin == nil || f.size > keptBody && f.stdin.Truncate(0) != nil {
		// Not opened, or not emptied: the slot's next job makes it anew.
		_ = os.Remove(f.message)
	}
	if f.stdin != nil {
		f.stdin.Close()
	}
	if f.kept != nil && gone {
		f.kept.put(f.slot)
	}
	f.kept = nil
}
