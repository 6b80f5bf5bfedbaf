//go:build linux

package container

import (
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/watchbot/watchbot/cloudformation"
	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// setup runs as the namespace's PID 1 before it becomes watchbot, as root: it builds the
// container's file system in the new mount namespace, then drops to uid and gid 65534 and
// execs the entrypoint with only the environment given (env -i), so watchbot is PID 1.
// Its arguments: the image directory, the directory it is mounted at, the writable volume's
// path, then env's arguments (NAME=value..., the entrypoint).
// Every remount is a bind remount, which changes this namespace's mount alone, never the
// file system the host sees.
const setup = `set -eu
image=$1 bin=$2 volume=$3; shift 3
mount --make-rprivate /
# The image: watchbot and the worker, at the paths the task definition runs them from.
mount --bind "$image" "$bin"
# Docker's /dev/shm: 64 MiB.
mount -t tmpfs -o size=64m,mode=1777,nosuid,nodev shm /dev/shm
# The one writable volume, where the template mounts it.
mount -t tmpfs -o mode=1777,nosuid,nodev scratch "$volume"
# Everything else read-only: the root and every other mount.
for m in $(awk '{print $5}' /proc/self/mountinfo); do
	case $m in /proc|/proc/*|/dev/shm|"$volume") continue ;; esac
	mount -o remount,bind,ro "$m"
done
exec setpriv --reuid 65534 --regid 65534 --clear-groups env -i "$@"
`

// worker is the image's worker. Each job leaves an orphan behind, for PID 1 to reap; the body
// says what the job does.
const worker = `#!/bin/sh
( sleep 0.2 ) >/dev/null 2>&1 &
case $Message in
ok*) exit 0 ;;
retry)
	if [ "$WATCHBOT_ATTEMPT" = 1 ]; then exit 1; fi
	echo "retried on attempt $WATCHBOT_ATTEMPT"
	exit 0 ;;
reject) exit 3 ;;
"from sns") echo "sns subject=$Subject"; exit 0 ;;
probe)
	for dir in / "$(dirname "$0")" /etc /var/tmp /home; do
		if touch "$dir/.probe" 2>/dev/null; then echo "probe: $dir is writable"; exit 3; fi
	done
	touch "$TMPDIR/probe" /dev/shm/probe || exit 3
	echo "probe: uid=$(id -u) gid=$(id -g) groups=$(id -G) shm=$(df -k /dev/shm | awk 'NR==2 {print $2}')k pid1=$(tr '\0' ' ' </proc/1/cmdline)"
	exit 0 ;;
slow) echo "slow job started"; sleep 2; echo "slow job done"; exit 0 ;;
*) echo "unexpected message: $Message"; exit 3 ;;
esac
`

func TestContainer(t *testing.T) {
	testenv.RequireRoot(t, "the container smoke test")
	_, err := exec.LookPath("setpriv")
	testenv.Require(t, "the container smoke test needs setpriv(1) (util-linux)", err)
	emu := testenv.SQS(t)
	c := emu.Client()
	q := emu.NewQueue(t, testenv.QueueOptions{MaxReceiveCount: 3})

	image := t.TempDir()
	if err := os.Chmod(image, 0o755); err != nil {
		t.Fatal(err)
	}
	buildStatic(t, filepath.Join(image, "watchbot"))
	if err := os.WriteFile(filepath.Join(image, "worker"), []byte(worker), 0o755); err != nil {
		t.Fatal(err)
	}

	// The environment: what every container runtime sets (PATH), what the template's task
	// definition sets (AWS_REGION, TMPDIR), the queue as the README's docker run passes it
	// (QueueUrl), and what stands in for the task role and for SQS: static credentials, no
	// instance metadata, the emulator's endpoint.
	env := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"AWS_REGION=" + testenv.Region,
		"TMPDIR=" + cloudformation.ScratchPath,
		"QueueUrl=" + q.URL,
		"AWS_ACCESS_KEY_ID=test",
		"AWS_SECRET_ACCESS_KEY=test",
		"AWS_EC2_METADATA_DISABLED=true",
		"AWS_ENDPOINT_URL_SQS=" + emu.Endpoint,
	}
	bin := filepath.Dir(cloudformation.WatchbotPath)
	entrypoint := []string{cloudformation.WatchbotPath, "listen", "--backoff-base", "1s", "--", filepath.Join(bin, "worker")}
	cmd := testenv.AsPID1("sh", append(append([]string{"-c", setup, "container", image, bin, cloudformation.ScratchPath}, env...), entrypoint...)...)
	cmd.Env = testenv.CleanEnv(t)
	logs := &testenv.Buffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	p := testenv.Spawn(t, cmd)
	init := testenv.NamespaceInit(t, p.Cmd.Process.Pid, 10*time.Second)
	zombies := testenv.SampleZombies(init)
	testenv.Eventually(t, "watchbot to listen", 30*time.Second, func() bool { return strings.Contains(logs.String(), "watchbot listening") }, logs.String)
	checkContainer(t, init, env, entrypoint)

	bodies := []string{"ok 1", "ok 2", "retry", "reject", snsEnvelope(t, "from sns", "greetings"), "probe"}
	if _, err := testenv.Send(t.Context(), c, q.URL, bodies, nil); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "every message to be done", 60*time.Second, func() bool {
		return testenv.Depth(t, c, q.URL).Total() == 0 && testenv.Depth(t, c, q.DLQURL).Total() == 1
	}, logs.String)
	for _, want := range []string{
		"retried on attempt 2",
		"sns subject=greetings",
		"probe: uid=65534 gid=65534 groups=65534 shm=65536k pid1=" + strings.Join(entrypoint, " ") + " ",
	} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("no %q in the log:\n%s", want, logs.String())
		}
	}
	dead := testenv.Drain(t, c, q.DLQURL, 5*time.Second)
	if len(dead) != 1 || aws.ToString(dead[0].Body) != "reject" {
		t.Errorf("dead-lettered %d messages, want the one body %q", len(dead), "reject")
	} else if _, ok := dead[0].MessageAttributes["watchbot-reason"]; !ok {
		t.Errorf("the dead-lettered message has no watchbot-reason: %v", dead[0].MessageAttributes)
	}

	testenv.Eventually(t, "no zombie left", 10*time.Second, func() bool { return len(testenv.NamespaceZombies(init)) == 0 },
		func() string { return fmt.Sprint(testenv.NamespaceZombies(init)) })

	// docker stop: SIGTERM to PID 1 while a job runs. The drain lets it finish, deletes its
	// message and exits 0.
	if _, err := testenv.Send(t.Context(), c, q.URL, []string{"slow"}, nil); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the slow job", 30*time.Second, func() bool { return strings.Contains(logs.String(), "slow job started") }, logs.String)
	if err := syscall.Kill(init, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.Wait(t, 60*time.Second, logs.String); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0; logs:\n%s", code, logs.String())
	}
	if !strings.Contains(logs.String(), "slow job done") {
		t.Errorf("the running job did not finish in the drain; logs:\n%s", logs.String())
	}
	if n := testenv.Depth(t, c, q.URL).Total(); n != 0 {
		t.Errorf("%d messages left after the drain", n)
	}
	if strings.Contains(logs.String(), "panic:") {
		t.Errorf("a panic in the log:\n%s", logs.String())
	}
	// Orphans that die together are zombies together until PID 1 runs: how many at once
	// depends on the machine's load. That each is reaped at once does not.
	most := zombies.Stop()
	t.Logf("zombies at once: at most %d orphans, %d in all; an orphan's zombie lasted at most %v (%d samples of the namespace's /proc)",
		most.Orphans, most.All, most.Longest, most.Samples)
	if most.Longest >= time.Second {
		t.Errorf("an orphan's zombie lasted %v: PID 1 does not reap what is handed to it", most.Longest)
	}
}

