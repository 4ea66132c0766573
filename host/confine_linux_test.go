package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/runbox-dev/runbox"
)

// sandboxDirs returns directories visible inside the sandbox (which gives
// the command a private /tmp): a writable one and an outside one, siblings
// under /var/tmp.
func sandboxDirs(t *testing.T) (writable, outside string) {
	t.Helper()
	base, err := os.MkdirTemp("/var/tmp", "runbox-host-test-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(base) })
	writable, outside = filepath.Join(base, "w"), filepath.Join(base, "o")
	require.NoError(t, os.Mkdir(writable, 0o755))
	require.NoError(t, os.Mkdir(outside, 0o755))
	return writable, outside
}

func confined(t *testing.T, p Policy, opts ...Option) *Executor {
	t.Helper()
	return newExecutor(t, append(opts, WithPolicy(p))...)
}

func sh(t *testing.T, e *Executor, dir, script string) (string, int) {
	t.Helper()
	out, code, err := e.RunCommand(testCtx(t), dir, script)
	require.NoError(t, err, "%s", out)
	return string(out), code
}

func TestConfinedGuaranteesOnLinux(t *testing.T) {
	w, _ := sandboxDirs(t)
	e := confined(t, Policy{WritableRoots: []string{w}})
	g := e.Guarantees()
	assert.True(t, g.ProcessBoundary)
	assert.True(t, g.WriteBoundary)
	assert.False(t, g.ReadBoundary, "no readable roots: everything is readable")
	assert.True(t, g.EnvScrub)
	assert.True(t, g.NetworkBoundary)
	assert.False(t, g.ResourceLimits)
	assert.Equal(t, runbox.LifetimeContainmentEnforced, g.Lifetime)
	assert.Equal(t, runbox.GuaranteeLevelFull, g.Level)
	for _, m := range []string{"user-ns", "mount-ns", "pid-ns", "net-ns", "seccomp", "no-new-privs"} {
		assert.Contains(t, g.Mechanisms, m)
	}
	// Landlock is reported at the ABI this kernel offers, and only then.
	abi, err := llsys.LandlockGetABIVersion()
	landlock := slices.DeleteFunc(slices.Clone(g.Mechanisms), func(m string) bool { return !strings.HasPrefix(m, "landlock-") })
	if err == nil && abi > 0 {
		assert.Equal(t, []string{fmt.Sprintf("landlock-abi-%d", abi)}, landlock)
	} else {
		assert.Empty(t, landlock, "no Landlock on this kernel")
	}

	pp, err := e.PrepareProcess(testCtx(t), ProcessOptions{Args: []string{"true"}})
	require.NoError(t, err)
	defer pp.Close()
	assert.Equal(t, g, pp.Guarantees())
	acc := pp.EffectiveAccess()
	assert.Equal(t, ProcessAccessScopedWrite, acc.Kind())
	assert.Equal(t, []string{w}, acc.WritePaths())

	open := confined(t, Policy{Network: true, BroadWrite: true})
	g = open.Guarantees()
	assert.False(t, g.NetworkBoundary)
	assert.False(t, g.WriteBoundary)
	assert.True(t, g.ProcessBoundary)
	assert.Equal(t, runbox.GuaranteeLevelFull, g.Level, "everything the policy asks for is enforced")
	pp, err = open.PrepareProcess(testCtx(t), ProcessOptions{Args: []string{"true"}})
	require.NoError(t, err)
	defer pp.Close()
	assert.Equal(t, ProcessAccessBroadWrite, pp.EffectiveAccess().Kind())
}

func TestConfinedWrites(t *testing.T) {
	w, o := sandboxDirs(t)
	e := confined(t, Policy{WritableRoots: []string{w}})
	control := newExecutor(t)

	out, code := sh(t, e, w, "echo in > in && cat in")
	assert.Equal(t, 0, code, out)
	b, err := os.ReadFile(filepath.Join(w, "in"))
	require.NoError(t, err)
	assert.Equal(t, "in\n", string(b))

	probes := map[string]string{
		"outside":    filepath.Join(o, "direct"),
		"dotdot":     w + "/../o/dotdot",
		"root":       "/runbox-host-test-root",
		"symlink":    filepath.Join(w, "link", "symlink"),
		"caller-tmp": filepath.Join(os.TempDir(), fmt.Sprintf("runbox-host-test-%d", os.Getpid())),
	}
	require.NoError(t, os.Symlink(o, filepath.Join(w, "link")))
	for name, p := range probes {
		out, code := sh(t, e, w, "echo x > "+p)
		target := filepath.Clean(strings.Replace(p, filepath.Join(w, "link"), o, 1))
		_, statErr := os.Stat(target)
		if name == "caller-tmp" {
			// /tmp is private inside: the write lands there and vanishes.
			assert.ErrorIs(t, statErr, os.ErrNotExist, "%s reached the host's /tmp", name)
			continue
		}
		assert.NotEqual(t, 0, code, "%s: %s", name, out)
		assert.ErrorIs(t, statErr, os.ErrNotExist, "%s reached %s", name, target)
	}
	// Positive control: the same writes work without the sandbox.
	out, code = sh(t, control, w, "echo x > ../o/control && echo x > "+probes["caller-tmp"])
	assert.Equal(t, 0, code, out)
	assert.FileExists(t, filepath.Join(o, "control"))
	assert.FileExists(t, probes["caller-tmp"])
	os.Remove(probes["caller-tmp"])
}

// A writable root replaced by a symlink after New must not redirect the
// write: the root was resolved once, and the helper refuses symlinks.
func TestConfinedSymlinkSwapAfterPreparation(t *testing.T) {
	w, o := sandboxDirs(t)
	root := filepath.Join(w, "root")
	require.NoError(t, os.Mkdir(root, 0o755))
	e := confined(t, Policy{WritableRoots: []string{root}})
	pp, err := e.PrepareProcess(testCtx(t), ProcessOptions{Directory: w, Command: "echo x > " + root + "/f"})
	require.NoError(t, err)
	require.NoError(t, os.Rename(root, root+".old"))
	require.NoError(t, os.Symlink(o, root))
	p, err := pp.Start(testCtx(t))
	if err == nil {
		res, werr := p.Wait(testCtx(t))
		require.NoError(t, werr)
		assert.NotEqual(t, 0, res.ExitCode)
		require.NoError(t, p.Close(testCtx(t)))
	} else {
		assert.ErrorIs(t, err, runbox.ErrStart)
	}
	assert.NoFileExists(t, filepath.Join(o, "f"))
}

func TestConfinedNetwork(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	defer func() { ln.Close(); wg.Wait() }()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	probe := "exec bash -c 'exec 3<>/dev/tcp/127.0.0.1/" + port + "'"

	out, code := sh(t, newExecutor(t), "", probe)
	require.Equal(t, 0, code, "control: %s", out)
	out, code = sh(t, confined(t, Policy{}), "", probe)
	assert.NotEqual(t, 0, code, "the sandbox reached the host's loopback: %s", out)
	out, code = sh(t, confined(t, Policy{Network: true}), "", probe)
	assert.Equal(t, 0, code, "network allowed: %s", out)
}

func TestConfinedProcessView(t *testing.T) {
	e := confined(t, Policy{})
	pid := os.Getpid()
	out, code := sh(t, newExecutor(t), "", fmt.Sprintf("kill -0 %d && test -e /proc/%d", pid, pid))
	require.Equal(t, 0, code, "control: %s", out)
	out, code = sh(t, e, "", fmt.Sprintf("kill -0 %d", pid))
	assert.NotEqual(t, 0, code, out)
	out, code = sh(t, e, "", "ls /proc | grep '^[0-9]' | tr '\\n' ' '; tr '\\0' ' ' < /proc/1/cmdline")
	require.Equal(t, 0, code, out)
	assert.NotContains(t, strings.Fields(out), fmt.Sprint(pid))
	assert.Contains(t, out, "runbox-sandbox", "PID 1 is the helper")
	// Signals across the sandbox's boundary are refused even to its init.
	out, code = sh(t, e, "", "kill -TERM 1")
	assert.NotEqual(t, 0, code, out)
}

func TestConfinedRestrictions(t *testing.T) {
	e := confined(t, Policy{})
	out, code := sh(t, e, "", "grep -E '^(NoNewPrivs|Seccomp|CapEff|CapBnd):' /proc/self/status")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "NoNewPrivs:\t1")
	assert.Contains(t, out, "Seccomp:\t2")
	assert.Contains(t, out, "CapEff:\t0000000000000000")
	assert.Contains(t, out, "CapBnd:\t0000000000000000")

	// unshare(2) works for the control (root here) and is refused inside.
	out, code = sh(t, newExecutor(t), "", "unshare -U true")
	require.Equal(t, 0, code, "control: %s", out)
	out, code = sh(t, e, "", "unshare -U true")
	assert.NotEqual(t, 0, code, out)
	out, code = sh(t, e, "", "mount -t tmpfs none /mnt")
	assert.NotEqual(t, 0, code, out)
	// /proc/sys is read-only even though root inside owns it.
	out, code = sh(t, e, "", "echo 1 > /proc/sys/kernel/sysrq")
	assert.NotEqual(t, 0, code, out)
}

