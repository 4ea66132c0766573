package runbox

import (
	"encoding/json"
	"fmt"

	"github.com/runbox-dev/runbox/internal/reexec"
)

// GuaranteeLevel summarizes how much of a confinement policy the operating
// system really enforces.
type GuaranteeLevel int

const (
	// GuaranteeLevelNone means nothing is confined: the process has the
	// caller's full authority.
	GuaranteeLevelNone GuaranteeLevel = iota
	// GuaranteeLevelDegraded means some boundaries are enforced and
	// others, that a full sandbox would have, are not (see the fields of
	// [Guarantees]).
	GuaranteeLevelDegraded
	// GuaranteeLevelFull means every boundary the policy asks for is
	// enforced by the kernel, and teardown is enforced.
	GuaranteeLevelFull
)

// String returns the level's name.
func (l GuaranteeLevel) String() string {
	switch l {
	case GuaranteeLevelDegraded:
		return "degraded"
	case GuaranteeLevelFull:
		return "full"
	}
	return "none"
}

// MarshalText encodes the level as its name, for JSON reports.
func (l GuaranteeLevel) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// UnmarshalText decodes a name written by MarshalText.
func (l *GuaranteeLevel) UnmarshalText(b []byte) error {
	for _, v := range []GuaranteeLevel{GuaranteeLevelNone, GuaranteeLevelDegraded, GuaranteeLevelFull} {
		if string(b) == v.String() {
			*l = v
			return nil
		}
	}
	return fmt.Errorf("runbox: unknown guarantee level %q", b)
}

// MarshalText encodes the containment level as its name, for JSON reports.
func (c LifetimeContainment) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText decodes a name written by MarshalText.
func (c *LifetimeContainment) UnmarshalText(b []byte) error {
	for _, v := range []LifetimeContainment{LifetimeContainmentUnspecified, LifetimeContainmentBestEffort, LifetimeContainmentEnforced} {
		if string(b) == v.String() {
			*c = v
			return nil
		}
	}
	return fmt.Errorf("runbox: unknown lifetime containment %q", b)
}

// Guarantees is a report of what a backend really enforces for a process,
// never a wish: a field is true only when the operating system enforces it.
type Guarantees struct {
	// ProcessBoundary: the process can neither see nor signal processes
	// outside its own tree.
	ProcessBoundary bool
	// WriteBoundary: the process can write only under its write roots.
	WriteBoundary bool
	// ReadBoundary: the process can read only its read roots (plus what it
	// needs to run); false means it can read whatever its user can.
	ReadBoundary bool
	// EnvScrub: the caller's environment does not reach the process.
	EnvScrub bool
	// NetworkBoundary: the process has no network access.
	NetworkBoundary bool
	// ResourceLimits: memory and process-count limits are enforced.
	ResourceLimits bool
	// Lifetime is the teardown guarantee for the process tree.
	Lifetime LifetimeContainment
	// Level summarizes the report against the policy that was asked for.
	Level GuaranteeLevel
	// Mechanisms names what enforces the report (for example "pid-ns" or
	// "landlock-abi-7"); it is informational.
	Mechanisms []string

	// The fields below describe a session's system; the host backend
	// leaves them unreported (zero).

	// Kernel names the kernel that serves the process's system calls:
	// KernelHost, or a user-space kernel such as KernelGVisor; "" means
	// not reported.
	Kernel string
	// ReadOnlyRoot: the root filesystem is read-only; the process writes
	// only to writable mounts and tmpfs.
	ReadOnlyRoot bool
	// NoNewPrivileges: exec cannot raise the process's privileges
	// (setuid binaries, file capabilities).
	NoNewPrivileges bool
	// Capabilities lists the Linux capabilities the process may hold (its
	// bounding set), sorted, without "CAP_". nil means not reported; an
	// empty list means none at all.
	Capabilities []string
	// User is the user the process runs as ("uid[:gid]" or a name, "0"
	// for root); "" means not reported.
	User string
}

// Kernels a report can name.
const (
	// KernelHost: the host's own kernel, shared with everything else on it.
	KernelHost = "host"
	// KernelGVisor: gVisor's user-space kernel; the host kernel sees only
	// gVisor's own, narrow use of it.
	KernelGVisor = "gvisor"
)

