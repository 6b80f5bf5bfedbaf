package layout

import (
	"go/build"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/watchbot/watchbot"

// root is the module's directory, two levels up from this package.
func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("module root: %v", err)
	}
	return dir
}

// imports returns the module packages that pkg imports in its non-test files built for
// Linux, as `go list -deps` counts them.
func imports(t *testing.T, dir, pkg string) []string {
	t.Helper()
	ctx := build.Default
	ctx.GOOS = "linux"
	entries, err := os.ReadDir(filepath.Join(dir, strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")))
	if err != nil {
		t.Fatalf("%s: %v", pkg, err)
	}
	var out []string
	fset := token.NewFileSet()
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		path := filepath.Join(dir, strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/"), name)
		if ok, err := ctx.MatchFile(filepath.Dir(path), name); err != nil || !ok {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range f.Imports {
			p, _ := strconv.Unquote(s.Path.Value)
			if (p == module || strings.HasPrefix(p, module+"/")) && !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out
}

// deps returns every module package pkg depends on, itself included.
func deps(t *testing.T, dir, pkg string) []string {
	seen := []string{pkg}
	for i := 0; i < len(seen); i++ {
		for _, p := range imports(t, dir, seen[i]) {
			if !slices.Contains(seen, p) {
				seen = append(seen, p)
			}
		}
	}
	return seen
}

func TestImportsPointOneWay(t *testing.T) {
	dir := root(t)
	tests := []struct {
		pkg   string
		never []string
	}{
		// The template generator shares listen's rules through internal/listenspec.
		{"cloudformation", []string{"supervisor", "cmd/watchbot"}},
		// The supervisor writes the dead-letter attributes of internal/dlqattr; the
		// dead-letter tools read them.
		{"supervisor", []string{"deadletter", "cloudformation", "cmd/watchbot"}},
		{"deadletter", []string{"supervisor"}},
		{"alarms", []string{"supervisor", "cloudformation"}},
	}
	for _, tt := range tests {
		t.Run(tt.pkg, func(t *testing.T) {
			all := deps(t, dir, module+"/"+tt.pkg)
			for _, n := range tt.never {
				if slices.Contains(all, module+"/"+n) {
					t.Errorf("%s depends on %s: %v", tt.pkg, n, all)
				}
			}
		})
	}
}

// The shared packages are leaves: they import no watchbot package but what SQS allows and
// the error that names a setting.
func TestLeaves(t *testing.T) {
	dir := root(t)
	for _, leaf := range []string{"internal/listenspec", "internal/setting", "internal/dlqattr", "internal/sqsspec"} {
		for _, p := range imports(t, dir, module+"/"+leaf) {
			if p != module+"/internal/sqsspec" && p != module+"/internal/setting" {
				t.Errorf("%s imports %s", leaf, p)
			}
		}
	}
}