func TestConfinedEnvironment(t *testing.T) {
	t.Setenv("RUNBOX_TEST_SECRET", "hunter2")
	e := confined(t, Policy{})
	out, code := sh(t, e, "", `printf '[%s] %s %s' "$RUNBOX_TEST_SECRET" "$HOME" "$TMPDIR"; touch "$HOME/h" "$TMPDIR/t"`)
	require.Equal(t, 0, code, out)
	f := strings.Fields(out)
	require.Len(t, f, 3, out)
	assert.Equal(t, "[]", f[0], "the caller's secret is absent")
	home, tmp := f[1], f[2]
	assert.NotEqual(t, os.Getenv("HOME"), home)
	for _, d := range []string{home, tmp} {
		fi, err := os.Stat(d)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "%s is owner-only", d)
	}
	assert.FileExists(t, filepath.Join(home, "h"))
	require.NoError(t, e.Close())
	_, err := os.Stat(home)
	assert.ErrorIs(t, err, os.ErrNotExist, "Close removes the private HOME")
	_, _, err = e.RunArgv(testCtx(t), "", []string{"true"})
	assert.ErrorIs(t, err, runbox.ErrStart, "a closed confined executor runs nothing")
}

// A secret outside the readable roots cannot be read; the control can.
func TestConfinedReadBoundary(t *testing.T) {
	w, o := sandboxDirs(t)
	secret := filepath.Join(o, "secret")
	require.NoError(t, os.WriteFile(secret, []byte("hunter2"), 0o644))
	e := confined(t, Policy{WritableRoots: []string{w}, ReadableRoots: SystemReadRoots()})
	assert.True(t, e.Guarantees().ReadBoundary)
	out, code := sh(t, newExecutor(t), "", "cat "+secret)
	require.Equal(t, 0, code)
	require.Equal(t, "hunter2", out)
	out, code = sh(t, e, w, "cat "+secret)
	assert.NotEqual(t, 0, code)
	assert.NotContains(t, out, "hunter2")
}

