package host

import (
	"context"
	"os/exec"
	"testing"

	"github.com/runbox-dev/runbox"
)

// BenchmarkConfinedTrue runs `true` through the whole Linux sandbox
// (re-executed helper, user/mount/PID/IPC/network namespaces, read-only
// root, /proc, /dev, private /tmp, Landlock, seccomp, cgroup, teardown)
// beside bubblewrap doing comparable work.
func BenchmarkConfinedTrue(b *testing.B) {
	e := newExecutor(b, WithPolicy(Policy{}))
	ctx := context.Background()
	b.Run("runbox", func(b *testing.B) {
		steady(b, func(b *testing.B) {
			res, err := e.Run(ctx, runbox.Command{Args: []string{"true"}}, runbox.Streams{})
			if err != nil || !res.Success() {
				b.Fatal(res, err)
			}
		})
	})
	b.Run("bwrap", func(b *testing.B) {
		bwrap, err := exec.LookPath("bwrap")
		if err != nil {
			b.Skip("bwrap is not installed")
		}
		steady(b, func(b *testing.B) {
			c := exec.Command(bwrap, "--unshare-all", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "true")
			if out, err := c.CombinedOutput(); err != nil {
				b.Fatal(err, string(out))
			}
		})
	})
}
