package host

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
)

// limited is a confined executor with res; the host must enforce them.
func limited(t *testing.T, res runbox.Resources) *Executor {
	t.Helper()
	w, _ := sandboxDirs(t)
	e := confined(t, Policy{WritableRoots: []string{w}, Resources: res, Require: runbox.Guarantees{ResourceLimits: true}})
	g := e.Guarantees()
	require.True(t, g.ResourceLimits, "%+v", g)
	require.Equal(t, runbox.GuaranteeLevelFull, g.Level)
	return e
}

// startLimited starts argv (a script for /bin/sh when it is one string)
// in e and returns the process.
func startLimited(t *testing.T, e *Executor, argv ...string) *Process {
	t.Helper()
	o := ProcessOptions{Args: argv}
	if len(argv) == 1 {
		o = ProcessOptions{Command: argv[0]}
	}
	pp, err := e.PrepareProcess(testCtx(t), o)
	require.NoError(t, err)
	p, err := pp.Start(testCtx(t))
	require.NoError(t, err)
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

func TestResourceLimitsReported(t *testing.T) {
	e := limited(t, runbox.Resources{MemoryBytes: 64 << 20, Pids: 32, CPUs: 0.5})
	g := e.Guarantees()
	for _, c := range []string{"memory", "pids", "cpu"} {
		assert.True(t, strings.Contains(strings.Join(g.Mechanisms, " "), "-"+c), "no mechanism for %s in %v", c, g.Mechanisms)
	}
	out, code := sh(t, e, "", "echo fine")
	assert.Equal(t, 0, code)
	assert.Equal(t, "fine\n", out)
}

func TestMemoryHogIsKilled(t *testing.T) {
	e := limited(t, runbox.Resources{MemoryBytes: 64 << 20})
	// dd fills (and so touches) a buffer of four times the limit.
	p := startLimited(t, e, "dd", "if=/dev/zero", "of=/dev/null", "bs=256M", "count=1")
	go func() { _, _ = io.Copy(io.Discard, p.Stdout()) }()
	go func() { _, _ = io.Copy(io.Discard, p.Stderr()) }()
	res, err := p.Wait(testCtx(t))
	require.NoError(t, err)
	assert.Equal(t, runbox.Result{ExitCode: 137, Signal: "SIGKILL"}, res)
	assert.Equal(t, []string{"memory"}, p.LimitsHit())

	// Positive control: the same command fits under a limit it does not
	// pass, and the executor is still fine after the kill.
	roomy := limited(t, runbox.Resources{MemoryBytes: 512 << 20})
	out, code := sh(t, roomy, "", "dd if=/dev/zero of=/dev/null bs=256M count=1 2>/dev/null && echo done")
	assert.Equal(t, 0, code)
	assert.Equal(t, "done\n", out)
	out, code = sh(t, e, "", "echo after")
	assert.Equal(t, 0, code)
	assert.Equal(t, "after\n", out)
}

func TestForkBombIsContained(t *testing.T) {
	const limit = 32
	e := limited(t, runbox.Resources{Pids: limit})
	// The bomb forks without end; the leader waits, with a builtin (it
	// could not fork either), until the test has seen the limit refuse a
	// fork, and leaves, which ends the namespace and the bomb with it.
	p := startLimited(t, e, `bomb() { bomb | bomb & }; bomb; echo ready; read x; exit 0`)
	go func() { _, _ = io.Copy(io.Discard, p.Stderr()) }()
	buf := make([]byte, 6)
	_, err := io.ReadFull(p.Stdout(), buf)
	require.NoError(t, err)
	dir := limitDir(t, p, "pids.max")
	deadline := time.Now().Add(time.Minute)
	for readCounter(t, dir, "pids.events", "max") == 0 {
		require.True(t, time.Now().Before(deadline), "the bomb never reached the limit, so it proved nothing")
		time.Sleep(10 * time.Millisecond)
	}
	peak := readCounter(t, dir, "pids.peak", "")
	allowance := int64(0)
	if p.p.sys.groups == nil {
		allowance = initTaskAllowance // cgroup v2: the helper shares the group
	}
	assert.LessOrEqual(t, peak, int64(limit)+allowance, "tasks at once")
	assert.GreaterOrEqual(t, peak, int64(limit), "the bomb never reached the limit, so it proved nothing")
	require.NoError(t, p.Stdin().Close())
	res, err := p.Wait(testCtx(t))
	require.NoError(t, err)
	assert.True(t, res.Success(), "%v", res)
	assert.Equal(t, []string{"pids"}, p.LimitsHit())

	// The caller and the executor are fine afterwards.
	out, code := sh(t, e, "", "echo after")
	assert.Equal(t, 0, code)
	assert.Equal(t, "after\n", out)
}

// limitDir returns the directory of p's limit group that has file.
func limitDir(t *testing.T, p *Process, file string) string {
	t.Helper()
	ts := p.p.sys
	dirs := []string{}
	if ts.groups != nil {
		dirs = ts.groups.dirs
	} else if ts.cg != nil {
		dirs = []string{ts.cg.Dir()}
	}
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, file)); err == nil {
			return d
		}
	}
	require.Fail(t, "no limit group", "with %s", file)
	return ""
}