// Descendants that leave the session and double-fork die with the tree,
// with and without a cgroup (the PID namespace alone enforces it).
func TestConfinedTreeDies(t *testing.T) {
	for name, opts := range map[string][]Option{"cgroup": nil, "no-cgroup": {WithoutCgroup()}} {
		t.Run(name, func(t *testing.T) {
			w, _ := sandboxDirs(t)
			e := confined(t, Policy{WritableRoots: []string{w}}, opts...)
			lock := filepath.Join(w, "lock")
			script := fmt.Sprintf(`( setsid flock %[1]s sh -c 'echo > %[1]s.ready; exec sleep 1000' & ) </dev/null >/dev/null 2>&1
while [ ! -e %[1]s.ready ]; do sleep 0.01; done; echo ready; exec sleep 1000`, lock)
			pp, err := e.PrepareProcess(testCtx(t), ProcessOptions{Directory: w, Command: script})
			require.NoError(t, err)
			p, err := pp.Start(testCtx(t))
			require.NoError(t, err)
			assert.Equal(t, runbox.LifetimeContainmentEnforced, p.LifetimeContainment())
			line := make([]byte, 6)
			_, err = io.ReadFull(p.Stdout(), line)
			require.NoError(t, err)
			require.Equal(t, "ready\n", string(line))
			f, err := os.Open(lock)
			require.NoError(t, err)
			defer f.Close()
			// Positive control: the escaped descendant holds the lock.
			require.ErrorIs(t, unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB), unix.EWOULDBLOCK)
			require.NoError(t, p.Signal(runbox.ProcessSignalKill))
			res, err := p.Wait(testCtx(t))
			require.NoError(t, err)
			assert.Equal(t, "SIGKILL", res.Signal)
			require.NoError(t, p.Close(testCtx(t)))
			assert.NoError(t, unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB), "the descendant outlived the tree")
		})
	}
}

