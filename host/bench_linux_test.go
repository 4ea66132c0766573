package host

import (
	"context"
	"os/exec"
	"testing"

	"github.com/runbox-dev/runbox"
)

// bwrapTrue runs `true` under bubblewrap with comparable isolation: every
// namespace, the host's root read-only, a fresh /dev and /proc.
func bwrapTrue(b *testing.B) {
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		b.Fatal("bwrap is the baseline of this benchmark: install bubblewrap (make deps)")
	}
	steady(b, func(b *testing.B) {
		c := exec.Command(bwrap, "--unshare-all", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "true")
		if out, err := c.CombinedOutput(); err != nil {
			b.Fatal(err, string(out))
		}
	})
}

// confinedTrue runs `true` through the whole Linux sandbox of e (stage-2
// helper, user/mount/PID/IPC/network namespaces, read-only root, /proc,
// /dev, private /tmp, Landlock, seccomp, cgroup, teardown). With ready,
// the timer stops while the next prepared sandbox is built, which is the
// latency of a command when commands are not back to back.
func confinedTrue(e *Executor, ready bool) func(b *testing.B) {
	ctx := context.Background()
	return func(b *testing.B) {
		steady(b, func(b *testing.B) {
			if ready {
				b.StopTimer()
				e.sys.sandboxes.waitFilled()
				b.StartTimer()
			}
			res, err := e.Run(ctx, runbox.Command{Args: []string{"true"}}, runbox.Streams{})
			if err != nil || !res.Success() {
				b.Fatal(res, err)
			}
		})
	}
}

// BenchmarkConfinedTrue: a confined `true` with a prepared sandbox ready
// (the default executor, with the small dedicated helper,
// cmd/runbox-sandbox), beside bubblewrap.
func BenchmarkConfinedTrue(b *testing.B) {
	helper := buildHelper(b)
	b.Run("runbox", confinedTrue(newExecutor(b, WithPolicy(Policy{}), WithHelper(helper)), true))
	b.Run("bwrap", bwrapTrue)
}

// BenchmarkConfinedTrueBackToBack: the same with commands back to back, so
// that building the next sandbox competes with the command for the CPUs.
func BenchmarkConfinedTrueBackToBack(b *testing.B) {
	helper := buildHelper(b)
	b.Run("runbox", confinedTrue(newExecutor(b, WithPolicy(Policy{}), WithHelper(helper)), false))
	b.Run("bwrap", bwrapTrue)
}

// BenchmarkConfinedTrueCold: every sandbox built when its command starts
// (WithPreparedSandboxes(0)); "selfexec" re-executes this test binary as
// the helper, whose start-up (package initialisation of everything it
// links) is part of the cost.
func BenchmarkConfinedTrueCold(b *testing.B) {
	helper := buildHelper(b)
	b.Run("runbox", confinedTrue(newExecutor(b, WithPolicy(Policy{}), WithHelper(helper), WithPreparedSandboxes(0)), false))
	b.Run("selfexec", confinedTrue(newExecutor(b, WithPolicy(Policy{}), WithPreparedSandboxes(0)), false))
	b.Run("bwrap", bwrapTrue)
}