// readCounter reads a number from dir/file: the whole file, or the value
// after key on its line.
func readCounter(t *testing.T, dir, file, key string) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, file))
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key); ok && (key == "" || strings.HasPrefix(v, " ")) {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			require.NoError(t, err, "%s/%s: %q", dir, file, b)
			return n
		}
	}
	require.Fail(t, "key missing", "%s/%s has no %q: %q", dir, file, key, b)
	return 0
}

func TestCPULimitThrottles(t *testing.T) {
	e := limited(t, runbox.Resources{CPUs: 0.1})
	// A busy loop well past one period's quota, then wait for stdin so
	// that the group's statistics can be read while it exists.
	p := startLimited(t, e, `i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; echo busy; read x; exit 0`)
	go func() { _, _ = io.Copy(io.Discard, p.Stderr()) }()
	buf := make([]byte, 5)
	_, err := io.ReadFull(p.Stdout(), buf)
	require.NoError(t, err)
	dir := limitDir(t, p, "cpu.stat")
	assert.Positive(t, readCounter(t, dir, "cpu.stat", "nr_throttled"), "the busy loop was never throttled")
	require.NoError(t, p.Stdin().Close())
	res, err := p.Wait(testCtx(t))
	require.NoError(t, err)
	assert.True(t, res.Success(), "%v", res)
}

func TestResourceLimitsUnavailable(t *testing.T) {
	// A host without delegation: no cgroup v2 for the executor and no v1
	// hierarchy for the test.
	empty := filepath.Join(t.TempDir(), "cgroup")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	old := procSelfCgroup
	procSelfCgroup = empty
	defer func() { procSelfCgroup = old }()

	w, _ := sandboxDirs(t)
	res := runbox.Resources{MemoryBytes: 64 << 20, Pids: 32}
	e := confined(t, Policy{WritableRoots: []string{w}, Resources: res}, WithoutCgroup())
	g := e.Guarantees()
	assert.False(t, g.ResourceLimits, "nothing enforces the limits")
	assert.Equal(t, runbox.GuaranteeLevelDegraded, g.Level, "limits asked for and not enforced")
	out, code := sh(t, e, "", "echo runs")
	assert.Equal(t, 0, code)
	assert.Equal(t, "runs\n", out)

	_, err := New(WithPolicy(Policy{WritableRoots: []string{w}, Resources: res, Require: runbox.Guarantees{ResourceLimits: true}}), WithoutCgroup())
	assert.ErrorIs(t, err, ErrConfinementUnavailable)
	assert.ErrorContains(t, err, "resource limits")

	_, err = New(WithPolicy(Policy{Unconfined: true, Resources: res}))
	assert.ErrorIs(t, err, runbox.ErrInvalidCommand)
	_, err = New(WithPolicy(Policy{Resources: runbox.Resources{Pids: -1}}))
	assert.ErrorIs(t, err, runbox.ErrInvalidCommand)
}
