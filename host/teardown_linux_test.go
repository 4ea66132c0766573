package host

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/internal/cgroup"
)

// treeScript starts three descendants that try to outlive the leader: a
// plain background child, one that calls setsid (leaving the process
// group), and a double-forked one whose parent exits at once. The leader
// prints every pid, then runs tail.
func treeScript(tail string) string {
	return `sleep 1000 & echo "child $!"
setsid sleep 1000 & echo "setsid $!"
( sleep 1000 & echo "double $!" )
echo "leader $$"
` + tail
}

// parsePids collects "name pid" lines.
func parsePids(t *testing.T, out string) map[string]int {
	t.Helper()
	pids := map[string]int{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 2 {
			if pid, err := strconv.Atoi(f[1]); err == nil {
				pids[f[0]] = pid
			}
		}
	}
	return pids
}

// readPids reads a treeScript's four pid lines from a running process.
func readPids(t *testing.T, r *bufio.Reader) map[string]int {
	t.Helper()
	var out strings.Builder
	for {
		line, err := r.ReadString('\n')
		out.WriteString(line)
		require.NoError(t, err, "reading pids: %v (got %q)", err, out.String())
		if pids := parsePids(t, out.String()); len(pids) == 4 {
			return pids
		}
	}
}

// procStat returns a process's state letter and session id from
// /proc/<pid>/stat; ok is false when the pid does not exist.
func procStat(pid int) (state byte, session int, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, false
	}
	// Fields after the parenthesised command name: state ppid pgrp session.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	sid, _ := strconv.Atoi(f[3])
	return f[0][0], sid, true
}

// alive reports whether pid is a running (not zombie) process. Orphans are
// reaped by init at its own pace, so a zombie counts as dead.
func alive(pid int) bool {
	state, _, ok := procStat(pid)
	return ok && state != 'Z' && state != 'X'
}

// eventually polls cond with a generous deadline. It bounds hangs only; no
// test depends on how quickly cond becomes true.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		require.False(t, time.Now().After(deadline), "timed out waiting for %s", what)
		time.Sleep(5 * time.Millisecond)
	}
}

// waitSetsid waits until the setsid descendant has left the leader's
// session, so that the test really exercises an escaped process.
func waitSetsid(t *testing.T, pids map[string]int) {
	t.Helper()
	_, leaderSID, _ := procStat(pids["leader"])
	eventually(t, "setsid to take effect", func() bool {
		_, sid, ok := procStat(pids["setsid"])
		return ok && sid != leaderSID
	})
}

// cgroupRoot is where e creates per-process cgroups ("" without any).
func cgroupRoot(e *Executor) string {
	if e.sys.pool == nil {
		return ""
	}
	return e.sys.pool.Root()
}

// ownCgroups lists the per-process cgroups this test program has now.
func ownCgroups(t *testing.T, root string) []string {
	t.Helper()
	if root == "" {
		return nil
	}
	m, err := filepath.Glob(filepath.Join(root, fmt.Sprintf("runbox-host-%d-*", os.Getpid())))
	require.NoError(t, err)
	return m
}

func requireEnforced(t *testing.T, e *Executor) {
	t.Helper()
	if e.Containment() != runbox.LifetimeContainmentEnforced {
		t.Skip("no writable cgroup v2 with cgroup.kill on this machine")
	}
}

func assertAllDead(t *testing.T, pids map[string]int) {
	t.Helper()
	for name, pid := range pids {
		if alive(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
			assert.Fail(t, "survived teardown", "%s (pid %d)", name, pid)
		}
	}
}

