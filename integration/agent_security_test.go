//go:build linux

package integration

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/docker"
	"github.com/runbox-dev/runbox/internal/agent"
)

// The code under test runs as root in the session, beside the agent. These
// tests give it a toolkit (testdata/hostile) and check that it can neither
// drive the agent, nor stand in for it, nor read it.

var (
	hostileOnce sync.Once
	hostileDir  string
	hostileErr  error
)

// hostileBinary builds the attacker's static toolkit once per run and
// returns the directory that holds it.
func hostileBinary(t testing.TB) string {
	t.Helper()
	hostileOnce.Do(func() {
		hostileDir, hostileErr = os.MkdirTemp("", "runbox-hostile-")
		if hostileErr != nil {
			return
		}
		if hostileErr = os.Chmod(hostileDir, 0o755); hostileErr != nil {
			return
		}
		build := exec.Command("go", "build", "-o", filepath.Join(hostileDir, "hostile"), "./testdata/hostile")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			hostileErr = errors.New(string(out))
		}
	})
	require.NoError(t, hostileErr)
	return hostileDir
}

const hostilePath = "/opt/hostile/hostile"

// hostileSpec is a root session with the toolkit mounted read-only.
func hostileSpec(t testing.TB) runbox.Spec {
	spec := baseSpec()
	spec.Mounts = []runbox.Mount{{Source: hostileBinary(t), Target: "/opt/hostile", ReadOnly: true}}
	return spec
}

// helloAndStart is what a process in the session writes to the agent to
// have it run script: a hello and a start frame, as the busybox
// printf reproduction wrote them.
func helloAndStart(t testing.TB, script string) []byte {
	var b bytes.Buffer
	require.NoError(t, agent.WriteJSON(&b, agent.TypeHello, 0, agent.Hello{Version: agent.Version}))
	require.NoError(t, agent.WriteJSON(&b, agent.TypeStart, 1, agent.StartRequest{Args: []string{"sh", "-c", script}}))
	require.NoError(t, agent.WriteFrame(&b, agent.Frame{Type: agent.TypeStdinEOF, ID: 1}))
	return b.Bytes()
}

// assertNoMarkers checks that no attempt left its marker in /tmp.
func assertNoMarkers(t *testing.T, s runbox.Session) {
	t.Helper()
	o := run(t, s, runbox.ShellCommand("ls /tmp; ls /root 2>/dev/null"))
	require.NoError(t, o.err)
	assert.NotContains(t, o.stdout, "pwned", "a process in the session had the agent run a command")
}

func testAgentRefusesSessionPeers(t *testing.T, e *docker.Executor, auth docker.AgentAuth) {
	s := open(t, e, hostileSpec(t))
	require.Equal(t, auth, s.AgentAuth())
	for _, who := range []string{"root", "nobody"} {
		prefix := ""
		if who == "nobody" {
			prefix = "su -s /bin/sh nobody -c "
		}
		o := run(t, s, runbox.ShellCommand(prefix+"'"+hostilePath+" drive /tmp/pwned-drive-"+who+"'"))
		require.NoError(t, o.err, o.stderr)
		t.Logf("drive as %s:\n%s", who, o.stdout)
		// The issue's own reproduction: frames piped into the agent's
		// connect mode.
		o = run(t, s, runbox.Command{
			Args:  []string{"sh", "-c", prefix + "'/dev/.runbox/bin/runbox agent connect'"},
			Stdin: bytes.NewReader(helloAndStart(t, "id; echo pwned > /tmp/pwned-connect-"+who)),
		})
		require.NoError(t, o.err)
		assert.NotContains(t, o.stdout, "uid=", "as %s", who)
	}
	assertNoMarkers(t, s)
}

// TestAgentRefusesSessionPeers: no process in the session, root or not,
// can have the agent run anything.
func TestAgentRefusesSessionPeers(t *testing.T) {
	testAgentRefusesSessionPeers(t, agentExecutor(t), docker.AgentAuthKernel)
}

func TestAgentRefusesSessionPeersRemote(t *testing.T) {
	testAgentRefusesSessionPeers(t, agentExecutor(t, docker.WithHost(tcpProxy(t))), docker.AgentAuthKey)
}

// startImpostor runs the toolkit's impostor in the background of s and
// waits until it has taken every place it could.
func startImpostor(t *testing.T, s runbox.Session) {
	t.Helper()
	o := run(t, s, runbox.ShellCommand(hostilePath+" impostor /tmp >/tmp/impostor.log 2>&1 &"))
	require.NoError(t, o.err)
	require.Eventually(t, func() bool {
		return run(t, s, argv("test", "-e", "/tmp/ready")).res.ExitCode == 0
	}, 30*time.Second, 20*time.Millisecond, "the impostor did not start")
	o = run(t, s, argv("cat", "/tmp/impostor.log"))
	t.Logf("impostor:\n%s", o.stdout)
}

