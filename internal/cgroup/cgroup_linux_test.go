package cgroup

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDir(t *testing.T) {
	mnt := t.TempDir()
	for _, d := range []string{"unified/user.slice/app", "nested/app"} {
		require.NoError(t, os.MkdirAll(filepath.Join(mnt, d), 0o755))
	}
	hybrid := "25 24 0:22 / " + mnt + "/cpu rw - cgroup cgroup rw,cpu\n" +
		"30 24 0:27 / " + mnt + "/unified rw,nosuid - cgroup2 cgroup2 rw\n"
	nested := "40 24 0:27 /user.slice " + mnt + "/nested rw - cgroup2 cgroup2 rw\n"
	cases := []struct {
		name, self, mountinfo, want string
	}{
		{"hybrid", "4:memory:/x\n0::/user.slice/app\n", hybrid, filepath.Join(mnt, "unified/user.slice/app")},
		{"mount root is not the hierarchy root", "0::/user.slice/app\n", nested, filepath.Join(mnt, "nested/app")},
		{"v1 only", "4:memory:/x\n", hybrid, ""},
		{"no cgroup2 mount", "0::/user.slice/app\n", "25 24 0:22 / /c rw - cgroup cgroup rw\n", ""},
		{"outside the mount", "0::/other/app\n", nested, ""},
		{"missing directory", "0::/user.slice/gone\n", hybrid, ""},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, Dir(c.self, c.mountinfo), c.name)
	}
}

func TestUnescapeMount(t *testing.T) {
	assert.Equal(t, `/mnt/with space\x`, unescapeMount(`/mnt/with\040space\134x`))
}

func TestCgroupV1Dir(t *testing.T) {
	mnt := t.TempDir()
	for _, d := range []string{"memory/app", "pids", "cpu,cpuacct/app"} {
		require.NoError(t, os.MkdirAll(filepath.Join(mnt, d), 0o755))
	}
	mountinfo := "31 30 0:28 / " + mnt + "/memory rw - cgroup cgroup rw,memory\n" +
		"38 30 0:35 / " + mnt + "/pids rw - cgroup cgroup rw,pids\n" +
		"32 30 0:29 / " + mnt + "/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n" +
		"40 30 0:37 / " + mnt + "/unified rw - cgroup2 cgroup2 rw\n"
	self := "4:memory:/app\n8:pids:/\n1:cpu,cpuacct:/app\n0::/\n"
	for c, want := range map[string]string{
		"memory":  filepath.Join(mnt, "memory/app"),
		"pids":    filepath.Join(mnt, "pids"),
		"cpu":     filepath.Join(mnt, "cpu,cpuacct/app"),
		"cpuacct": filepath.Join(mnt, "cpu,cpuacct/app"),
		"hugetlb": "",
	} {
		assert.Equal(t, want, V1Dir(self, mountinfo, c), c)
	}
	assert.Empty(t, V1Dir("0::/\n", mountinfo, "memory"), "a pure v2 host has no v1 memory hierarchy")
}

// A pool reuses a cgroup its process left empty, never one that was
// killed (the kernel would kill every later child at birth), and Close
// removes the idle ones.
func TestPoolReuse(t *testing.T) {
	root := ProbeRoot()
	if root == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("no writable cgroup v2 hierarchy with cgroup.kill")
		}
		t.Skip("no writable cgroup v2 hierarchy with cgroup.kill")
	}
	p := NewPool(root)
	var setups []string
	p.Setup = func(dir string) error { setups = append(setups, dir); return nil }
	a, err := p.Get()
	require.NoError(t, err)
	require.DirExists(t, a.Dir())
	require.NoError(t, p.Put(a))
	b, err := p.Get()
	require.NoError(t, err)
	assert.Equal(t, a.Dir(), b.Dir(), "an emptied cgroup is reused")
	require.NoError(t, b.Kill())
	require.NoError(t, p.Put(b))
	assert.NoDirExists(t, b.Dir(), "a killed cgroup is removed, not reused")
	c, err := p.Get()
	require.NoError(t, err)
	assert.NotEqual(t, b.Dir(), c.Dir())
	assert.Len(t, setups, 2, "Setup runs for fresh cgroups only")
	require.NoError(t, p.Put(c))
	require.NoError(t, p.Close())
	assert.NoDirExists(t, c.Dir(), "Close removes idle cgroups")
}
