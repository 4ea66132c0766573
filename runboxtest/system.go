package runboxtest

import (
	"math/bits"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/runbox-dev/runbox"
)

// This file checks the claims about a session's system: its kernel, a
// read-only root, no-new-privileges, its capabilities and its user. Their
// positive controls run on Backend.Peer (the same system with its
// defaults) or, for the kernel, on Control (the host).

// checkKernel compares the kernel the backend reports with the host's.
func checkKernel(t *testing.T, b Backend) {
	hostRelease := mustRun(t, b.Name+" control", b.Control, "uname -r")
	release := mustRun(t, b.Name+" backend", b.Process, "uname -r")
	switch b.Claims.Kernel {
	case runbox.KernelHost:
		if release != hostRelease {
			t.Errorf("%s: claims the host's kernel, but uname -r says %q where the host says %q", b.Name, release, hostRelease)
		}
	case runbox.KernelGVisor:
		// Positive control: the host's own release differs, so the
		// comparison can fail.
		if release == hostRelease {
			t.Errorf("%s: claims gVisor's kernel, but uname -r is the host's (%q)", b.Name, release)
		}
		if out := mustRun(t, b.Name+" backend", b.Process, "dmesg"); !strings.Contains(out, "gVisor") {
			t.Errorf("%s: claims gVisor's kernel, but its dmesg does not name gVisor: %q", b.Name, out)
		}
	default:
		t.Fatalf("%s: no probe for kernel %q", b.Name, b.Claims.Kernel)
	}
}

// needPeer fails the test when a claim needs the peer control and there
// is none.
func needPeer(t *testing.T, b Backend, claim string) {
	t.Helper()
	if b.Peer == nil {
		t.Fatalf("%s: a claimed %s needs Peer, where the same probe must succeed", b.Name, claim)
	}
}

func checkReadOnlyRoot(t *testing.T, b Backend) {
	needPeer(t, b, "read-only root")
	probe := "/runboxtest-" + token()
	mustRun(t, b.Name+" peer", b.Peer, "echo x > "+q(probe)+" && test -s "+q(probe)+" && rm "+q(probe))
	refused(t, b, "write to the root filesystem", "echo x > "+q(probe))
	refused(t, b, "create a directory in /etc", "mkdir "+q("/etc/runboxtest-"+token()))
}

func checkNoNewPrivileges(t *testing.T, b Backend) {
	needPeer(t, b, "no-new-privileges")
	// The kernel's own word for the flag, which every exec inherits; the
	// peer shows it unset, so the probe can tell the two apart.
	mustRun(t, b.Name+" peer", b.Peer, `grep -q '^NoNewPrivs:[[:space:]]*0$' /proc/self/status`)
	mustRun(t, b.Name+" backend", b.Process, `grep -q '^NoNewPrivs:[[:space:]]*1$' /proc/self/status`)
}

// capabilityNames are the Linux capabilities by number (capability.h).
var capabilityNames = []string{
	"CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
	"SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW",
	"IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT",
	"SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD",
	"LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG",
	"WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE",
}

// decodeCapabilities turns a CapBnd mask into sorted names.
func decodeCapabilities(mask uint64) []string {
	out := []string{}
	for mask != 0 {
		i := bits.TrailingZeros64(mask)
		mask &^= 1 << i
		if i < len(capabilityNames) {
			out = append(out, capabilityNames[i])
		} else {
			out = append(out, "CAP_"+strconv.Itoa(i))
		}
	}
	slices.Sort(out)
	return out
}

// boundingSet reads the capability bounding set of a probe in p.
func boundingSet(t *testing.T, name string, p runbox.Process) []string {
	t.Helper()
	out := strings.TrimSpace(mustRun(t, name, p, `sed -n 's/^CapBnd:[[:space:]]*//p' /proc/self/status`))
	mask, err := strconv.ParseUint(out, 16, 64)
	if err != nil {
		t.Fatalf("%s: CapBnd %q: %v", name, out, err)
	}
	return decodeCapabilities(mask)
}

// capabilityProbes are operations that root can do only with the
// capability, in a directory (mode 0777) that both sides can write.
var capabilityProbes = map[string]string{
	"CHOWN":        `f=$D/chown-$$; touch "$f" && chown 1:1 "$f"`,
	"DAC_OVERRIDE": `f=$D/dac-$$; touch "$f" && chmod 000 "$f" && echo x > "$f"`,
	"SYS_CHROOT":   `chroot / true`,
}

func checkCapabilities(t *testing.T, b Backend) {
	needPeer(t, b, "capability set")
	claimed := slices.Clone(b.Claims.Capabilities)
	slices.Sort(claimed)
	if got := boundingSet(t, b.Name+" backend", b.Process); !slices.Equal(got, claimed) {
		t.Errorf("%s: the kernel's bounding set is %v, the claim %v", b.Name, got, claimed)
	}
	peerCaps := boundingSet(t, b.Name+" peer", b.Peer)

	dir := path.Join(b.WritableDir, "caps-"+token())
	mustRun(t, b.Name+" control", b.Control, "mkdir "+q(dir)+" && chmod 777 "+q(dir))
	defer mustRun(t, b.Name+" control", b.Control, "rm -rf "+q(dir))
	names := make([]string, 0, len(capabilityProbes))
	for c := range capabilityProbes {
		names = append(names, c)
	}
	slices.Sort(names)
	for _, c := range names {
		script := "D=" + q(dir) + "; " + capabilityProbes[c]
		if slices.Contains(claimed, c) {
			mustRun(t, b.Name+" backend (holds "+c+")", b.Process, script)
			continue
		}
		if !slices.Contains(peerCaps, c) {
			t.Fatalf("%s: the peer lacks %s too, so its absence cannot be shown", b.Name, c)
		}
		mustRun(t, b.Name+" peer (holds "+c+")", b.Peer, script)
		refused(t, b, "an operation that needs "+c, script)
	}
}

// checkUser compares the numeric user (and group) the backend claims with
// what id reports.
func checkUser(t *testing.T, b Backend) {
	uid, gid, _ := strings.Cut(b.Claims.User, ":")
	if _, err := strconv.Atoi(uid); err != nil {
		t.Skipf("%s: user %q is a name; only numeric users are probed", b.Name, b.Claims.User)
	}
	if got := strings.TrimSpace(mustRun(t, b.Name+" backend", b.Process, "id -u")); got != uid {
		t.Errorf("%s: claims uid %s, id -u says %s", b.Name, uid, got)
	}
	if gid != "" {
		if got := strings.TrimSpace(mustRun(t, b.Name+" backend", b.Process, "id -g")); got != gid {
			t.Errorf("%s: claims gid %s, id -g says %s", b.Name, gid, got)
		}
	}
}

// checkSystem runs the checks of the system claims b makes.
func checkSystem(t *testing.T, b Backend) {
	if b.Claims.Kernel != "" {
		t.Run("Kernel", func(t *testing.T) { checkKernel(t, b) })
	}
	if b.Claims.ReadOnlyRoot {
		t.Run("ReadOnlyRoot", func(t *testing.T) { checkReadOnlyRoot(t, b) })
	}
	if b.Claims.NoNewPrivileges {
		t.Run("NoNewPrivileges", func(t *testing.T) { checkNoNewPrivileges(t, b) })
	}
	if b.Claims.Capabilities != nil {
		t.Run("Capabilities", func(t *testing.T) { checkCapabilities(t, b) })
	}
	if b.Claims.User != "" {
		t.Run("User", func(t *testing.T) { checkUser(t, b) })
	}
}