func TestConfinedResultsAndSignals(t *testing.T) {
	e := confined(t, Policy{})
	res, err := e.Run(testCtx(t), runbox.ShellCommand("exit 7"), runbox.Streams{})
	require.NoError(t, err)
	assert.Equal(t, runbox.Result{ExitCode: 7}, res)
	res, err = e.Run(testCtx(t), runbox.ShellCommand("kill -TERM $$"), runbox.Streams{})
	require.NoError(t, err)
	assert.Equal(t, runbox.Result{ExitCode: 128 + 15, Signal: "SIGTERM"}, res)

	// Interrupt reaches the command through the helper.
	pp, err := e.PrepareProcess(testCtx(t), ProcessOptions{Command: "trap 'exit 9' INT; echo ready; while :; do sleep 0.05; done"})
	require.NoError(t, err)
	p, err := pp.Start(testCtx(t))
	require.NoError(t, err)
	defer p.Close(testCtx(t))
	line := make([]byte, 6)
	_, err = io.ReadFull(p.Stdout(), line)
	require.NoError(t, err)
	require.NoError(t, p.Signal(runbox.ProcessSignalInterrupt))
	res, err = p.Wait(testCtx(t))
	require.NoError(t, err)
	assert.Equal(t, 9, res.ExitCode)

	// A program that exists on the host but not in the sandbox fails to start.
	_, _, err = e.RunArgv(testCtx(t), "", []string{"/no/such/program"})
	assert.ErrorIs(t, err, runbox.ErrStart)

	// Cancellation kills the sandbox.
	ctx, cancel := context.WithCancel(testCtx(t))
	cancel()
	_, _, err = e.RunArgv(ctx, "", []string{"sleep", "100"})
	assert.ErrorIs(t, err, runbox.ErrCancelled)
}

func TestConfinedTTY(t *testing.T) {
	e := confined(t, Policy{})
	var out strings.Builder
	res, err := e.Run(testCtx(t), runbox.Command{
		Args: []string{"sh", "-c", "test -t 0 && stty size"}, TTY: true, TermSize: runbox.TermSize{Rows: 33, Cols: 77},
	}, runbox.Streams{Stdout: &out})
	require.NoError(t, err)
	assert.Equal(t, 0, res.ExitCode, out.String())
	assert.Contains(t, out.String(), "33 77")

	// ttyname(3) must find the terminal inside the private /dev.
	out.Reset()
	res, err = e.Run(testCtx(t), runbox.Command{Args: []string{"tty"}, TTY: true}, runbox.Streams{Stdout: &out})
	require.NoError(t, err)
	assert.Equal(t, 0, res.ExitCode, out.String())
	assert.Equal(t, "/dev/console", strings.TrimSpace(out.String()))
	out.Reset()
	res, err = e.Run(testCtx(t), runbox.Command{Args: []string{"sh", "-c", "tty <&-; echo x > /dev/tty && echo via-tty"}, TTY: true}, runbox.Streams{Stdout: &out})
	require.NoError(t, err)
	assert.Contains(t, out.String(), "via-tty", "the controlling terminal through /dev/tty")
}

func TestConfinedCgroupPlacement(t *testing.T) {
	e := confined(t, Policy{})
	require.NotNil(t, e.sys.pool, "this host has a writable cgroup v2 hierarchy; the probe found none")
	assert.Contains(t, e.Guarantees().Mechanisms, "cgroup")
	pp, err := e.PrepareProcess(testCtx(t), ProcessOptions{Command: "echo ready; exec sleep 1000"})
	require.NoError(t, err)
	p, err := pp.Start(testCtx(t))
	require.NoError(t, err)
	defer p.Close(testCtx(t))
	line := make([]byte, 6)
	_, err = io.ReadFull(p.Stdout(), line)
	require.NoError(t, err)
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", p.PID()))
	require.NoError(t, err)
	assert.Contains(t, string(b), "runbox-host-", "the helper (and so the whole sandbox) is in its own cgroup")
}

