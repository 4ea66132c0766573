//go:build linux

package host

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
)

// TestLimitFiles checks what is written for each cgroup version; the
// kernel's enforcement is tested end to end in limits_linux_test.go (on
// whichever version this host has).
func TestLimitFiles(t *testing.T) {
	l := &limitPlan{res: runbox.Resources{MemoryBytes: 512 << 20, Pids: 256, CPUs: 1.5}}
	assert.Equal(t, []string{"memory", "pids", "cpu"}, limitControllers(l.res))
	assert.Equal(t, [][2]string{
		{"memory.max", "536870912"}, {"memory.swap.max", "0"},
		{"pids.max", "272"}, // 256 plus the init's allowance
		{"cpu.max", "150000 100000"},
	}, l.v2Files())
	assert.Equal(t, [][2]string{{"memory.limit_in_bytes", "536870912"}, {"memory.memsw.limit_in_bytes", "536870912"}}, l.v1Files("memory"))
	assert.Equal(t, [][2]string{{"pids.max", "256"}}, l.v1Files("pids"))
	assert.Equal(t, [][2]string{{"cpu.cfs_period_us", "100000"}, {"cpu.cfs_quota_us", "150000"}}, l.v1Files("cpu"))
	assert.Equal(t, int64(1000), cpuQuota(0.001), "the kernel's minimum quota")
	assert.Empty(t, limitControllers(runbox.Resources{}))

	l.v2 = true
	assert.Equal(t, []string{"cgroup-v2-memory", "cgroup-v2-pids", "cgroup-v2-cpu"}, l.mechanisms())
	l.v2 = false
	assert.Equal(t, []string{"cgroup-v1-memory", "cgroup-v1-pids", "cgroup-v1-cpu"}, l.mechanisms())

	// The swap files are optional (no swap accounting); the limits are not.
	dir := t.TempDir()
	for _, f := range []string{"memory.max", "pids.max", "cpu.max"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), nil, 0o644))
	}
	require.NoError(t, writeLimits(dir, l.v2Files()))
	b, err := os.ReadFile(filepath.Join(dir, "cpu.max"))
	require.NoError(t, err)
	assert.Equal(t, "150000 100000", string(b))
	require.NoError(t, os.Remove(filepath.Join(dir, "pids.max")))
	assert.Error(t, writeLimits(dir, l.v2Files()), "a missing limit file is a failure")
}

func TestLimitCounters(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "memory.events"), []byte("low 0\nhigh 0\nmax 7\noom 2\noom_kill 1\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "pids.events"), []byte("max 0\n"), 0o644))
	before := limitCounters(dir)
	assert.Equal(t, map[string]int64{"memory": 1, "pids": 0}, before)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "pids.events"), []byte("max 3\n"), 0o644))
	assert.Equal(t, []string{"pids"}, hitSince(before, limitCounters(dir)), "only what grew since the start")

	v1 := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(v1, "memory.oom_control"), []byte("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"), 0o644))
	assert.Equal(t, []string{"memory"}, hitSince(nil, limitCounters(v1)))
}
