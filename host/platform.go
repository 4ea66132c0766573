package host

import (
	"os"
	"os/exec"

	"github.com/runbox-dev/runbox"
)

// The per-OS contract. The portable code (host.go, run.go, proc.go, process.go,
// prepare.go, launch.go, capture.go, runtty.go, env.go) relies on each
// platform's files (platform_linux.go, platform_darwin.go and
// platform_windows.go, the first two sharing platform_unix.go) providing
// what is declared here; the assertions at the end make a missing or
// mistyped piece a compile error on that OS rather than a surprise in a
// cross-build.

// treeHandle is one started process tree as its platform holds it
// (treeSys): a process group and cgroup on Linux, a process group on
// macOS, a Job object on Windows.
type treeHandle interface {
	// awaitExit blocks until the leader has exited, without reaping it
	// where the platform can, and reports whether it waited.
	awaitExit(leader *os.Process) bool
	// signal delivers a runbox signal to the whole tree.
	signal(leader *os.Process, sig runbox.ProcessSignal) error
	// teardown kills whatever the leader left behind.
	teardown(leader *os.Process) error
	// release frees the platform's resources once the leader is reaped.
	release() error
	// result turns the leader's state into the tree's Result (inside a
	// sandbox, the command's, as its helper reported it).
	result(state *os.ProcessState) runbox.Result
	// containment is the lifetime containment this tree actually has.
	containment() runbox.LifetimeContainment
}

// platform is what an Executor asks of its OS.
type platform interface {
	initSys()
	initLimits(runbox.Resources)
	closeSys() error
	// startTree starts a spec's process (through the sandbox when the
	// spec is confined) as the leader of a tree of its own.
	startTree(spec *launchSpec, build func() *exec.Cmd, tty bool) (*exec.Cmd, *treeSys, error)
	startPTY(spec *launchSpec, size runbox.TermSize) (*Process, error)
	plannedContainment() runbox.LifetimeContainment
	// probeConfinement proves what the policy's sandbox enforces here.
	probeConfinement() (runbox.Guarantees, error)
}

var (
	_ treeHandle = (*treeSys)(nil)
	_ platform   = (*Executor)(nil)

	// The free functions each platform provides.
	_ func(name string) string                          = envFallback
	_ func(key string) string                           = envKey
	_ func(command string) ([]string, string, error)    = shellArgv
	_ func(file, dir, pathEnv string) (string, error)   = lookPath
	_ func(state *os.ProcessState) runbox.Result        = exitResult
	_ func(master *os.File, size runbox.TermSize) error = resizePTY
	_ func(w *os.File)                                  = growPipe
)
