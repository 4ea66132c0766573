package host

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/internal/sandbox"
)

// Confinement errors. Each wraps nothing else, so errors.Is tells them
// apart; preparation errors wrap one of them together with the cause.
var (
	// ErrConfinementUnavailable reports that the policy needs a boundary
	// (or a helper) this host cannot provide. Nothing is run unconfined in
	// its place.
	ErrConfinementUnavailable = errors.New("host: confinement unavailable")
	// ErrLimitsUnavailable accompanies ErrConfinementUnavailable when what
	// is missing includes the resource limits that Require asks for.
	ErrLimitsUnavailable = errors.New("host: resource limits unavailable")
	// ErrCommandDenied reports a command the policy's admission refuses.
	ErrCommandDenied = errors.New("host: command denied by policy")
	// ErrGrantRequired reports a gated command prepared without a grant.
	ErrGrantRequired = errors.New("host: command requires a grant")
	// ErrGrantInvalid reports a grant this executor never issued.
	ErrGrantInvalid = errors.New("host: grant not issued by this executor")
	// ErrGrantUsed reports a grant that was already consumed (a replay).
	ErrGrantUsed = errors.New("host: grant already used")
	// ErrGrantExpired reports a grant past its expiry.
	ErrGrantExpired = errors.New("host: grant expired")
	// ErrGrantMismatch reports a grant bound to another command or
	// working directory.
	ErrGrantMismatch = errors.New("host: grant is for another command or directory")
)

// Admission is a policy's decision about a command.
type Admission int

const (
	// AdmissionAllow runs the command.
	AdmissionAllow Admission = iota
	// AdmissionGated runs the command only with a grant from
	// [Executor.IssueGrant], consumed by [Executor.PrepareProcess].
	AdmissionGated
	// AdmissionDeny refuses the command before anything is spawned.
	AdmissionDeny
)

// String returns the admission's name.
func (a Admission) String() string {
	switch a {
	case AdmissionAllow:
		return "allow"
	case AdmissionGated:
		return "gated"
	case AdmissionDeny:
		return "deny"
	}
	return "unknown"
}

// Policy is what a confined executor enforces; see [WithPolicy]. The zero
// Policy is the strictest one: read-only filesystem, no network, every
// command allowed.
type Policy struct {
	// WritableRoots are the paths the process may write: a directory (and
	// everything under it) or a single file. They must exist; they are
	// resolved to absolute, symlink-free paths once, by [New], so a
	// symlink planted later cannot redirect them.
	WritableRoots []string
	// BroadWrite explicitly lets the process write wherever the caller's
	// user can. It excludes WritableRoots.
	BroadWrite bool
	// ReadableRoots, when not nil, are the only paths the process may read
	// (plus its writable roots, its program, its working directory and a
	// private /dev, /proc and /tmp). Include the system directories the
	// command needs; see [SystemReadRoots]. nil means the whole filesystem
	// is readable.
	ReadableRoots []string
	// Network allows network access. Without it the process has none.
	Network bool
	// Admit decides whether a command may run, given its normalized
	// argument vector (for a shell command, the interpreter's argv) and
	// its canonical working directory. nil allows every command.
	Admit func(argv []string, dir string) Admission
	// Resources bounds the memory, processes (tasks, threads included) and
	// CPU of every process tree, as for a session; zero fields mean no
	// limit. On Linux the kernel enforces them through cgroups where this
	// host delegates the controllers; where it does not, the executor runs
	// without them, reports ResourceLimits false and a degraded level, and
	// fails in [New] only if Require asks for ResourceLimits. Other
	// platforms enforce none.
	Resources runbox.Resources
	// Require lists boundaries the caller insists on beyond those the
	// policy implies (for example ResourceLimits or an enforced
	// Lifetime). A host that cannot provide one makes [New] fail.
	Require runbox.Guarantees
	// Unconfined acknowledges that the process runs without any OS
	// boundary, for hosts that have none. Admission, grants, the scrubbed
	// environment and the private HOME and TMPDIR still apply, and the
	// reported level is none. It excludes every other field but Admit.
	Unconfined bool
}

