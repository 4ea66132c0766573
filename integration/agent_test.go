//go:build linux

package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/docker"
)

// agentExecutor requires the agent (the static runbox binary built for the
// CLI tests).
func agentExecutor(t testing.TB, opts ...docker.Option) *docker.Executor {
	t.Helper()
	bin := runboxBinary(t)
	return newExecutor(t, append([]docker.Option{docker.WithAgent(bin), docker.WithAgentRequired()}, opts...)...)
}

func TestAgentRun(t *testing.T) {
	e := agentExecutor(t)
	spec := baseSpec()
	spec.Init = false // the agent is PID 1
	spec.Env = []string{"FROM_SPEC=1"}
	s := open(t, e, spec)
	require.True(t, s.Agent())

	o := run(t, s, runbox.ShellCommand("echo out; echo err >&2; exit 7"))
	require.NoError(t, o.err)
	assert.Equal(t, runbox.Result{ExitCode: 7}, o.res)
	assert.Equal(t, "out\n", o.stdout)
	assert.Equal(t, "err\n", o.stderr)

	o = run(t, s, argv("echo", "$HOME", "*"))
	assert.Equal(t, "$HOME *\n", o.stdout)

	o = run(t, s, runbox.Command{Args: []string{"env"}, CleanEnv: true, Env: []string{"ONLY=this"}})
	require.NoError(t, o.err)
	assert.Equal(t, "ONLY=this\n", o.stdout, "CleanEnv is exact with the agent")

	o = run(t, s, runbox.Command{Args: []string{"env"}, Env: []string{"ADDED=1"}})
	require.NoError(t, o.err)
	assert.Contains(t, o.stdout, "ADDED=1\n")
	assert.Contains(t, o.stdout, "FROM_SPEC=1\n")
	assert.Contains(t, o.stdout, "RUNBOX_FROM_IMAGE=1\n")

	o = run(t, s, runbox.Command{Args: []string{"pwd"}, Dir: "/tmp"})
	assert.Equal(t, "/tmp\n", o.stdout)

	o = run(t, s, runbox.Command{Args: []string{"cat"}, Stdin: strings.NewReader("in\n")})
	assert.Equal(t, "in\n", o.stdout)
	o = run(t, s, argv("cat"))
	require.NoError(t, o.err, "nil stdin is EOF at once")

	o = run(t, s, runbox.ShellCommand("kill -TERM $$"))
	require.NoError(t, o.err)
	assert.Equal(t, runbox.Result{ExitCode: 143, Signal: "SIGTERM"}, o.res, "the agent reports the signal")

	for name, cmd := range map[string]runbox.Command{
		"not found":      argv("no-such-program"),
		"not executable": argv("/etc/passwd"),
		"bad dir":        {Args: []string{"true"}, Dir: "/no/such/dir"},
	} {
		o := run(t, s, cmd)
		assert.ErrorIs(t, o.err, runbox.ErrStart, name)
		assert.Equal(t, -1, o.res.ExitCode, name)
	}

	// Binary data both ways, byte-exact, larger than the stdin window.
	data := make([]byte, 3<<20+5)
	_, _ = rand.Read(data)
	var out bytes.Buffer
	_, err := s.Run(context.Background(), runbox.Command{Args: []string{"cat"}, Stdin: bytes.NewReader(data)}, runbox.Streams{Stdout: &out})
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, out.Bytes()))

	// A command that never reads its stdin cannot stall the connection.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = s.Run(ctx, runbox.Command{Args: []string{"sleep", "1000"}, Stdin: bytes.NewReader(make([]byte, 8<<20))}, runbox.Streams{})
	assert.ErrorIs(t, err, runbox.ErrCancelled)
	o = run(t, s, argv("echo", "alive"))
	assert.Equal(t, "alive\n", o.stdout)
}

func TestAgentCancellationKillsTheProcessGroup(t *testing.T) {
	e := agentExecutor(t)
	s := open(t, e, baseSpec())
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	errc := make(chan error, 1)
	go func() {
		_, err := s.Run(ctx, runbox.ShellCommand("sleep 1001 & sleep 1002 & echo started; wait"), runbox.Streams{Stdout: &out})
		errc <- err
	}()
	require.Eventually(t, func() bool { return out.String() == "started\n" }, time.Minute, 10*time.Millisecond)
	cancel()
	err := <-errc
	require.ErrorIs(t, err, runbox.ErrCancelled)
	require.ErrorIs(t, err, context.Canceled)
	top, err := e.Client().ContainerTop(context.Background(), s.ID(), client.ContainerTopOptions{})
	require.NoError(t, err)
	assert.False(t, topHas(top, "sleep 1001") || topHas(top, "sleep 1002"), "no process of the cancelled command remains: %v", top.Processes)
	assert.Equal(t, runbox.LifetimeContainmentBestEffort, s.LifetimeContainment())
}