func TestAdmissionAndGrants(t *testing.T) {
	w, _ := sandboxDirs(t)
	admit := func(argv []string, dir string) Admission {
		switch filepath.Base(argv[0]) {
		case "rm":
			return AdmissionDeny
		case "echo":
			return AdmissionGated
		}
		return AdmissionAllow
	}
	e := confined(t, Policy{WritableRoots: []string{w}, Admit: admit})
	ctx := testCtx(t)
	argv := []string{"echo", "granted"}

	_, err := e.PrepareProcess(ctx, ProcessOptions{Directory: w, Args: []string{"rm", "-rf", w}})
	assert.ErrorIs(t, err, ErrCommandDenied)
	_, _, err = e.RunArgv(ctx, w, []string{"rm", "-rf", w})
	assert.ErrorIs(t, err, ErrCommandDenied)
	assert.DirExists(t, w)

	_, err = e.PrepareProcess(ctx, ProcessOptions{Directory: w, Args: argv})
	assert.ErrorIs(t, err, ErrGrantRequired)
	_, _, err = e.RunArgv(ctx, w, argv)
	assert.ErrorIs(t, err, ErrGrantRequired, "the output helpers have no grant")

	g, err := e.IssueGrant(GrantRequest{Directory: w, Args: argv}, time.Hour)
	require.NoError(t, err)
	_, err = e.PrepareProcess(ctx, ProcessOptions{Directory: w, Args: []string{"echo", "other"}, Grant: g})
	assert.ErrorIs(t, err, ErrGrantMismatch)
	_, err = e.PrepareProcess(ctx, ProcessOptions{Directory: "/", Args: argv, Grant: g})
	assert.ErrorIs(t, err, ErrGrantMismatch)
	_, err = e.PrepareProcess(ctx, ProcessOptions{Directory: w, Args: argv, Grant: ParseGrant("forged")})
	assert.ErrorIs(t, err, ErrGrantInvalid)

	pp, err := e.PrepareProcess(ctx, ProcessOptions{Directory: w, Args: argv, Grant: ParseGrant(g.String())})
	require.NoError(t, err)
	p, err := pp.Start(ctx)
	require.NoError(t, err)
	out, err := io.ReadAll(p.Stdout())
	require.NoError(t, err)
	assert.Equal(t, "granted\n", string(out))
	res, err := p.Wait(ctx)
	require.NoError(t, err)
	assert.Equal(t, 0, res.ExitCode)
	require.NoError(t, p.Close(ctx))

	_, err = e.PrepareProcess(ctx, ProcessOptions{Directory: w, Args: argv, Grant: g})
	assert.ErrorIs(t, err, ErrGrantUsed, "a grant runs once and only once")

	// Expiry, with the executor's clock moved instead of waiting.
	now := time.Now()
	e.grants.mu.Lock()
	e.grants.now = func() time.Time { return now }
	e.grants.mu.Unlock()
	g, err = e.IssueGrant(GrantRequest{Directory: w, Args: argv}, time.Minute)
	require.NoError(t, err)
	e.grants.mu.Lock()
	e.grants.now = func() time.Time { return now.Add(time.Minute) }
	e.grants.mu.Unlock()
	_, err = e.PrepareProcess(ctx, ProcessOptions{Directory: w, Args: argv, Grant: g})
	assert.ErrorIs(t, err, ErrGrantExpired)

	// A shell command is bound through its normalized argv.
	g, err = e.IssueGrant(GrantRequest{Directory: w, Command: "echo hi"}, time.Hour)
	require.NoError(t, err)
	_, err = e.PrepareProcess(ctx, ProcessOptions{Directory: w, Command: "echo hi", Grant: g})
	require.NoError(t, err, "sh is allowed; the grant is still redeemed")
	_, err = e.PrepareProcess(ctx, ProcessOptions{Directory: w, Command: "echo hi", Grant: g})
	assert.ErrorIs(t, err, ErrGrantUsed)

	for _, sentinel := range []error{ErrGrantRequired, ErrGrantUsed, ErrGrantMismatch, ErrGrantExpired, ErrGrantInvalid, ErrCommandDenied} {
		for _, other := range []error{ErrGrantRequired, ErrGrantUsed, ErrGrantMismatch, ErrGrantExpired, ErrGrantInvalid, ErrCommandDenied} {
			if sentinel != other {
				assert.False(t, errors.Is(sentinel, other), "%v is distinct from %v", sentinel, other)
			}
		}
	}
}

