package layout

import (
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
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
		// The worker kinds sit below the supervisor, which drives them through worker.Kind.
		{"worker", []string{"supervisor", "cloudformation", "cmd/watchbot"}},
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

// testTools is where the test tools live: fakes, proxies, simulations, the environment tests
// run in. They may import the product; the product never imports them.
const testTools = module + "/internal/testing"

// under reports whether pkg is tree or inside it.
func under(pkg, tree string) bool { return pkg == tree || strings.HasPrefix(pkg, tree+"/") }

// packages returns the import path of every directory of the module that holds Go files, as
// `go list ./...` finds them: testdata, node_modules and directories starting with . or _
// are left out.
func packages(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != dir && (name == "testdata" || name == "node_modules" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
			return filepath.SkipDir
		}
		if gos, _ := filepath.Glob(filepath.Join(path, "*.go")); len(gos) > 0 {
			rel, err := filepath.Rel(dir, path)
			if err != nil {
				return err
			}
			out = append(out, module+"/"+filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// declares reports whether pkg's non-test files declare anything: a package of a doc comment
// and tests alone declares nothing.
func declares(t *testing.T, dir, pkg string) bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, strings.TrimPrefix(pkg, module+"/"), "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		if len(f.Decls) > 0 {
			return true
		}
	}
	return false
}

// The product never imports a test tool, so that no fake or proxy can reach the binary:
// only tests, and the tools themselves, import internal/testing.
func TestProductImportsNoTestTools(t *testing.T) {
	dir := root(t)
	pkgs := packages(t, dir)
	if !slices.Contains(pkgs, module+"/supervisor") || !slices.Contains(pkgs, testTools+"/fakesqs") {
		t.Fatalf("the walk missed the module's packages: %v", pkgs)
	}
	for _, pkg := range pkgs {
		if under(pkg, testTools) {
			continue
		}
		for _, p := range imports(t, dir, pkg) {
			if under(p, testTools) {
				t.Errorf("%s imports the test tool %s: move what it needs out of internal/testing", pkg, p)
			}
		}
	}
}

// A package under internal/ but outside internal/testing is a product helper, and some
// product package imports it: a helper that only tests use belongs in internal/testing. A
// package of tests alone (this one) holds no helper.
func TestInternalHoldsProductHelpers(t *testing.T) {
	dir := root(t)
	pkgs := packages(t, dir)
	used := map[string]bool{}
	for _, pkg := range pkgs {
		if under(pkg, testTools) {
			continue
		}
		for _, p := range imports(t, dir, pkg) {
			if p != pkg {
				used[p] = true
			}
		}
	}
	for _, pkg := range pkgs {
		if !under(pkg, module+"/internal") || under(pkg, testTools) || !declares(t, dir, pkg) {
			continue
		}
		if !used[pkg] {
			t.Errorf("%s is under internal/ but no product package imports it: a test tool belongs in internal/testing", pkg)
		}
	}
}