func TestAgentTTY(t *testing.T) {
	e := agentExecutor(t)
	s := open(t, e, baseSpec())
	resize := make(chan runbox.TermSize, 1)
	var out syncBuffer
	script := `stty size; test -t 0 && echo tty; until [ "$(stty size)" = "50 132" ]; do sleep 0.02; done; echo resized`
	done := make(chan error, 1)
	go func() {
		_, err := s.Run(context.Background(), runbox.Command{Args: []string{"sh", "-c", script}, TTY: true,
			TermSize: runbox.TermSize{Rows: 40, Cols: 100}, Resize: resize}, runbox.Streams{Stdout: &out})
		done <- err
	}()
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "tty") }, time.Minute, 10*time.Millisecond)
	assert.True(t, strings.HasPrefix(out.String(), "40 100\r\n"), "the initial size is there from the start: %q", out.String())
	resize <- runbox.TermSize{Rows: 50, Cols: 132}
	require.NoError(t, <-done)
	assert.Contains(t, out.String(), "resized")
}

func TestAgentKilledFromOutside(t *testing.T) {
	e := agentExecutor(t)
	s := open(t, e, baseSpec())
	errc := make(chan error, 1)
	var out syncBuffer
	go func() {
		_, err := s.Run(context.Background(), runbox.ShellCommand("echo started; sleep 1000"), runbox.Streams{Stdout: &out})
		errc <- err
	}()
	require.Eventually(t, func() bool { return out.String() != "" }, time.Minute, 10*time.Millisecond)
	_, err := e.Client().ContainerKill(context.Background(), s.ID(), client.ContainerKillOptions{Signal: "KILL"})
	require.NoError(t, err)
	select {
	case err := <-errc:
		require.Error(t, err)
		assert.ErrorIs(t, err, runbox.ErrSessionEnded)
	case <-time.After(30 * time.Second):
		require.FailNow(t, "a Run on a killed agent did not fail")
	}
	_, err = s.Run(context.Background(), argv("true"), runbox.Streams{})
	assert.Error(t, err)
}

func TestAgentNeverInSnapshot(t *testing.T) {
	e := agentExecutor(t)
	cli := e.Client()
	s := open(t, e, baseSpec())
	o := run(t, s, runbox.ShellCommand("echo layer > /layerfile; ls /dev/.runbox"))
	require.NoError(t, o.err)
	require.Contains(t, o.stdout, "bin")
	img, err := s.Snapshot(context.Background(), runbox.SnapshotOptions{})
	require.NoError(t, err)
	removeImage(t, cli, img.ID)
	ii, err := cli.ImageInspect(context.Background(), img.ID)
	require.NoError(t, err)
	assert.Equal(t, sleeper, []string(ii.Config.Entrypoint), "the snapshot's command is the lifetime process, not the agent")
	assert.Empty(t, ii.Config.Volumes)

	plain := newExecutor(t, docker.WithoutAgent())
	s2 := open(t, plain, runbox.Spec{Image: img.ID, Labels: runLabels()})
	o = run(t, s2, runbox.ShellCommand("cat /layerfile; ls -a / /dev | grep -c runbox"))
	require.NoError(t, o.err)
	assert.Equal(t, "layer\n0\n", o.stdout, "nothing of the agent is in the snapshot")
	diff, err := cli.ContainerDiff(context.Background(), s.ID(), client.ContainerDiffOptions{})
	require.NoError(t, err)
	for _, ch := range diff.Changes {
		assert.NotContains(t, ch.Path, "runbox", "the writable layer holds nothing of the agent")
	}
}