func TestPolicyRefusals(t *testing.T) {
	_, err := New(WithPolicy(Policy{Require: runbox.Guarantees{ResourceLimits: true}}))
	assert.ErrorIs(t, err, ErrConfinementUnavailable, "required limits without Resources: nothing is limited")
	assert.ErrorIs(t, err, ErrLimitsUnavailable)
	_, err = New(WithPolicy(Policy{BroadWrite: true, WritableRoots: []string{"/"}}))
	assert.ErrorIs(t, err, runbox.ErrInvalidCommand)
	_, err = New(WithPolicy(Policy{Unconfined: true, Network: true}))
	assert.ErrorIs(t, err, runbox.ErrInvalidCommand)
	_, err = New(WithPolicy(Policy{WritableRoots: []string{"/no/such/dir"}}))
	assert.ErrorIs(t, err, runbox.ErrInvalidCommand)

	e := confined(t, Policy{Unconfined: true})
	g := e.Guarantees()
	assert.Equal(t, runbox.GuaranteeLevelNone, g.Level)
	assert.False(t, g.WriteBoundary || g.ProcessBoundary || g.NetworkBoundary)
	assert.True(t, g.EnvScrub)
	out, code := sh(t, e, "", "echo $HOME")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "runbox-private-", "the private HOME applies unconfined too")
}

// The writable roots are canonical: a symlinked spelling is resolved once.
func TestConfinedCanonicalRoots(t *testing.T) {
	w, _ := sandboxDirs(t)
	link := filepath.Join(filepath.Dir(w), "wlink")
	require.NoError(t, os.Symlink(w, link))
	e := confined(t, Policy{WritableRoots: []string{link, w + "/."}})
	pp, err := e.PrepareProcess(testCtx(t), ProcessOptions{Args: []string{"true"}})
	require.NoError(t, err)
	defer pp.Close()
	assert.Equal(t, []string{w}, pp.EffectiveAccess().WritePaths())
}

// Without runbox.Init at the top of main, a confining executor refuses to
// be built instead of running anything unconfined.
func TestConfinedNeedsInit(t *testing.T) {
	cmd := exec.Command("/proc/self/exe", "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=no-init")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "runbox.Init()")
	assert.Contains(t, string(out), ErrConfinementUnavailable.Error())
}

// TestConfinedLaunchMatchesProof: the helper runs a command only with
// exactly the mechanisms the probe proved, so Guarantees can never
// describe a stronger sandbox than the one a command gets.
func TestConfinedLaunchMatchesProof(t *testing.T) {
	e := confined(t, Policy{})
	require.NotEmpty(t, e.conf.proven)
	out, code := sh(t, e, "", "echo proven")
	require.Equal(t, 0, code)
	require.Equal(t, "proven\n", out)

	// The proof is changed under the executor only while no sandbox is
	// being prepared in the background.
	e.sys.sandboxes.waitFilled()
	proven := e.conf.proven
	e.conf.proven = append(slices.Clone(proven), "landlock-abi-99")
	_, _, err := e.RunCommand(testCtx(t), "", "echo weaker")
	assert.ErrorIs(t, err, runbox.ErrStart)
	assert.ErrorContains(t, err, "differs from the one proven")
	e.sys.sandboxes.waitFilled()
	e.conf.proven = proven[1:]
	_, _, err = e.RunCommand(testCtx(t), "", "echo stronger")
	assert.ErrorIs(t, err, runbox.ErrStart, "anything else than the proof is refused")
	e.sys.sandboxes.waitFilled()
	e.conf.proven = proven
	out, code = sh(t, e, "", "echo again")
	assert.Equal(t, 0, code)
	assert.Equal(t, "again\n", out)
}