// SystemReadRoots returns the usual system directories a program needs to
// run, for use in [Policy.ReadableRoots]: those of /bin, /sbin, /usr,
// /lib, /lib32, /lib64, /libx32 and /etc that exist on this host.
func SystemReadRoots() []string {
	var out []string
	for _, p := range []string{"/bin", "/sbin", "/usr", "/lib", "/lib32", "/lib64", "/libx32", "/etc"} {
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// WithPolicy makes the executor confine every process with p. [New] then
// compiles the policy once: it resolves the paths, checks that this host
// can enforce every boundary the policy implies or requires, and creates
// the private HOME and TMPDIR; it fails with [ErrConfinementUnavailable]
// otherwise. On Linux the program must call [runbox.Init] first in main.
func WithPolicy(p Policy) Option {
	return func(c *config) error {
		cp := p
		cp.WritableRoots = slices.Clone(p.WritableRoots)
		if p.ReadableRoots != nil {
			cp.ReadableRoots = slices.Clone(p.ReadableRoots)
		}
		c.policy = &cp
		return nil
	}
}

// compiledPolicy is a policy resolved once at New.
type compiledPolicy struct {
	policy   Policy
	writable []string // canonical
	readable []string // canonical; nil: everything
	private  string   // the executor's private directory (HOME and TMPDIR inside)
	home     string
	tmp      string
	g        runbox.Guarantees
	// inheritEnv records WithInheritEnv: the caller chose to pass its
	// environment, so no scrub is asked for.
	inheritEnv bool
	// proven are the mechanisms the probe's helper applied (Linux): every
	// later launch must apply exactly these.
	proven []string
}

// canonicalPath returns p absolute and with every symlink resolved; it must
// exist.
func canonicalPath(p string) (string, error) {
	if p == "" || strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("invalid path %q", p)
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(abs)
}

// canonicalAll resolves every path, removing duplicates and paths already
// under another one.
func canonicalAll(paths []string, what string) ([]string, error) {
	out := make([]string, 0, len(paths))
	for _, p := range paths {
		c, err := canonicalPath(p)
		if err != nil {
			return nil, fmt.Errorf("%w: %s %q: %w", runbox.ErrInvalidCommand, what, p, err)
		}
		out = append(out, c)
	}
	slices.Sort(out)
	out = slices.Compact(out)
	return out, nil
}

// within reports whether p is root or below it; both are canonical.
func within(p, root string) bool {
	if root == "/" {
		return strings.HasPrefix(p, "/")
	}
	return p == root || strings.HasPrefix(p, root+string(filepath.Separator))
}

// compilePolicy resolves p and creates the executor's private directories.
func compilePolicy(p *Policy) (*compiledPolicy, error) {
	if p.Unconfined && (p.BroadWrite || p.Network || len(p.WritableRoots) > 0 || p.ReadableRoots != nil || anyRequired(p.Require)) {
		return nil, fmt.Errorf("%w: an unconfined policy cannot also ask for boundaries", runbox.ErrInvalidCommand)
	}
	if p.Unconfined && p.Resources != (runbox.Resources{}) {
		return nil, fmt.Errorf("%w: resource limits need the sandbox; an unconfined policy has none", runbox.ErrInvalidCommand)
	}
	if r := p.Resources; r.MemoryBytes < 0 || r.Pids < 0 || r.CPUs < 0 {
		return nil, fmt.Errorf("%w: negative resource limit %+v", runbox.ErrInvalidCommand, r)
	}
	if p.BroadWrite && len(p.WritableRoots) > 0 {
		return nil, fmt.Errorf("%w: BroadWrite and WritableRoots are mutually exclusive", runbox.ErrInvalidCommand)
	}
	cp := &compiledPolicy{policy: *p}
	var err error
	if cp.writable, err = canonicalAll(p.WritableRoots, "writable root"); err != nil {
		return nil, err
	}
	if p.ReadableRoots != nil {
		if cp.readable, err = canonicalAll(p.ReadableRoots, "readable root"); err != nil {
			return nil, err
		}
	}
	// The private directory is owner-only; HOME and TMPDIR live inside it so
	// that one RemoveAll at Close takes both.
	base, err := canonicalPath(os.TempDir())
	if err != nil {
		return nil, fmt.Errorf("host: temporary directory: %w", err)
	}
	cp.private, err = os.MkdirTemp(base, "runbox-private-")
	if err != nil {
		return nil, fmt.Errorf("host: private directory: %w", err)
	}
	cp.home, cp.tmp = filepath.Join(cp.private, "home"), filepath.Join(cp.private, "tmp")
	for _, d := range []string{cp.home, cp.tmp} {
		if err := os.Mkdir(d, 0o700); err != nil {
			os.RemoveAll(cp.private)
			return nil, fmt.Errorf("host: private directory: %w", err)
		}
	}
	return cp, nil
}

// anyRequired reports whether g asks for any boundary.
func anyRequired(g runbox.Guarantees) bool {
	return len((runbox.Guarantees{}).Missing(g)) != 0
}

// requested returns the boundaries the policy implies, plus Require.
func (cp *compiledPolicy) requested() runbox.Guarantees {
	want := cp.policy.Require
	want.Mechanisms = nil
	if cp.policy.Unconfined {
		return want
	}
	want.EnvScrub = !cp.inheritEnv || want.EnvScrub
	if !cp.policy.BroadWrite {
		want.WriteBoundary = true
	}
	if !cp.policy.Network {
		want.NetworkBoundary = true
	}
	if cp.readable != nil {
		want.ReadBoundary = true
	}
	return want
}

// limitsWanted is requested() with the resource limits the policy sets:
// what the level is graded against. Limits a host cannot enforce lower
// the level but fail New only when Require asks for them.
func (cp *compiledPolicy) limitsWanted() runbox.Guarantees {
	want := cp.requested()
	if cp.policy.Resources != (runbox.Resources{}) {
		want.ResourceLimits = true
	}
	return want
}

// level grades what is enforced against what the policy asks for: full
// when everything asked for is enforced and teardown is too, none when no
// OS boundary at all is enforced.
func level(g, want runbox.Guarantees) runbox.GuaranteeLevel {
	if !g.ProcessBoundary && !g.WriteBoundary && !g.ReadBoundary && !g.NetworkBoundary {
		return runbox.GuaranteeLevelNone
	}
	if len(g.Missing(want)) == 0 && g.Lifetime == runbox.LifetimeContainmentEnforced {
		return runbox.GuaranteeLevelFull
	}
	return runbox.GuaranteeLevelDegraded
}

// Grant is a single-use permission to run one gated command, issued by
// [Executor.IssueGrant]. Pass it in [ProcessOptions.Grant].
type Grant struct {
	token string
}

// String returns the grant's opaque token.
func (g Grant) String() string { return g.token }

// ParseGrant turns a token from [Grant.String] back into a Grant, for a
// grant that travelled through text (an approval UI, say).
func ParseGrant(token string) Grant { return Grant{token: token} }

// GrantRequest names what a grant is bound to; exactly one of Command and
// Args is set, as in [ProcessOptions].
type GrantRequest struct {
	// Directory is the working directory; "" means the current directory.
	Directory string
	// Command is a shell command.
	Command string
	// Args is a literal argument vector.
	Args []string
}

type grantRecord struct {
	argv    []string
	dir     string
	expires time.Time
	used    bool
}

// grantStore keeps the grants an executor issued. Consumed and expired
// records are kept, so that a replay is told apart from a forgery.
type grantStore struct {
	mu      sync.Mutex
	records map[string]*grantRecord
	now     func() time.Time // replaced in tests
}

func (s *grantStore) issue(argv []string, dir string, ttl time.Duration) (Grant, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return Grant{}, err
	}
	tok := hex.EncodeToString(b[:])
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.records == nil {
		s.records = map[string]*grantRecord{}
	}
	s.records[tok] = &grantRecord{argv: slices.Clone(argv), dir: dir, expires: s.clock().Add(ttl)}
	return Grant{token: tok}, nil
}

func (s *grantStore) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}