func TestTeardownEnforced(t *testing.T) {
	e := newExecutor(t, WithTerminateGrace(time.Hour))
	requireEnforced(t, e)
	triggers := map[string]func(t *testing.T, p *Process){
		"leader exits": func(t *testing.T, p *Process) { io.WriteString(p.Stdin(), "go\n") },
		"close":        func(t *testing.T, p *Process) { p.Close(testCtx(t)) },
		"kill":         func(t *testing.T, p *Process) { p.Signal(runbox.ProcessSignalKill) },
		"terminate":    func(t *testing.T, p *Process) { p.Signal(runbox.ProcessSignalTerminate) },
	}
	for name, trigger := range triggers {
		t.Run(name, func(t *testing.T) {
			p := start(t, e, ProcessOptions{Command: treeScript("read x")})
			got := p.LifetimeContainment()
			require.Equal(t, runbox.LifetimeContainmentEnforced, got, "containment %v", got)
			pids := readPids(t, bufio.NewReader(p.Stdout()))
			waitSetsid(t, pids)
			trigger(t, p)
			_, err := p.Wait(testCtx(t))
			require.NoError(t, err)
			assertAllDead(t, pids)
			n := p.p.escalations.Load()
			require.EqualValues(t, 0, n, "%d escalations", n)
		})
	}
}

func TestTeardownBestEffortIsHonest(t *testing.T) {
	e := newExecutor(t, WithoutCgroup())
	require.Equal(t, runbox.LifetimeContainmentBestEffort, e.Containment(), "containment %v without a cgroup", e.Containment())
	p := start(t, e, ProcessOptions{Command: treeScript("read x")})
	got := p.LifetimeContainment()
	require.Equal(t, runbox.LifetimeContainmentBestEffort, got, "containment %v", got)
	pids := readPids(t, bufio.NewReader(p.Stdout()))
	waitSetsid(t, pids)
	io.WriteString(p.Stdin(), "go\n")
	_, err := p.Wait(testCtx(t))
	require.NoError(t, err)
	// The process group is torn down (signalled: best-effort teardown does
	// not wait for the deaths)...
	for _, name := range []string{"child", "double"} {
		eventually(t, name+" to die", func() bool { return !alive(pids[name]) })
	}
	// ...but a descendant that left it survives, which is exactly why this
	// is reported as best-effort and not enforced.
	assert.True(t, alive(pids["setsid"]), "the setsid descendant died; best-effort teardown cannot reach it, so the test setup is wrong")
	syscall.Kill(pids["setsid"], syscall.SIGKILL)
}

func TestRunTearsDownDescendants(t *testing.T) {
	e := newExecutor(t)
	requireEnforced(t, e)

	t.Run("normal exit", func(t *testing.T) {
		var out bytes.Buffer
		res, err := e.Run(testCtx(t), runbox.ShellCommand(treeScript("exit 0")), runbox.Streams{Stdout: &out})
		require.NoError(t, err, "%+v %v", res, err)
		require.True(t, res.Success(), "%+v %v", res, err)
		pids := parsePids(t, out.String())
		require.Len(t, pids, 4, "output %q", out.String())
		assertAllDead(t, pids)
	})
	t.Run("RunArgv normal exit", func(t *testing.T) {
		out, code, err := e.RunArgv(testCtx(t), "", []string{"sh", "-c", treeScript("exit 5")})
		require.NoError(t, err, "%d %v", code, err)
		require.EqualValues(t, 5, code, "%d %v", code, err)
		assertAllDead(t, parsePids(t, string(out)))
	})
	t.Run("cancellation", func(t *testing.T) {
		ctx, cancel := context.WithCancel(testCtx(t))
		defer cancel()
		var out bytes.Buffer
		w := &callbackWriter{fn: func(p []byte) {
			out.Write(p)
			if len(parsePids(t, out.String())) == 4 {
				cancel()
			}
		}}
		res, err := e.Run(ctx, runbox.ShellCommand(treeScript("exec sleep 1000")), runbox.Streams{Stdout: w})
		require.ErrorIs(t, err, runbox.ErrCancelled, "%+v %v", res, err)
		require.ErrorIs(t, err, context.Canceled, "%+v %v", res, err)
		require.EqualValues(t, -1, res.ExitCode, "%+v %v", res, err)
		assertAllDead(t, parsePids(t, out.String()))
	})
	t.Run("output limit", func(t *testing.T) {
		out, code, err := e.RunArgvLimited(testCtx(t), "", []string{"sh", "-c", treeScript("exec yes")}, 64<<10)
		require.ErrorIs(t, err, runbox.ErrOutputLimit, "%d %v", code, err)
		require.EqualValues(t, -1, code, "%d %v", code, err)
		pids := parsePids(t, string(out))
		require.Len(t, pids, 4, "pids %v", pids)
		assertAllDead(t, pids)
	})
}

