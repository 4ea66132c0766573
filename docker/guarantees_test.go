package docker

import (
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/system"
	"github.com/stretchr/testify/assert"

	"github.com/runbox-dev/runbox"
)

func TestContainerConfigHardening(t *testing.T) {
	spec := runbox.Spec{Image: "img", Runtime: "runsc", Security: runbox.Security{
		CapDrop: []string{"ALL"}, CapAdd: []string{"CHOWN"}, NoNewPrivileges: true, ReadOnlyRootfs: true,
		Tmpfs: []runbox.Tmpfs{{Target: "/tmp/", Options: "size=1m"}, {Target: "/run"}},
	}}
	_, hc := containerConfig(spec, "me/1", time.Now())
	assert.Equal(t, "runsc", hc.Runtime)
	assert.Equal(t, []string{"ALL"}, []string(hc.CapDrop))
	assert.Equal(t, []string{"CHOWN"}, []string(hc.CapAdd))
	assert.Equal(t, []string{"no-new-privileges"}, hc.SecurityOpt)
	assert.True(t, hc.ReadonlyRootfs)
	assert.Equal(t, map[string]string{"/tmp": "size=1m", "/run": ""}, hc.Tmpfs)

	// The zero Security is the Engine's defaults: nothing is added.
	_, hc = containerConfig(runbox.Spec{Image: "img"}, "me/1", time.Now())
	assert.Empty(t, hc.Runtime)
	assert.Nil(t, hc.CapDrop)
	assert.Nil(t, hc.CapAdd)
	assert.Nil(t, hc.SecurityOpt)
	assert.False(t, hc.ReadonlyRootfs)
	assert.Nil(t, hc.Tmpfs)
}

func TestKernelOf(t *testing.T) {
	assert.Equal(t, runbox.KernelGVisor, kernelOf("runsc", system.Runtime{Path: "/usr/bin/runsc"}))
	assert.Equal(t, runbox.KernelGVisor, kernelOf("gvisor", system.Runtime{Path: "/opt/bin/runsc"}))
	assert.Equal(t, runbox.KernelHost, kernelOf("runc", system.Runtime{Path: "runc"}))
	assert.Equal(t, runbox.KernelHost, kernelOf("crun", system.Runtime{Path: "/usr/bin/crun"}))
	assert.Equal(t, runbox.KernelHost, kernelOf("io.containerd.runc.v2", system.Runtime{Type: "io.containerd.runc.v2"}))
	assert.Equal(t, "", kernelOf("kata", system.Runtime{Path: "/usr/bin/kata-runtime"}), "an unknown runtime's kernel is not guessed")
}

func TestCapabilities(t *testing.T) {
	runc := runtimeInfo{name: "runc", kernel: runbox.KernelHost}
	assert.Equal(t, defaultCapabilities, capabilities(nil, nil, false, runc))
	assert.Equal(t, []string{"CHOWN", "KILL"}, capabilities([]string{"cap_chown", "KILL"}, []string{"ALL"}, false, runc))
	assert.Equal(t, []string{}, capabilities(nil, []string{"all"}, false, runc))
	assert.NotContains(t, capabilities(nil, []string{"CAP_NET_RAW", "MKNOD"}, false, runc), "MKNOD")
	gvisor := runtimeInfo{name: "runsc", kernel: runbox.KernelGVisor, args: []string{"--network=none"}}
	assert.NotContains(t, capabilities(nil, nil, false, gvisor), "NET_RAW", "runsc withholds NET_RAW without --net-raw")
	gvisor.args = append(gvisor.args, "--net-raw")
	assert.Contains(t, capabilities(nil, nil, false, gvisor), "NET_RAW")
	assert.Equal(t, []string{"ALL"}, capabilities(nil, nil, true, runc))
}

func TestSessionGuarantees(t *testing.T) {
	pids := int64(64)
	hc := &container.HostConfig{NetworkMode: "none", ReadonlyRootfs: true, SecurityOpt: []string{"no-new-privileges"},
		CapDrop: []string{"ALL"}, Resources: container.Resources{Memory: 1 << 26, PidsLimit: &pids}}
	want := runbox.Guarantees{ProcessBoundary: true, WriteBoundary: true, ReadBoundary: true, EnvScrub: true,
		NetworkBoundary: true, ReadOnlyRoot: true, NoNewPrivileges: true}
	runc := runtimeInfo{name: "runc", kernel: runbox.KernelHost}
	g := sessionGuarantees(&container.Config{User: "1000"}, hc, runc, runbox.LifetimeContainmentBestEffort, want)
	assert.Equal(t, runbox.GuaranteeLevelFull, g.Level, g.Missing(want))
	assert.True(t, g.NetworkBoundary && g.ReadOnlyRoot && g.NoNewPrivileges && g.ResourceLimits && g.ProcessBoundary)
	assert.Equal(t, runbox.KernelHost, g.Kernel)
	assert.Equal(t, []string{}, g.Capabilities)
	assert.Equal(t, "1000", g.User)
	assert.Equal(t, runbox.LifetimeContainmentBestEffort, g.Lifetime)

	// gVisor: no-new-privileges cannot be checked, the pids limit bounds
	// the sandbox rather than its processes.
	gv := runtimeInfo{name: "runsc", kernel: runbox.KernelGVisor}
	g = sessionGuarantees(&container.Config{}, hc, gv, runbox.LifetimeContainmentBestEffort, want)
	assert.False(t, g.NoNewPrivileges)
	assert.False(t, g.ResourceLimits)
	assert.Equal(t, runbox.KernelGVisor, g.Kernel)
	assert.Equal(t, "0", g.User, "the Engine's empty user is root")
	assert.Equal(t, runbox.GuaranteeLevelDegraded, g.Level)
	assert.Contains(t, g.Mechanisms, "no-new-privileges-unverified")
	assert.NotContains(t, g.Mechanisms, "seccomp", "runsc ignores the Engine's profile without --oci-seccomp")

	// The Engine's defaults: a bridge network is no boundary, and nothing
	// is hardened.
	g = sessionGuarantees(&container.Config{}, &container.HostConfig{NetworkMode: "bridge"}, runc, runbox.LifetimeContainmentUnspecified,
		runbox.Guarantees{ProcessBoundary: true, WriteBoundary: true, ReadBoundary: true, EnvScrub: true})
	assert.False(t, g.NetworkBoundary || g.ReadOnlyRoot || g.NoNewPrivileges || g.ResourceLimits)
	assert.Equal(t, defaultCapabilities, g.Capabilities)
	assert.Equal(t, runbox.GuaranteeLevelFull, g.Level)
}