// consume redeems g for exactly argv in dir. Only a successful redemption
// or an expired grant uses it up; a mismatch leaves it for its command.
func (s *grantStore) consume(g Grant, argv []string, dir string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.records[g.token]
	switch {
	case g.token == "" || r == nil:
		return ErrGrantInvalid
	case r.used:
		return ErrGrantUsed
	case !s.clock().Before(r.expires):
		r.used = true
		return ErrGrantExpired
	case !slices.Equal(r.argv, argv) || r.dir != dir:
		return ErrGrantMismatch
	}
	r.used = true
	return nil
}

// newSpawnConf derives the confinement of one launch from the compiled
// policy; nil for an unconfined policy.
func (cp *compiledPolicy) newSpawnConf(spec *launchSpec) *sandbox.Spec {
	if cp.policy.Unconfined {
		return nil
	}
	c := &sandbox.Spec{
		Path:       spec.path,
		Args:       slices.Clone(spec.args),
		Dir:        spec.dir,
		Env:        slices.Clone(spec.env),
		TTY:        spec.tty,
		Network:    cp.policy.Network,
		BroadWrite: cp.policy.BroadWrite,
		Expect:     slices.Clone(cp.proven),
	}
	if !c.BroadWrite {
		c.Writable = append(slices.Clone(cp.writable), cp.home, cp.tmp)
	}
	var want []string
	if cp.readable != nil {
		c.Readable = slices.Clone(cp.readable)
		want = append(want, cp.readable...)
	}
	for _, p := range []string{spec.dir, spec.path} {
		if p == "" {
			continue
		}
		if cp, err := canonicalPath(p); err == nil {
			want = append(want, cp)
			if c.Readable != nil {
				c.Readable = append(c.Readable, cp)
			}
		}
	}
	if !c.BroadWrite {
		for _, p := range want {
			if hiddenInSandbox(p) && !slices.ContainsFunc(c.Writable, func(w string) bool { return within(p, w) }) {
				c.Visible = append(c.Visible, p)
			}
		}
	}
	slices.Sort(c.Visible)
	c.Visible = slices.Compact(c.Visible)
	return c
}

// hiddenInSandbox reports whether the sandbox replaces the directory p is
// in with a private one (/tmp, /dev, /run), so that p must be bound in to
// be seen.
func hiddenInSandbox(p string) bool {
	for _, d := range []string{"/tmp", "/dev", "/run"} {
		if within(p, d) {
			return true
		}
	}
	return false
}

// Init is [runbox.Init]: call it first in main (and TestMain) of a program
// that confines host processes.
func Init() { runbox.Init() }