func TestAgentThousandRunsLeakNothing(t *testing.T) {
	e := agentExecutor(t)
	s := open(t, e, baseSpec())
	fds := func() int {
		o := run(t, s, runbox.ShellCommand("ls /proc/1/fd | wc -l"))
		require.NoError(t, o.err)
		n, err := strconv.Atoi(strings.TrimSpace(o.stdout))
		require.NoError(t, err)
		return n
	}
	for range 20 {
		_ = run(t, s, argv("true")) // warm up
	}
	beforeFDs, beforeG := fds(), runtime.NumGoroutine()
	for i := range 1000 {
		res, err := s.Run(context.Background(), argv("true"), runbox.Streams{})
		require.NoError(t, err, "run %d", i)
		require.Equal(t, 0, res.ExitCode, "run %d", i)
	}
	// The agent (PID 1) closes a command's descriptors as it ends; its
	// runtime's own may come and go by a few, but 1000 runs add nothing.
	assert.Eventually(t, func() bool { return fds() <= beforeFDs+4 }, 10*time.Second, 100*time.Millisecond,
		"the agent's file descriptors: before %d, now %d", beforeFDs, fds())
	assert.Eventually(t, func() bool { return runtime.NumGoroutine() <= beforeG+2 }, 10*time.Second, 50*time.Millisecond,
		"the caller's goroutines: before %d, now %d", beforeG, runtime.NumGoroutine())
}

func TestAgentLifetimeProcessEnds(t *testing.T) {
	e := agentExecutor(t)
	spec := baseSpec()
	spec.Process = []string{"sh", "-c", "exit 5"}
	s, err := e.Open(context.Background(), spec)
	if err == nil {
		t.Cleanup(func() { _ = s.Close(context.Background()) })
		require.Eventually(t, func() bool {
			_, err = s.Run(context.Background(), argv("true"), runbox.Streams{})
			return err != nil
		}, time.Minute, 20*time.Millisecond)
	}
	require.ErrorIs(t, err, runbox.ErrSessionEnded)
	assert.Contains(t, err.Error(), "code 5", "the lifetime process's status is passed on")
	if s == nil {
		assert.Empty(t, containersOfRun(t, e.Client()), "a failed Open leaves no container")
	}
}

func TestAgentFallbackAndRequired(t *testing.T) {
	// A dynamically linked program cannot be the agent in a libc-less image.
	dynamic := "/bin/ls"
	e := newExecutor(t, docker.WithAgent(dynamic))
	s := open(t, e, baseSpec())
	assert.False(t, s.Agent(), "falls back to plain exec")
	assert.Equal(t, runbox.LifetimeContainmentUnspecified, s.LifetimeContainment())
	o := run(t, s, argv("echo", "plain"))
	assert.Equal(t, "plain\n", o.stdout)

	req := newExecutor(t, docker.WithAgent(dynamic), docker.WithAgentRequired())
	_, err := req.Open(context.Background(), baseSpec())
	assert.ErrorIs(t, err, docker.ErrAgentUnavailable)
	assert.Len(t, containersOfRun(t, e.Client()), 1, "only the fallback session; the refused Open created nothing")
}

// tcpProxy exposes the local Engine on 127.0.0.1 over TCP, as a remote
// Engine would be reached: no shared filesystem is assumed.
func tcpProxy(t *testing.T) string {
	addr, _ := droppableProxy(t)
	return addr
}

// droppableProxy is a TCP proxy to the local Engine, standing in for a
// remote one; drop cuts every connection open through it, as a restarted
// Engine or a proxy's idle timeout would.
func droppableProxy(t *testing.T) (addr string, drop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	drop = func() {
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		conns = nil
		mu.Unlock()
	}
	t.Cleanup(func() {
		ln.Close()
		drop()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("unix", "/var/run/docker.sock")
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, u)
			mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(u, c); _ = u.(*net.UnixConn).CloseWrite() }()
			go func() { defer wg.Done(); _, _ = io.Copy(c, u); _ = c.(*net.TCPConn).CloseWrite() }()
		}
	}()
	return "tcp://" + ln.Addr().String(), drop
}

// TestAgentReconnects: when the connection to a running agent breaks, the
// command in flight fails with ErrTransport and is killed by the agent,
// and the next call connects again.
func TestAgentReconnects(t *testing.T) {
	addr, drop := droppableProxy(t)
	e := agentExecutor(t, docker.WithHost(addr))
	s := open(t, e, baseSpec())
	errc := make(chan error, 1)
	var out syncBuffer
	go func() {
		_, err := s.Run(context.Background(), runbox.ShellCommand("echo started; exec sleep 1005"), runbox.Streams{Stdout: &out})
		errc <- err
	}()
	require.Eventually(t, func() bool { return out.String() != "" }, time.Minute, 10*time.Millisecond)
	drop()
	select {
	case err := <-errc:
		require.ErrorIs(t, err, runbox.ErrTransport)
	case <-time.After(30 * time.Second):
		require.FailNow(t, "a Run on a dropped connection did not fail")
	}
	for range 3 {
		o := run(t, s, runbox.ShellCommand("echo again; exit 4"))
		require.NoError(t, o.err, "a later call connects again")
		assert.Equal(t, runbox.Result{ExitCode: 4}, o.res)
		assert.Equal(t, "again\n", o.stdout)
	}
	require.Eventually(t, func() bool {
		top, err := e.Client().ContainerTop(context.Background(), s.ID(), client.ContainerTopOptions{})
		require.NoError(t, err)
		return !topHas(top, "sleep 1005")
	}, 30*time.Second, 50*time.Millisecond, "the command of the lost connection still runs")
}