// buildStatic builds watchbot as `make build` does, a static binary, to path.
func buildStatic(t *testing.T, path string) {
	t.Helper()
	root, err := testenv.Root()
	if err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-trimpath", "-o", path, "./cmd/watchbot")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			t.Fatal("watchbot is linked dynamically: it needs a loader the image may not have")
		}
	}
}

// checkContainer checks, from the host's /proc, that the namespace's PID 1 runs as a container
// runs it: watchbot itself, uid and gid 65534 with no other group, only env in its
// environment, and every mount read-only but /proc, /dev/shm (64 MiB) and the writable volume.
func checkContainer(t *testing.T, init int, env, entrypoint []string) {
	t.Helper()
	proc := func(name string) string {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", init, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	if got := strings.Split(strings.TrimSuffix(proc("cmdline"), "\x00"), "\x00"); !slices.Equal(got, entrypoint) {
		t.Errorf("PID 1 runs %q, want %q", got, entrypoint)
	}
	status := map[string]string{}
	for _, line := range strings.Split(proc("status"), "\n") {
		name, value, _ := strings.Cut(line, ":")
		status[name] = strings.Join(strings.Fields(value), " ")
	}
	for name, want := range map[string]string{"Uid": "65534 65534 65534 65534", "Gid": "65534 65534 65534 65534", "Groups": ""} {
		if status[name] != want {
			t.Errorf("PID 1's %s: %q, want %q", name, status[name], want)
		}
	}
	if got := strings.Split(strings.TrimSuffix(proc("environ"), "\x00"), "\x00"); !slices.Equal(got, env) {
		t.Errorf("PID 1's environment is %q, want %q", got, env)
	}
	// A mount point may hold several mounts, each hiding the one before: the last one listed
	// is the one in use.
	top := map[string]string{}
	var points []string
	for _, line := range strings.Split(strings.TrimSpace(proc("mountinfo")), "\n") {
		// "id parent major:minor root mountpoint options ... - type source super-options"
		point := strings.Fields(line)[4]
		if _, seen := top[point]; !seen {
			points = append(points, point)
		}
		top[point] = line
	}
	for _, point := range points {
		line := top[point]
		f := strings.Fields(line)
		options := strings.Split(f[5], ",")
		sep := slices.Index(f, "-")
		switch {
		case point == "/proc" || strings.HasPrefix(point, "/proc/"):
		case point == cloudformation.ScratchPath:
			if f[sep+1] != "tmpfs" || !slices.Contains(options, "rw") {
				t.Errorf("the volume %s is not a writable tmpfs: %s", point, line)
			}
		case point == "/dev/shm":
			if f[sep+1] != "tmpfs" || !slices.Contains(options, "rw") || !strings.Contains(f[sep+3], "size=65536k") {
				t.Errorf("/dev/shm is not a writable tmpfs of 64 MiB: %s", line)
			}
		case !slices.Contains(options, "ro"):
			t.Errorf("%s is writable: %s", point, line)
		}
	}
}

// snsEnvelope is body as SNS delivers it to an SQS subscription without raw message delivery.
func snsEnvelope(t *testing.T, body, subject string) string {
	t.Helper()
	b, err := json.Marshal(map[string]string{
		"Type":      "Notification",
		"MessageId": "0b6a4b3e-4c1f-5a4e-9d6b-1f2e3d4c5b6a",
		"TopicArn":  "arn:aws:sns:us-east-1:000000000000:jobs",
		"Subject":   subject,
		"Message":   body,
		"Timestamp": time.Now().UTC().Format(time.RFC3339),
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
