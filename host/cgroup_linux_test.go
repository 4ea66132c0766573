package host

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCgroupDir(t *testing.T) {
	mnt := t.TempDir()
	for _, d := range []string{"unified/user.slice/app", "nested/app"} {
		if err := os.MkdirAll(filepath.Join(mnt, d), 0o755); err != nil {
			t.Fatal(err)
		}
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
		if got := cgroupDir(c.self, c.mountinfo); got != c.want {
			t.Errorf("%s: got %q want %q", c.name, got, c.want)
		}
	}
}

func TestUnescapeMount(t *testing.T) {
	if got := unescapeMount(`/mnt/with\040space\134x`); got != `/mnt/with space\x` {
		t.Fatalf("got %q", got)
	}
}

func TestCgroupV1Dir(t *testing.T) {
	mnt := t.TempDir()
	for _, d := range []string{"memory/app", "pids", "cpu,cpuacct/app"} {
		if err := os.MkdirAll(filepath.Join(mnt, d), 0o755); err != nil {
			t.Fatal(err)
		}
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
		if got := cgroupV1Dir(self, mountinfo, c); got != want {
			t.Errorf("%s: got %q want %q", c, got, want)
		}
	}
	if got := cgroupV1Dir("0::/\n", mountinfo, "memory"); got != "" {
		t.Errorf("a pure v2 host has no v1 memory hierarchy, got %q", got)
	}
}