func TestAgentOnRemoteStyleEngine(t *testing.T) {
	e := agentExecutor(t, docker.WithHost(tcpProxy(t)))
	s := open(t, e, baseSpec())
	require.True(t, s.Agent())
	o := run(t, s, runbox.Command{Args: []string{"sh", "-c", "cat; echo done >&2"}, Stdin: strings.NewReader("over tcp\n")})
	require.NoError(t, o.err)
	assert.Equal(t, "over tcp\n", o.stdout)
	assert.Equal(t, "done\n", o.stderr)

	c, err := e.Client().ContainerInspect(context.Background(), s.ID(), client.ContainerInspectOptions{})
	require.NoError(t, err)
	for _, m := range c.Container.Mounts {
		assert.NotEqual(t, "bind", string(m.Type), "no bind mounts with a remote Engine: %+v", m)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err = s.Run(ctx, argv("sleep", "1003"), runbox.Streams{})
	require.ErrorIs(t, err, runbox.ErrCancelled)
	top, err := e.Client().ContainerTop(context.Background(), s.ID(), client.ContainerTopOptions{})
	require.NoError(t, err)
	assert.False(t, topHas(top, "sleep 1003"))

	// The copy went into a volume. The Engine leaves the volume's empty
	// mountpoint in the layer (hidden by /dev at run time); nothing of the
	// agent itself is there.
	diff, err := e.Client().ContainerDiff(context.Background(), s.ID(), client.ContainerDiffOptions{})
	require.NoError(t, err)
	for _, ch := range diff.Changes {
		assert.False(t, strings.HasPrefix(ch.Path, "/dev/.runbox/"), "layer change %+v", ch)
	}
}

func TestAgentReattach(t *testing.T) {
	e := agentExecutor(t)
	s := open(t, e, baseSpec())
	other := agentExecutor(t)
	s2, err := other.Session(context.Background(), s.ID())
	require.NoError(t, err)
	require.True(t, s2.Agent())
	o := run(t, s2, runbox.Command{Args: []string{"env"}, CleanEnv: true})
	require.NoError(t, o.err)
	assert.Empty(t, o.stdout)
}

func TestAgentInitDuty(t *testing.T) {
	e := agentExecutor(t)
	spec := baseSpec()
	spec.Init = false // the agent itself is PID 1
	s := open(t, e, spec)

	o := run(t, s, argv("cat", "/proc/1/cmdline"))
	require.NoError(t, o.err)
	assert.Contains(t, o.stdout, "agent\x00init", "the agent is PID 1")

	// Orphans are reaped: background children outlive their parent
	// command and are then collected, leaving no zombie behind.
	o = run(t, s, runbox.ShellCommand("(sleep 0.1 >/dev/null 2>&1 &) ; exit 0"))
	require.NoError(t, o.err)
	require.Eventually(t, func() bool {
		o := run(t, s, runbox.ShellCommand(`grep -l '^State:.*Z' /proc/[0-9]*/status | wc -l
for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline; echo; done | grep -c '^sleep 0.1'`))
		return o.stdout == "0\n0\n"
	}, 30*time.Second, 50*time.Millisecond, "zombies or orphans remain")

	// Signals to the session reach the lifetime process, whose end ends
	// the session and is reported.
	_, err := e.Client().ContainerKill(context.Background(), s.ID(), client.ContainerKillOptions{Signal: "TERM"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err = s.Run(context.Background(), argv("true"), runbox.Streams{})
		return errors.Is(err, runbox.ErrSessionEnded)
	}, 30*time.Second, 20*time.Millisecond)
	assert.Contains(t, err.Error(), "code 143", "the lifetime process died of the forwarded SIGTERM")
}