// assertNothingStolen checks that the impostor saw no secret.
func assertNothingStolen(t *testing.T, s runbox.Session) {
	t.Helper()
	o := run(t, s, runbox.ShellCommand("cat /tmp/stolen"))
	require.NoError(t, o.err)
	assert.NotContains(t, o.stdout, "s3cr3t", "the impostor received the caller's environment")
}

// TestAgentCannotBeImpersonated: a root process that renames the agent's
// socket and listens in its place, or offers sockets of its own, gets
// neither the caller's commands nor a say in their results.
func TestAgentCannotBeImpersonated(t *testing.T) {
	e := agentExecutor(t)
	s := open(t, e, hostileSpec(t))
	startImpostor(t, s)

	secret := runbox.Command{Args: []string{"sh", "-c", "echo real; exit 3"}, Env: []string{"SECRET=s3cr3t"}}
	o := run(t, s, secret)
	require.NoError(t, o.err)
	assert.Equal(t, runbox.Result{ExitCode: 3}, o.res)
	assert.Equal(t, "real\n", o.stdout)

	// A caller that finds the session again (another process) too.
	other := agentExecutor(t)
	s2, err := other.Session(context.Background(), s.ID())
	require.NoError(t, err)
	o = run(t, s2, secret)
	require.NoError(t, o.err)
	assert.Equal(t, runbox.Result{ExitCode: 3}, o.res)
	assert.Equal(t, "real\n", o.stdout)

	r := cli(t, nil, "exec", "-e", "SECRET=s3cr3t", s.ID(), "--", "sh", "-c", "echo real; exit 3")
	assert.Equal(t, 3, r.code, r.stderr)
	assert.Equal(t, "real\n", r.stdout)

	assertNothingStolen(t, s)
}

// TestAgentRemoteBridgeNeverAcceptsAnImpostor: through a remote Engine the
// agent listens inside the session, where root can take its socket. The
// caller then fails (the session is denied service) but accepts no forged
// result and sends no secret.
func TestAgentRemoteBridgeNeverAcceptsAnImpostor(t *testing.T) {
	e := agentExecutor(t, docker.WithHost(tcpProxy(t)))
	s := open(t, e, hostileSpec(t))
	startImpostor(t, s)

	other := agentExecutor(t, docker.WithHost(tcpProxy(t)))
	s2, err := other.Session(context.Background(), s.ID())
	require.NoError(t, err)
	o := run(t, s2, runbox.Command{Args: []string{"sh", "-c", "echo real; exit 3"}, Env: []string{"SECRET=s3cr3t"}})
	require.Error(t, o.err, "a new connection reaches only the impostor")
	assert.ErrorIs(t, o.err, docker.ErrAgentUnavailable)
	assert.Empty(t, o.stdout, "no forged output")

	// The established connection is untouched by the swap.
	o = run(t, s, runbox.Command{Args: []string{"sh", "-c", "echo real; exit 3"}, Env: []string{"SECRET=s3cr3t"}})
	require.NoError(t, o.err)
	assert.Equal(t, runbox.Result{ExitCode: 3}, o.res)
	assertNothingStolen(t, s)
}

// TestAgentIsNotReadable: root in the session cannot read the agent's
// environment, memory or descriptors, nor trace it.
func TestAgentIsNotReadable(t *testing.T) {
	e := agentExecutor(t)
	s := open(t, e, hostileSpec(t))
	o := run(t, s, argv(hostilePath, "peek"))
	require.NoError(t, o.err)
	t.Logf("peek:\n%s", o.stdout)
	for _, what := range []string{"environ", "mem", "fd", "ptrace"} {
		assert.Contains(t, o.stdout, what+": denied", what)
	}
}

// TestAgentSessionUser: with Spec.User the agent and every command run as
// that user; the agent holds no more authority than the commands.
func TestAgentSessionUser(t *testing.T) {
	e := agentExecutor(t)
	spec := hostileSpec(t)
	spec.User = "65534:65534"
	s := open(t, e, spec)
	require.True(t, s.Agent())
	o := run(t, s, runbox.ShellCommand("id -u; id -g; grep -a -c 'agent' /proc/1/cmdline; stat -c %u /proc/1"))
	require.NoError(t, o.err, o.stderr)
	assert.Equal(t, "65534\n65534\n1\n", strings.Join(strings.SplitAfter(o.stdout, "\n")[:3], ""))
	o = run(t, s, argv(hostilePath, "drive", "/tmp/pwned-user"))
	require.NoError(t, o.err)
	assertNoMarkers(t, s)
}