// Missing returns the names of the boundaries required by want that g does
// not provide, in a fixed order; empty means g covers want.
func (g Guarantees) Missing(want Guarantees) []string {
	var miss []string
	check := func(name string, w, h bool) {
		if w && !h {
			miss = append(miss, name)
		}
	}
	check("process boundary", want.ProcessBoundary, g.ProcessBoundary)
	check("write boundary", want.WriteBoundary, g.WriteBoundary)
	check("read boundary", want.ReadBoundary, g.ReadBoundary)
	check("environment scrub", want.EnvScrub, g.EnvScrub)
	check("network boundary", want.NetworkBoundary, g.NetworkBoundary)
	check("resource limits", want.ResourceLimits, g.ResourceLimits)
	check("read-only root", want.ReadOnlyRoot, g.ReadOnlyRoot)
	check("no new privileges", want.NoNewPrivileges, g.NoNewPrivileges)
	if want.Kernel != "" && want.Kernel != g.Kernel {
		miss = append(miss, "kernel "+want.Kernel)
	}
	if want.Capabilities != nil {
		allowed := make(map[string]bool, len(want.Capabilities))
		for _, c := range want.Capabilities {
			allowed[c] = true
		}
		for _, c := range g.Capabilities {
			if !allowed[c] {
				miss = append(miss, "without capability "+c)
			}
		}
		if g.Capabilities == nil {
			miss = append(miss, "capabilities reported")
		}
	}
	if want.Lifetime > g.Lifetime {
		miss = append(miss, "lifetime containment "+want.Lifetime.String())
	}
	return miss
}

// guaranteesJSON is the stable JSON shape of [Guarantees]; see
// MarshalJSON.
type guaranteesJSON struct {
	Level           GuaranteeLevel      `json:"level"`
	ProcessBoundary bool                `json:"processBoundary"`
	WriteBoundary   bool                `json:"writeBoundary"`
	ReadBoundary    bool                `json:"readBoundary"`
	EnvScrub        bool                `json:"envScrub"`
	NetworkBoundary bool                `json:"networkBoundary"`
	ResourceLimits  bool                `json:"resourceLimits"`
	Lifetime        LifetimeContainment `json:"lifetime"`
	Mechanisms      []string            `json:"mechanisms"`
	Kernel          string              `json:"kernel,omitempty"`
	ReadOnlyRoot    bool                `json:"readOnlyRoot,omitempty"`
	NoNewPrivileges bool                `json:"noNewPrivileges,omitempty"`
	Capabilities    *[]string           `json:"capabilities,omitempty"`
	User            string              `json:"user,omitempty"`
}

// MarshalJSON encodes g with lower-camel-case keys, the level and lifetime
// as names ("full", "enforced") and mechanisms as an array (never null).
// The session fields are left out while unreported; capabilities, once
// reported, is an array (empty: none). The shape is stable: keys are only
// ever added.
func (g Guarantees) MarshalJSON() ([]byte, error) {
	m := g.Mechanisms
	if m == nil {
		m = []string{}
	}
	var caps *[]string
	if g.Capabilities != nil {
		c := g.Capabilities
		caps = &c
	}
	return json.Marshal(guaranteesJSON{
		Level:           g.Level,
		ProcessBoundary: g.ProcessBoundary,
		WriteBoundary:   g.WriteBoundary,
		ReadBoundary:    g.ReadBoundary,
		EnvScrub:        g.EnvScrub,
		NetworkBoundary: g.NetworkBoundary,
		ResourceLimits:  g.ResourceLimits,
		Lifetime:        g.Lifetime,
		Mechanisms:      m,
		Kernel:          g.Kernel,
		ReadOnlyRoot:    g.ReadOnlyRoot,
		NoNewPrivileges: g.NoNewPrivileges,
		Capabilities:    caps,
		User:            g.User,
	})
}

// UnmarshalJSON decodes what MarshalJSON wrote, such as the guarantees of
// `runbox host --json`'s report. Keys it does not know are ignored, so a
// newer report decodes; a level or lifetime it does not know is an error.
func (g *Guarantees) UnmarshalJSON(b []byte) error {
	var j guaranteesJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	if len(j.Mechanisms) == 0 {
		j.Mechanisms = nil // MarshalJSON writes nil as []
	}
	*g = Guarantees{
		ProcessBoundary: j.ProcessBoundary,
		WriteBoundary:   j.WriteBoundary,
		ReadBoundary:    j.ReadBoundary,
		EnvScrub:        j.EnvScrub,
		NetworkBoundary: j.NetworkBoundary,
		ResourceLimits:  j.ResourceLimits,
		Lifetime:        j.Lifetime,
		Level:           j.Level,
		Mechanisms:      j.Mechanisms,
		Kernel:          j.Kernel,
		ReadOnlyRoot:    j.ReadOnlyRoot,
		NoNewPrivileges: j.NoNewPrivileges,
		User:            j.User,
	}
	if j.Capabilities != nil {
		g.Capabilities = append([]string{}, (*j.Capabilities)...)
	}
	return nil
}

// Init must be the first call in main (and in TestMain) of any program that
// confines host processes, or that should serve as its own agent in Docker
// sessions. In a process that a backend re-executed as a helper (for
// example the Linux sandbox's stage 2, or a session's agent) it runs that
// helper and exits, so nothing else of the program runs there; otherwise
// it returns at once and records that the program is ready.
func Init() { reexec.Dispatch() }
