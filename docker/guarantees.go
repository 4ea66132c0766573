package docker

import (
	"context"
	"fmt"
	"slices"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/runbox-dev/runbox"
)

// Guarantees reports what the session enforces, read from the Engine's
// inspect of its container (network mode, read-only root, capabilities,
// no-new-privileges, limits, runtime, user), never from the Spec that asked
// for it. The runtime's kernel comes from the program the Engine runs for
// that runtime. docs/docker.md says what each field rests on.
func (s *Session) Guarantees(ctx context.Context) (runbox.Guarantees, error) {
	res, err := s.e.cli.ContainerInspect(ctx, s.id, client.ContainerInspectOptions{})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return runbox.Guarantees{}, fmt.Errorf("%w: container %s no longer exists", runbox.ErrSessionEnded, shortID(s.id))
		}
		return runbox.Guarantees{}, s.e.engineErr(err)
	}
	c := res.Container
	if c.HostConfig == nil || c.Config == nil {
		return runbox.Guarantees{}, fmt.Errorf("runbox/docker: the Engine's inspect of %s has no configuration", shortID(s.id))
	}
	rt, err := s.e.runtime(ctx, c.HostConfig.Runtime)
	if err != nil {
		// The runtime left the Engine's configuration since: nothing can
		// be said of its kernel.
		rt = runtimeInfo{name: c.HostConfig.Runtime}
	}
	return sessionGuarantees(c.Config, c.HostConfig, rt, s.LifetimeContainment(), s.wanted()), nil
}

// wanted is what the session's Spec asks for, against which the report's
// level is judged.
func (s *Session) wanted() runbox.Guarantees {
	return runbox.Guarantees{
		ProcessBoundary: true, WriteBoundary: true, ReadBoundary: true, EnvScrub: true,
		NetworkBoundary: s.spec.Network == runbox.NetworkNone || s.spec.Network == "",
		ReadOnlyRoot:    s.spec.Security.ReadOnlyRootfs,
		NoNewPrivileges: s.spec.Security.NoNewPrivileges,
	}
}

// sessionGuarantees derives the report from a container's configuration
// as the Engine reports it.
func sessionGuarantees(cfg *container.Config, hc *container.HostConfig, rt runtimeInfo, lifetime runbox.LifetimeContainment, want runbox.Guarantees) runbox.Guarantees {
	g := runbox.Guarantees{
		// The container has its own pid namespace unless it shares the
		// host's; privileged containers see the host's devices.
		ProcessBoundary: !hc.PidMode.IsHost() && !hc.Privileged,
		// Host paths are reachable only through the mounts the Spec named.
		WriteBoundary: !hc.Privileged,
		ReadBoundary:  !hc.Privileged,
		// Only the image's environment and the Spec's entries are set.
		EnvScrub:        true,
		NetworkBoundary: hc.NetworkMode.IsNone(),
		ReadOnlyRoot:    hc.ReadonlyRootfs,
		Kernel:          rt.kernel,
		Capabilities:    capabilities(hc.CapAdd, hc.CapDrop, hc.Privileged, rt),
		User:            cfg.User,
		Lifetime:        lifetime,
		Mechanisms:      []string{"runtime=" + rt.name},
	}
	if g.User == "" {
		g.User = "0"
	}
	if g.ProcessBoundary {
		g.Mechanisms = append(g.Mechanisms, "pid-ns")
	}
	if g.NetworkBoundary {
		g.Mechanisms = append(g.Mechanisms, "network=none")
	}
	nnp := securityOf(hc).NoNewPrivileges
	switch {
	case nnp && rt.kernel == runbox.KernelHost:
		g.NoNewPrivileges = true
		g.Mechanisms = append(g.Mechanisms, "no-new-privileges")
	case nnp:
		// Set in the runtime's configuration, but its kernel does not show
		// it (gVisor has no NoNewPrivs in /proc), so runbox cannot check it.
		g.Mechanisms = append(g.Mechanisms, "no-new-privileges-unverified")
	}
	unconfined := slices.ContainsFunc(hc.SecurityOpt, func(o string) bool { return strings.HasPrefix(o, "seccomp") && strings.HasSuffix(o, "unconfined") })
	// runsc applies the Engine's seccomp profile only with --oci-seccomp;
	// its own kernel filters what reaches the host either way.
	ociSeccomp := rt.kernel != runbox.KernelGVisor || slices.Contains(rt.args, "--oci-seccomp") || slices.Contains(rt.args, "--oci-seccomp=true")
	if !unconfined && ociSeccomp {
		g.Mechanisms = append(g.Mechanisms, "seccomp")
	}
	pids := hc.PidsLimit != nil && *hc.PidsLimit > 0
	if hc.Memory > 0 {
		g.Mechanisms = append(g.Mechanisms, "cgroup-memory")
	}
	if pids {
		g.Mechanisms = append(g.Mechanisms, "cgroup-pids")
	}
	// Under gVisor the pids limit counts the sandbox's own host threads,
	// not the processes in it, so it bounds nothing the code under test
	// controls.
	g.ResourceLimits = hc.Memory > 0 && pids && rt.kernel == runbox.KernelHost
	g.Level = runbox.GuaranteeLevelFull
	if len(g.Missing(want)) > 0 {
		g.Level = runbox.GuaranteeLevelDegraded
	}
	return g
}