func TestSupervisorReapsWithoutWait(t *testing.T) {
	e := newExecutor(t)
	pp, err := e.PrepareProcess(testCtx(t), ProcessOptions{Args: []string{"true"}})
	require.NoError(t, err)
	p, err := pp.Start(testCtx(t))
	require.NoError(t, err)
	defer p.Close(context.Background())
	<-p.p.done // the supervisor, not a caller, waited
	_, _, ok := procStat(p.PID())
	require.False(t, ok, "pid %d still exists (zombie left behind)", p.PID())
	got := p.LifetimeContainment()
	require.Equal(t, e.Containment(), got, "containment %v, executor plans %v", got, e.Containment())
}

func TestCgroupsAreReusedAndReleasedByClose(t *testing.T) {
	e := newExecutor(t)
	requireEnforced(t, e)
	root := cgroupRoot(e)
	before := len(ownCgroups(t, root))
	cgroupOf := func() string {
		out, code, err := e.RunArgv(testCtx(t), "", []string{"cat", "/proc/self/cgroup"})
		require.NoError(t, err, "%d %v", code, err)
		require.EqualValues(t, 0, code, "%d %v", code, err)
		for _, l := range strings.Split(string(out), "\n") {
			if p, ok := strings.CutPrefix(l, "0::"); ok {
				return p
			}
		}
		require.Fail(t, "no cgroup v2 line", "%q", out)
		return ""
	}
	first, second := cgroupOf(), cgroupOf()
	require.Contains(t, first, "runbox-host-", "an emptied cgroup was not reused: %q then %q", first, second)
	require.Equal(t, second, first, "an emptied cgroup was not reused: %q then %q", first, second)
	require.NoError(t, e.Close())
	n := len(ownCgroups(t, root))
	require.LessOrEqual(t, n, before, "Close left %d cgroups (had %d before)", n, before)
	_, err := os.Stat(filepath.Join(root, filepath.Base(first)))
	require.ErrorIs(t, err, os.ErrNotExist, "idle cgroup %s survived Close: %v", first, err)
	// Still usable after Close, without the cache.
	third := cgroupOf()
	require.NotEqual(t, first, third, "a removed cgroup was reused")
	_, err = os.Stat(filepath.Join(root, filepath.Base(first)))
	require.ErrorIs(t, err, os.ErrNotExist, "cgroup kept after Close")
}

func TestCleanupFailureIsReported(t *testing.T) {
	e := newExecutor(t)
	requireEnforced(t, e)
	// The process creates a child cgroup inside its own, which makes the
	// final rmdir fail: teardown cannot complete and must say so.
	script := `p=$(sed -n 's/^0:://p' /proc/self/cgroup); echo "cg ${p##*/}"; mkdir "$CGROOT/${p##*/}/sub"`
	env := []string{"CGROOT=" + cgroupRoot(e)}
	cleanup := func(out string) {
		for _, line := range strings.Split(out, "\n") {
			if name, ok := strings.CutPrefix(line, "cg "); ok && name != "" {
				dir := filepath.Join(cgroupRoot(e), name)
				os.Remove(filepath.Join(dir, "sub"))
				assert.NoError(t, os.Remove(dir), "removing leftover cgroup")
			}
		}
	}

	var out bytes.Buffer
	res, err := e.Run(testCtx(t), runbox.Command{Args: []string{"sh", "-c", script}, Env: env}, runbox.Streams{Stdout: &out})
	cleanup(out.String())
	require.ErrorIs(t, err, runbox.ErrCleanup, "Run: %+v %v, want ErrCleanup", res, err)
	require.EqualValues(t, -1, res.ExitCode, "Run: %+v %v, want ErrCleanup", res, err)
	require.True(t, strings.HasPrefix(out.String(), "cg runbox-host-"), "output so far not delivered: %q", out.String())

	pp, err := e.PrepareProcess(testCtx(t), ProcessOptions{Args: []string{"sh", "-c", script}, Env: env})
	require.NoError(t, err)
	p, err := pp.Start(testCtx(t))
	require.NoError(t, err)
	outp, _ := io.ReadAll(p.Stdout())
	_, werr := p.Wait(testCtx(t))
	cerr := p.Close(testCtx(t))
	cleanup(string(outp))
	require.ErrorIs(t, werr, runbox.ErrCleanup, "Process: Wait %v, Close %v, want ErrCleanup", werr, cerr)
	require.ErrorIs(t, cerr, runbox.ErrCleanup, "Process: Wait %v, Close %v, want ErrCleanup", werr, cerr)
}