// TestAgentGivesCommandsOnlyTheirStreams: a command, with or without a
// terminal, and the lifetime process start with descriptors 0, 1 and 2
// only; none of the agent's own (its connection, its watch) reaches them.
func TestAgentGivesCommandsOnlyTheirStreams(t *testing.T) {
	e := agentExecutor(t)
	s := open(t, e, hostileSpec(t))
	// ls lists its own descriptors: 3 is the directory it reads them from.
	list := []string{"ls", "/proc/self/fd"}
	o := run(t, s, runbox.Command{Args: list})
	require.NoError(t, o.err)
	assert.Equal(t, "0\n1\n2\n3\n", o.stdout)

	o = run(t, s, runbox.Command{Args: list, TTY: true})
	require.NoError(t, o.err)
	assert.Equal(t, "0  1  2  3\r\n", o.stdout)

	o = run(t, s, runbox.ShellCommand(`ls /proc/$(pidof sleep)/fd >/tmp/fds; echo $(cat /tmp/fds)`))
	require.NoError(t, o.err)
	assert.Equal(t, "0 1 2\n", o.stdout, "the lifetime process")

	// Without input and with stdout discarded, stdin and stdout are the
	// agent's /dev/null, dup'd: the agent's own descriptor of it stays
	// behind, for root and for nobody.
	for _, user := range []string{"", "nobody"} {
		var errs bytes.Buffer
		_, err := s.Run(context.Background(), runbox.Command{Args: []string{"sh", "-c", "ls /proc/self/fd 1>&2"}, User: user},
			runbox.Streams{Stderr: &errs})
		require.NoError(t, err)
		assert.Equal(t, "0\n1\n2\n3\n", errs.String(), "user %q", user)
	}
}

// TestAgentLargeCommands: a command as large as Linux can exec runs
// through the agent; a larger one fails on its own (ErrStart when the
// kernel refuses it, ErrInvalidCommand when it cannot be exec'd at all),
// and the session stays usable.
func TestAgentLargeCommands(t *testing.T) {
	e := agentExecutor(t)
	s := open(t, e, baseSpec())
	args := func(n int) []string {
		a := []string{"sh", "-c", `echo $#`, "sh"}
		for range n {
			a = append(a, "0123456789abcdef")
		}
		return a
	}
	o := run(t, s, runbox.Command{Args: args(60_000)})
	require.NoError(t, o.err, "1 MiB of arguments, more than one frame")
	assert.Equal(t, "60000\n", o.stdout)

	o = run(t, s, runbox.Command{Args: []string{"sh", "-c", `echo ${#BIG}`}, Env: []string{"BIG=" + strings.Repeat("x", 100_000)}})
	require.NoError(t, o.err)
	assert.Equal(t, "100000\n", o.stdout)

	for name, cmd := range map[string]runbox.Command{
		"1 MiB variable":          {Args: []string{"true"}, Env: []string{"BIG=" + strings.Repeat("x", 1<<20)}},
		"100 000 arguments of 16": {Args: args(100_000)},
	} {
		o := run(t, s, cmd)
		require.ErrorIs(t, o.err, runbox.ErrStart, name)
		assert.Contains(t, o.err.Error(), "argument list too long", name)
		assert.Equal(t, -1, o.res.ExitCode)
	}
	o = run(t, s, runbox.Command{Args: []string{"true"}, Env: []string{"BIG=" + strings.Repeat("x", 7<<20)}})
	require.ErrorIs(t, o.err, runbox.ErrInvalidCommand)

	o = run(t, s, argv("echo", "usable"))
	require.NoError(t, o.err)
	assert.Equal(t, "usable\n", o.stdout)
}

// TestAgentCannotBeKilledFromInside: root in the session cannot kill or
// stop the agent; the session keeps serving.
func TestAgentCannotBeKilledFromInside(t *testing.T) {
	e := agentExecutor(t)
	s := open(t, e, baseSpec())
	o := run(t, s, runbox.ShellCommand(`pid=$(pidof runbox | tr ' ' '\n' | sort -n | head -1); echo $pid; kill -KILL $pid; kill -STOP $pid; true`))
	require.NoError(t, o.err)
	assert.Equal(t, "1\n", o.stdout, "the agent is PID 1")
	for range 3 {
		o = run(t, s, argv("echo", "alive"))
		require.NoError(t, o.err)
		assert.Equal(t, "alive\n", o.stdout)
	}
}
