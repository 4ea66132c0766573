// Package runboxtest is a conformance suite for runbox backends: it checks
// that every guarantee a backend claims (see [runbox.Guarantees]) really
// holds.
//
// Every probe is run twice: against the backend under test, where it must
// be refused, and against an unconfined control, where the very same probe
// must succeed. A probe that fails for an unrelated reason (a missing tool,
// a wrong path) therefore fails the suite instead of passing as
// enforcement. Probes are POSIX shell commands run through
// [runbox.Process.Run] with [runbox.ShellCommand], so a busybox container
// can be tested as well as the host.
//
// Tools the probes need, in both the backend and the control: sh, echo,
// cat, test, ln, rm, kill, sleep (with fractional seconds), setsid and
// flock for lifetime containment, and bash (for /dev/tcp) or nc for the
// network boundary; for the claims about a session's system also uname,
// dmesg, grep, sed, id, touch, chmod, chown and chroot.
package runboxtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runbox-dev/runbox"
)

// Backend describes the backend under test and its control.
type Backend struct {
	// Name labels the backend in failure messages.
	Name string
	// Process is the backend under test.
	Process runbox.Process
	// Claims is what the backend says it enforces for Process. Every
	// boundary set here is probed; the others are not.
	Claims runbox.Guarantees
	// Control runs the same probes without confinement. It must see the
	// files below at the same paths as Process.
	Control runbox.Process
	// WritableDir is a directory Process may write (it is under one of its
	// writable roots). Required.
	WritableDir string
	// OutsideDir is a directory outside Process's writable roots that
	// Process can see and Control can write. Required for a write
	// boundary, whose descriptor probe also opens a file there from the
	// test process: it must be a directory of this machine.
	OutsideDir string
	// SecretFile is a file Control can read and Process must not. Required
	// for a read boundary.
	SecretFile string
	// HostPID is a process Control can see and signal (kill -0) and
	// Process must not; zero means the test process itself.
	HostPID int
	// TCPAddr is a host:port that Control can connect to and Process must
	// not; empty means a listener the suite opens on 127.0.0.1.
	TCPAddr string
	// Peer is the same system as Process with its defaults (for a
	// session: the same image and runtime, nothing hardened), where the
	// probes of a read-only root, no-new-privileges and a capability set
	// must succeed. Required for those claims; it may be Process itself
	// when Process claims none of them.
	Peer runbox.Process
}

// timeout bounds each probe so that a hang fails the test; it never
// asserts how long anything took.
const timeout = 2 * time.Minute

type outcome struct {
	code int
	out  string
	err  error
}

func run(t *testing.T, p runbox.Process, script string, env []string, stdin io.Reader) outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var buf bytes.Buffer
	cmd := runbox.ShellCommand(script)
	cmd.Env = env
	cmd.Stdin = stdin
	res, err := p.Run(ctx, cmd, runbox.Streams{Stdout: &buf, Stderr: &buf})
	return outcome{code: res.ExitCode, out: buf.String(), err: err}
}

// mustRun runs a control step that has to succeed.
func mustRun(t *testing.T, name string, p runbox.Process, script string) string {
	t.Helper()
	o := run(t, p, script, nil, nil)
	if o.err != nil || o.code != 0 {
		t.Fatalf("%s: %q: exit %d, err %v, output %q", name, script, o.code, o.err, o.out)
	}
	return o.out
}

// refused checks that the backend's run of script did not succeed (a
// non-zero exit, not a failure of the backend itself).
func refused(t *testing.T, b Backend, what, script string) {
	t.Helper()
	o := run(t, b.Process, script, nil, nil)
	if o.err != nil {
		t.Fatalf("%s: %s: the backend failed instead of running the probe: %v", b.Name, what, o.err)
	}
	if o.code == 0 {
		t.Errorf("%s: %s: the probe succeeded, so the claimed boundary does not hold (output %q)", b.Name, what, o.out)
	}
}