func TestChildDiesWithParent(t *testing.T) {
	// A helper copy of this test binary starts `sleep 1000` through the host
	// backend and is then killed outright: no deferred cleanup runs, so only
	// Pdeathsig can take the child down.
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), helperEnv+"=parent-death")
	stdin, err := helper.StdinPipe()
	require.NoError(t, err)
	defer stdin.Close()
	stdout, err := helper.StdoutPipe()
	require.NoError(t, err)
	helper.Stderr = os.Stderr
	require.NoError(t, helper.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		helper.Process.Kill()
		helper.Wait()
	}
	require.NoError(t, err, "helper")
	pid, _ := strconv.Atoi(strings.Fields(line)[0])
	cgPath, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	mountinfo, _ := os.ReadFile("/proc/self/mountinfo")
	leftover := cgroup.Dir(string(cgPath), string(mountinfo))

	helper.Process.Kill()
	helper.Wait()
	eventually(t, "the orphaned child to die", func() bool { return !alive(pid) })

	// The helper could not remove its cgroup; do it for it once empty.
	if strings.Contains(leftover, "runbox-host-") {
		eventually(t, "the leftover cgroup to be removable", func() bool {
			err := os.Remove(leftover)
			return err == nil || errors.Is(err, os.ErrNotExist)
		})
	}
}

func TestNewSweepsStaleCgroups(t *testing.T) {
	e := newExecutor(t)
	requireEnforced(t, e)
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	require.NoError(t, err)
	// pid_max itself is never a valid pid, so this owner is surely dead.
	dead := filepath.Join(cgroupRoot(e), "runbox-host-"+strings.TrimSpace(string(b))+"-1-0")
	live := filepath.Join(cgroupRoot(e), "runbox-host-1-1-0") // pid 1 always exists
	for _, d := range []string{dead, live} {
		require.NoError(t, os.Mkdir(d, 0o755))
	}
	defer os.Remove(dead)
	defer os.Remove(live)
	newExecutor(t)
	_, err = os.Stat(dead)
	assert.ErrorIs(t, err, os.ErrNotExist, "stale cgroup of a dead pid kept")
	_, err = os.Stat(live)
	assert.NoError(t, err, "cgroup of a live pid removed")
}

// escapeScript starts a descendant that leaves the session (and so the
// process group) while keeping stdout, and waits until it has.
const escapeScript = `setsid sleep 1000 & p=$!
while [ "$(cut -d' ' -f6 /proc/$p/stat)" != "$p" ]; do :; done
echo "setsid $p"`

func TestEscapedDescendantCannotHoldRunOpen(t *testing.T) {
	// Without a cgroup a setsid descendant may escape teardown and keep the
	// output pipe open; the wait delay bounds how long Run reads it.
	e := newExecutor(t, WithoutCgroup(), WithWaitDelay(50*time.Millisecond))
	var out bytes.Buffer
	res, err := e.Run(testCtx(t), runbox.ShellCommand(escapeScript), runbox.Streams{Stdout: &out})
	pids := parsePids(t, out.String())
	if pid := pids["setsid"]; pid > 0 {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	require.NoError(t, err, "%+v %v", res, err)
	require.True(t, res.Success(), "%+v %v", res, err)
	require.Len(t, pids, 1, "output %q", out.String())
	// The same through the output helpers.
	b, code, err := e.RunArgv(testCtx(t), "", []string{"sh", "-c", escapeScript})
	if pid := parsePids(t, string(b))["setsid"]; pid > 0 {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	require.NoError(t, err, "%d %v", code, err)
	require.EqualValues(t, 0, code, "%d %v", code, err)
}
