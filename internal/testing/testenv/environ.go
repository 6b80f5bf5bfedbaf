package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// userPath is the PATH of every process a test starts: the system's directories, as a user's
// shell has them.
const userPath = "/usr/local/bin:/usr/bin:/bin"

// toolDirs are the directories of go and node when they lie outside userPath, as on a machine
// with Go in /usr/local/go/bin: scripts the tests run may call them.
var toolDirs = sync.OnceValue(func() []string {
	var dirs []string
	for _, tool := range []string{"go", "node"} {
		path, err := exec.LookPath(tool)
		if err != nil {
			continue
		}
		dir := filepath.Dir(path)
		if !slices.Contains(filepath.SplitList(userPath), dir) && !slices.Contains(dirs, dir) {
			dirs = append(dirs, dir)
		}
	}
	return dirs
})

// UserEnv returns the environment of a process a test starts, built from nothing as a user's
// machine gives it: PATH (userPath, then the directories of go and node when they lie
// elsewhere), HOME=home, then vars ("NAME=value"), a later value of a name replacing an
// earlier one. Nothing of this machine's environment is inherited: it sets AWS_CA_BUNDLE,
// SSL_CERT_FILE, proxies and more that users' machines do not, and a test that passes only
// with them proves nothing about what users get. Tests call CleanEnv; UserEnv is for code
// without a test, such as the benchmark and the emulators' start.
func UserEnv(home string, vars ...string) []string {
	path := strings.Join(append([]string{userPath}, toolDirs()...), string(filepath.ListSeparator))
	env := []string{"PATH=" + path, "HOME=" + home}
	for _, kv := range vars {
		name, _, _ := strings.Cut(kv, "=")
		if i := slices.IndexFunc(env, func(e string) bool { return strings.HasPrefix(e, name+"=") }); i >= 0 {
			env[i] = kv
			continue
		}
		env = append(env, kv)
	}
	return env
}

// CleanEnv is UserEnv with HOME a new empty directory of tb's, for every process a test
// starts: the watchbot binary (Emulator.Watchbot uses it), workers, scripts. Point the AWS SDK
// at an emulator with its Env: CleanEnv(t, emu.Env()...).
func CleanEnv(tb testing.TB, vars ...string) []string {
	tb.Helper()
	return UserEnv(tb.TempDir(), vars...)
}

// ClearAWS removes every AWS_ variable of this machine from the test process's own
// environment (AWS_CA_BUNDLE among them), and points the SDK's shared config and credentials
// files at nothing, so that code a test runs in process and that loads the AWS configuration
// (awsenv.Load, the supervisor's workers, which inherit the process's environment) sees only
// what the test sets, as on a user's machine. Main calls it before m.Run.
func ClearAWS() {
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "AWS_") {
			_ = os.Unsetenv(name)
		}
	}
	_ = os.Setenv("AWS_CONFIG_FILE", os.DevNull)
	_ = os.Setenv("AWS_SHARED_CREDENTIALS_FILE", os.DevNull)
}

// ClearTracing removes every OTEL_ variable and the TRACEPARENT, TRACESTATE and BAGGAGE
// carriers from the test process's own environment, so that code a test runs in process and
// that reads them (tracing.Setup, `watchbot send`, the supervisor's workers, which inherit the
// process's environment) sees only what the test sets: a developer's shell or a CI job may
// export a collector's endpoint, a sampler, or a trace of its own, and a test must neither
// export to it nor continue it.
func ClearTracing() {
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "OTEL_") ||
			name == "TRACEPARENT" || name == "TRACESTATE" || name == "BAGGAGE" {
			_ = os.Unsetenv(name)
		}
	}
}

// Main is the TestMain of a package whose tests load the AWS configuration or the tracing
// variables in process; it calls ClearAWS and ClearTracing before m.Run:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
func Main(m *testing.M) {
	ClearAWS()
	ClearTracing()
	os.Exit(m.Run())
}
