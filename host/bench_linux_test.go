package host

import (
	"context"
	"os/exec"
	"testing"

	"github.com/runbox-dev/runbox"
)

// BenchmarkConfinedTrue runs `true` through the whole Linux sandbox
// (stage-2 helper, user/mount/PID/IPC/network namespaces, read-only root,
// /proc, /dev, private /tmp, Landlock, seccomp, cgroup, teardown) beside
// bubblewrap doing comparable work. "runbox" uses the small dedicated
// helper (cmd/runbox-sandbox, host.WithHelper); "selfexec" re-executes
// this test binary, whose start-up (package initialisation of everything
// it links) is part of the cost.
func BenchmarkConfinedTrue(b *testing.B) {
	helper := buildHelper(b)
	ctx := context.Background()
	confined := func(e *Executor) func(b *testing.B) {
		return func(b *testing.B) {
			steady(b, func(b *testing.B) {
				res, err := e.Run(ctx, runbox.Command{Args: []string{"true"}}, runbox.Streams{})
				if err != nil || !res.Success() {
					b.Fatal(res, err)
				}
			})
		}
	}
	b.Run("runbox", confined(newExecutor(b, WithPolicy(Policy{}), WithHelper(helper))))
	b.Run("selfexec", confined(newExecutor(b, WithPolicy(Policy{}))))
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