func token() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// q quotes s for the shell.
func q(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// Run checks every guarantee b claims.
func Run(t *testing.T, b Backend) {
	t.Helper()
	if b.Process == nil || b.Control == nil || b.WritableDir == "" {
		t.Fatalf("%s: Backend needs Process, Control and WritableDir", b.Name)
	}
	t.Run("Runs", func(t *testing.T) { checkRuns(t, b) })
	t.Run("WritableDir", func(t *testing.T) { checkWritable(t, b) })
	if b.Claims.WriteBoundary {
		t.Run("WriteBoundary", func(t *testing.T) { checkWriteBoundary(t, b) })
		t.Run("Descriptors", func(t *testing.T) { checkDescriptors(t, b) })
	}
	if b.Claims.ReadBoundary {
		t.Run("ReadBoundary", func(t *testing.T) { checkReadBoundary(t, b) })
	}
	if b.Claims.NetworkBoundary {
		t.Run("NetworkBoundary", func(t *testing.T) { checkNetwork(t, b) })
	}
	if b.Claims.ProcessBoundary {
		t.Run("ProcessBoundary", func(t *testing.T) { checkProcessBoundary(t, b) })
	}
	if b.Claims.EnvScrub {
		t.Run("EnvScrub", func(t *testing.T) { checkEnvScrub(t, b) })
	}
	if b.Claims.Lifetime == runbox.LifetimeContainmentEnforced {
		t.Run("LifetimeEnforced", func(t *testing.T) { checkLifetime(t, b) })
	}
	checkSystem(t, b)
}

func checkRuns(t *testing.T, b Backend) {
	for _, p := range []struct {
		name string
		p    runbox.Process
	}{{"backend", b.Process}, {"control", b.Control}} {
		o := run(t, p.p, "echo conformance; exit 3", nil, nil)
		if o.err != nil || o.code != 3 || o.out != "conformance\n" {
			t.Fatalf("%s %s: exit %d, err %v, output %q; want 3 and %q", b.Name, p.name, o.code, o.err, o.out, "conformance\n")
		}
	}
}

func checkWritable(t *testing.T, b Backend) {
	f := path.Join(b.WritableDir, "in-"+token())
	mustRun(t, b.Name+" backend", b.Process, "echo inside > "+q(f))
	if got := mustRun(t, b.Name+" control", b.Control, "cat "+q(f)+"; rm -f "+q(f)); got != "inside\n" {
		t.Fatalf("%s: a write inside WritableDir did not arrive: %q", b.Name, got)
	}
}

func checkWriteBoundary(t *testing.T, b Backend) {
	if b.OutsideDir == "" {
		t.Fatalf("%s: a claimed write boundary needs OutsideDir", b.Name)
	}
	tok := token()
	// Positive control: the outside directory is writable, just not by the
	// backend.
	ctl := path.Join(b.OutsideDir, "control-"+tok)
	mustRun(t, b.Name+" control", b.Control, "echo x > "+q(ctl)+" && test -s "+q(ctl)+" && rm "+q(ctl))

	absent := func(what, p string) {
		t.Helper()
		mustRun(t, b.Name+" control", b.Control, "test ! -e "+q(p)+" || { echo "+q(what+" reached "+p)+"; exit 1; }")
	}
	direct := path.Join(b.OutsideDir, "direct-"+tok)
	refused(t, b, "write outside", "echo x > "+q(direct))
	absent("direct write", direct)

	// The same file through "..": lexical tricks do not widen anything.
	// Not path.Join: that would clean the ".." away before the shell sees it.
	dotdot := b.WritableDir + "/" + relUp(b.WritableDir) + b.OutsideDir + "/dotdot-" + tok
	refused(t, b, "write through ..", "echo x > "+q(dotdot))
	absent("write through ..", path.Join(b.OutsideDir, "dotdot-"+tok))

	// A symlink inside the writable directory that points outside.
	link := path.Join(b.WritableDir, "link-"+tok)
	mustRun(t, b.Name+" control", b.Control, "ln -s "+q(b.OutsideDir)+" "+q(link))
	refused(t, b, "write through a symlink", "echo x > "+q(path.Join(link, "symlink-"+tok)))
	absent("write through a symlink", path.Join(b.OutsideDir, "symlink-"+tok))
	mustRun(t, b.Name+" control", b.Control, "rm -f "+q(link))
}

// relUp returns the "../.." that climbs from dir to the root.
func relUp(dir string) string {
	n := strings.Count(strings.Trim(path.Clean(dir), "/"), "/") + 1
	return strings.TrimSuffix(strings.Repeat("../", n), "/")
}

func checkReadBoundary(t *testing.T, b Backend) {
	if b.SecretFile == "" {
		t.Fatalf("%s: a claimed read boundary needs SecretFile", b.Name)
	}
	secret := mustRun(t, b.Name+" control", b.Control, "cat "+q(b.SecretFile))
	if secret == "" {
		t.Fatalf("%s: SecretFile is empty, so reading it proves nothing", b.Name)
	}
	o := run(t, b.Process, "cat "+q(b.SecretFile), nil, nil)
	if o.err != nil {
		t.Fatalf("%s: backend failed: %v", b.Name, o.err)
	}
	if o.code == 0 || strings.Contains(o.out, strings.TrimSpace(secret)) {
		t.Errorf("%s: the backend read SecretFile (exit %d)", b.Name, o.code)
	}
}

// connectScript connects to host:port with whatever the image has and
// exits 0 only when the connection was established; 127 means no tool.
// nc is used without -z, which busybox's nc lacks: with stdin at EOF every
// nc variant connects, sends nothing and exits 0.
func connectScript(host, port string) string {
	return fmt.Sprintf(`if command -v bash >/dev/null 2>&1; then exec bash -c 'exec 3<>/dev/tcp/%[1]s/%[2]s'
elif command -v nc >/dev/null 2>&1; then exec nc -w 10 %[1]s %[2]s </dev/null
else echo "no bash or nc" >&2; exit 127; fi`, host, port)
}

func checkNetwork(t *testing.T, b Backend) {
	addr := b.TCPAddr
	if addr == "" {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
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
		t.Cleanup(func() { ln.Close(); wg.Wait() })
		addr = ln.Addr().String()
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	mustRun(t, b.Name+" control", b.Control, connectScript(host, port))
	// The backend may be another system (a container): it must have a
	// connect tool too, or its refusal would prove nothing.
	mustRun(t, b.Name+" backend", b.Process, "command -v bash >/dev/null 2>&1 || command -v nc >/dev/null 2>&1")
	refused(t, b, "connect to "+addr, connectScript(host, port))
}

func checkProcessBoundary(t *testing.T, b Backend) {
	pid := b.HostPID
	if pid == 0 {
		pid = os.Getpid()
	}
	probe := fmt.Sprintf("kill -0 %d", pid)
	mustRun(t, b.Name+" control", b.Control, probe)
	refused(t, b, "signal a host process", probe)
	see := fmt.Sprintf("test -e /proc/%d/status", pid)
	mustRun(t, b.Name+" control", b.Control, see)
	refused(t, b, "see a host process in /proc", see)
}

func checkEnvScrub(t *testing.T, b Backend) {
	const key = "RUNBOX_CONFORMANCE_SECRET"
	secret := "secret-" + token()
	t.Setenv(key, secret)
	script := `printf '[%s]' "$` + key + `"`
	// Positive control: the probe does print a variable that is passed.
	o := run(t, b.Process, script, []string{key + "=passed"}, nil)
	if o.err != nil || o.code != 0 || o.out != "[passed]" {
		t.Fatalf("%s: an explicitly passed variable: exit %d, err %v, output %q", b.Name, o.code, o.err, o.out)
	}
	o = run(t, b.Process, script, nil, nil)
	if o.err != nil || o.code != 0 {
		t.Fatalf("%s: exit %d, err %v", b.Name, o.code, o.err)
	}
	if o.out != "[]" {
		t.Errorf("%s: the caller's environment reached the process: %q", b.Name, o.out)
	}
}

// checkLifetime starts a descendant that escapes its process group and
// session (setsid, double fork) and holds a lock; the control sees the lock
// held while the command runs, and free as soon as Run has returned.
func checkLifetime(t *testing.T, b Backend) {
	tok := token()
	lock := path.Join(b.WritableDir, "lock-"+tok)
	ready := path.Join(b.WritableDir, "ready-"+tok)
	script := fmt.Sprintf(`( setsid flock %[1]s sh -c 'echo > %[2]s; exec sleep 1000' & ) </dev/null >/dev/null 2>&1
i=0; while [ ! -e %[2]s ]; do i=$((i+1)); [ $i -gt 6000 ] && { echo "descendant never took the lock"; exit 3; }; sleep 0.01; done
echo ready; read line; exit 0`, q(lock), q(ready))
	pr, pw := io.Pipe()
	done := make(chan outcome, 1)
	go func() { done <- run(t, b.Process, script, nil, pr) }()
	// Wait for the lock (the command blocks on stdin until we release it).
	held := false
	for i := 0; i < 12000 && !held; i++ {
		select {
		case o := <-done:
			pw.Close()
			t.Fatalf("%s: the command ended early: exit %d, err %v, output %q", b.Name, o.code, o.err, o.out)
		default:
		}
		o := run(t, b.Control, "test -e "+q(ready), nil, nil)
		held = o.err == nil && o.code == 0
		if !held {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if !held {
		pw.Close()
		<-done
		t.Fatalf("%s: the descendant never took the lock", b.Name)
	}
	// Positive control: flock -n fails (exit 1) while the holder lives.
	o := run(t, b.Control, "flock -n "+q(lock)+" true", nil, nil)
	if o.err != nil || o.code != 1 {
		pw.Close()
		<-done
		t.Fatalf("%s: flock -n while the lock is held: exit %d, err %v, output %q; want 1", b.Name, o.code, o.err, o.out)
	}
	pw.Close()
	if o := <-done; o.err != nil || o.code != 0 {
		t.Fatalf("%s: command: exit %d, err %v, output %q", b.Name, o.code, o.err, o.out)
	}
	o = run(t, b.Control, "flock -n "+q(lock)+" true", nil, nil)
	if o.err != nil || o.code != 0 {
		t.Errorf("%s: an escaped descendant outlived Run: flock -n exit %d, err %v, output %q", b.Name, o.code, o.err, o.out)
	}
	mustRun(t, b.Name+" control", b.Control, "rm -f "+q(lock)+" "+q(ready))
}
