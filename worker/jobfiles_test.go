package worker

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// newFilesDirs is a work directory in a test's temporary directory.
func newFilesDirs(t *testing.T) *Dirs {
	t.Helper()
	d, err := OpenDirs(t.TempDir(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Remove)
	return d
}

// stdinOf reads what the worker would read on stdin.
func stdinOf(t *testing.T, f *jobFiles) string {
	t.Helper()
	b, err := io.ReadAll(f.stdin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.stdin.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A slot's files serve one job after another: the message file holds each job's body and no
// more, a result file is looked for per job and removed once read, and a slot in use is never
// handed out twice.
func TestJobFilesReuse(t *testing.T) {
	r := newFilesDirs(t)
	first, err := r.writeJobFiles("a longer body than the next")
	if err != nil {
		t.Fatal(err)
	}
	second, err := r.writeJobFiles("other")
	if err != nil {
		t.Fatal(err)
	}
	if first.message == second.message || first.result == second.result {
		t.Fatalf("two jobs at a time share files: %s, %s", first.message, second.message)
	}
	if err := os.WriteFile(first.result, []byte(`{"action":"ack"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	d, found, err := readDirective(first.result)
	if err != nil || !found || d.Action != "ack" {
		t.Fatalf("directive %+v, found %v, err %v", d, found, err)
	}
	first.noResult = !found
	first.remove()
	if _, err := os.Stat(first.result); !os.IsNotExist(err) {
		t.Fatalf("result file left behind: %v", err)
	}

	again, err := r.writeJobFiles("short")
	if err != nil {
		t.Fatal(err)
	}
	if again.message != first.message || again.result != first.result {
		t.Fatalf("slot not reused: %s after %s", again.message, first.message)
	}
	if got := stdinOf(t, again); got != "short" {
		t.Fatalf("stdin = %q, want %q", got, "short")
	}
	if got, _ := os.ReadFile(again.message); string(got) != "short" {
		t.Fatalf("message file = %q, want %q", got, "short")
	}
	if _, found, _ := readDirective(again.result); found {
		t.Fatal("the slot's last result file is seen by its next job")
	}
	again.noResult = true
	again.remove()
	second.remove()
}

// A worker may remove its message file, or put something else in its place: the slot's next
// job gets a plain file of its own with its body, and nothing outside the work directory is
// written through a link.
func TestJobFilesReplaced(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "outside")
	tests := []struct {
		name    string
		replace func(path string) error
	}{
		{"removed", os.Remove},
		{"symbolic link", func(p string) error {
			os.Remove(p)
			return os.Symlink(outside, p)
		}},
		{"hard link", func(p string) error {
			os.Remove(p)
			return os.Link(outside, p)
		}},
		{"directory", func(p string) error {
			os.Remove(p)
			if err := os.Mkdir(p, 0o700); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(p, "x"), nil, 0o600)
		}},
		{"readable by others", func(p string) error { return os.Chmod(p, 0o644) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := os.WriteFile(outside, []byte("keep me"), 0o600); err != nil {
				t.Fatal(err)
			}
			r := newFilesDirs(t)
			f, err := r.writeJobFiles("first")
			if err != nil {
				t.Fatal(err)
			}
			f.noResult = true
			f.remove()
			if err := tt.replace(f.message); err != nil {
				t.Fatal(err)
			}
			g, err := r.writeJobFiles("second")
			if err != nil {
				t.Fatal(err)
			}
			defer g.remove()
			if g.message != f.message {
				t.Fatalf("slot not reused: %s after %s", g.message, f.message)
			}
			if got := stdinOf(t, g); got != "second" {
				t.Fatalf("stdin = %q", got)
			}
			st, err := os.Lstat(g.message)
			if err != nil || !st.Mode().IsRegular() || st.Mode().Perm() != 0o600 {
				t.Fatalf("message file %v, %v", st, err)
			}
			if got, _ := os.ReadFile(outside); string(got) != "keep me" {
				t.Fatalf("a file outside the work directory was written: %q", got)
			}
		})
	}
}

// A large body does not stay in memory once its job is over; a small one is written over.
func TestJobFilesLargeBodyEmptied(t *testing.T) {
	r := newFilesDirs(t)
	for _, body := range []string{string(make([]byte, keptBody+1)), "small"} {
		f, err := r.writeJobFiles(body)
		if err != nil {
			t.Fatal(err)
		}
		f.noResult = true
		f.remove()
		st, err := os.Stat(f.message)
		if err != nil {
			t.Fatal(err)
		}
		want := int64(len(body))
		if len(body) > keptBody {
			want = 0
		}
		if st.Size() != want {
			t.Fatalf("after a %d-byte body the file holds %d bytes, want %d", len(body), st.Size(), want)
		}
	}
}

// A slot whose result file cannot be removed is not used again.
func TestJobFilesStuckResult(t *testing.T) {
	r := newFilesDirs(t)
	f, err := r.writeJobFiles("x")
	if err != nil {
		t.Fatal(err)
	}
	// A non-empty directory in the result file's place cannot be removed by os.Remove.
	if err := os.MkdirAll(filepath.Join(f.result, "d"), 0o700); err != nil {
		t.Fatal(err)
	}
	f.remove()
	g, err := r.writeJobFiles("y")
	if err != nil {
		t.Fatal(err)
	}
	defer g.remove()
	if g.result == f.result {
		t.Fatal("a slot whose result file stayed was used again")
	}
}
