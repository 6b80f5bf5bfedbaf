package testenv

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// RequireRoot skips tb unless it runs as root, or fails it under CI=true (CI runs as root), for
// tests that make PID namespaces, mounts and users as a container runtime does. what names the
// test's need in the message.
func RequireRoot(tb testing.TB, what string) {
	tb.Helper()
	var err error
	if os.Geteuid() != 0 {
		err = errors.New("not running as root")
	} else if _, lookErr := exec.LookPath("unshare"); lookErr != nil {
		err = lookErr
	}
	Require(tb, what+" needs root and unshare(1) (util-linux)", err)
}

// AsPID1 returns the command that runs name with args as PID 1 of a new PID namespace, with
// /proc mounted for that namespace, as a container runtime starts an entrypoint. The returned
// command is unshare(1), which stays outside the namespace and waits for it; NamespaceInit
// finds the process inside. Killing unshare kills that PID 1, and with it the namespace (so a
// test's clean-up leaves nothing behind). Call RequireRoot first.
func AsPID1(name string, args ...string) *exec.Cmd {
	return exec.Command("unshare", append([]string{"--pid", "--fork", "--kill-child", "--mount-proc", name}, args...)...)
}

// NamespaceInit returns the pid, as this process sees it, of PID 1 of the namespace that the
// unshare(1) process pid made: unshare's only child. It fails tb when there is none after limit.
func NamespaceInit(tb testing.TB, pid int, limit time.Duration) int {
	tb.Helper()
	var init int
	Eventually(tb, "the namespace's PID 1", limit, func() bool {
		children := ProcTree()[pid]
		if len(children) == 1 {
			init = children[0].PID
		}
		return init != 0
	})
	return init
}

// Proc is a process as /proc shows it.
type Proc struct {
	PID, PPID int
	// State is the one-letter state of /proc/PID/stat: R, S, D, Z...
	State string
}

// ProcTree reads /proc and returns every process, keyed by its parent's pid. Processes that
// end while it reads are left out.
func ProcTree() map[int][]Proc {
	tree := map[int][]Proc{}
	for _, p := range procs("/proc") {
		tree[p.PPID] = append(tree[p.PPID], p)
	}
	return tree
}

// procs reads every process of the proc file system mounted at dir. Processes that end while
// it reads are left out.
func procs(dir string) []Proc {
	entries, _ := os.ReadDir(dir)
	var all []Proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(dir + "/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// "pid (comm) state ppid ...": comm may hold spaces and parentheses.
		s := string(data)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || i+2 >= len(s) {
			continue
		}
		fields := strings.Fields(s[i+2:])
		if len(fields) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(fields[1])
		all = append(all, Proc{PID: pid, PPID: ppid, State: fields[0]})
	}
	return all
}

// Zombies returns the descendants of root (root excluded) that have exited and not been waited
// for: those in state Z.
func Zombies(root int) []Proc {
	tree := ProcTree()
	var zombies []Proc
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range tree[pid] {
			if c.State == "Z" {
				zombies = append(zombies, c)
			}
			queue = append(queue, c.PID)
		}
	}
	return zombies
}

// NamespaceZombies returns the zombies of the PID namespace whose PID 1 is init (a pid as this
// process sees it), read from the namespace's own /proc (unshare --mount-proc mounts it), with
// the namespace's pids: an orphan handed to PID 1 has PPID 1.
func NamespaceZombies(init int) []Proc {
	var zombies []Proc
	for _, p := range procs("/proc/" + strconv.Itoa(init) + "/root/proc") {
		if p.State == "Z" {
			zombies = append(zombies, p)
		}
	}
	return zombies
}

// ZombieSampler samples, every millisecond from SampleZombies until Stop, the zombies of a PID
// namespace, and keeps the highest counts seen.
type ZombieSampler struct {
	stop chan struct{}
	done chan struct{}
	most ZombieCounts
}

// ZombieCounts are the highest numbers of zombies seen at one time, and the longest time an
// orphan's zombie was seen.
type ZombieCounts struct {
	// All counts every process of the namespace in state Z, workers that their supervisor
	// has yet to wait for among them.
	All int
	// Orphans counts the zombies whose parent is the namespace's PID 1: the orphans handed
	// to it that it has yet to reap. Orphans that die together are zombies together until
	// PID 1 is scheduled, so a loaded machine may show a few at once.
	Orphans int
	// Longest is the longest time one orphan's zombie was seen, from its first sample to its
	// last: how long PID 1 took to reap it, give or take a sample. An orphan never reaped
	// stays until the end.
	Longest time.Duration
	// Samples is the number of times the namespace's /proc was read.
	Samples int
}

// SampleZombies starts sampling the zombies of the PID namespace whose PID 1 is init (a pid as
// this process sees it; see NamespaceZombies). Stop ends it.
func SampleZombies(init int) *ZombieSampler {
	s := &ZombieSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		seen := map[int]time.Time{} // orphan zombie → when it was first seen
		for {
			now := time.Now()
			zombies := NamespaceZombies(init)
			orphans := map[int]time.Time{}
			for _, z := range zombies {
				if z.PPID != 1 {
					continue
				}
				first, ok := seen[z.PID]
				if !ok {
					first = now
				}
				orphans[z.PID] = first
				s.most.Longest = max(s.most.Longest, now.Sub(first))
			}
			seen = orphans
			s.most.All = max(s.most.All, len(zombies))
			s.most.Orphans = max(s.most.Orphans, len(orphans))
			s.most.Samples++
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// Stop ends the sampling and returns the highest counts seen. It may be called once.
func (s *ZombieSampler) Stop() ZombieCounts {
	close(s.stop)
	<-s.done
	return s.most
}
