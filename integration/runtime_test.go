//go:build linux

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/docker"
	"github.com/runbox-dev/runbox/runboxtest"
)

// gvisor is the runtime name .ci/run (scripts/gvisor) gives runsc.
const gvisor = "runsc"

// needRuntime skips (outside CI) or fails when the Engine has no runtime
// called name, or cannot run a container with it.
func needRuntime(t testing.TB, e *docker.Executor, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	info, err := e.Client().Info(ctx, client.InfoOptions{})
	require.NoError(t, err)
	msg := "the Engine has no " + name + " runtime, so gVisor sessions cannot be tested: run scripts/gvisor (installs runsc, adds it to /etc/docker/daemon.json, reloads dockerd)"
	if _, ok := info.Info.Runtimes[name]; ok {
		// Configured is not runnable (gVisor needs ptrace or KVM, which a
		// nested machine may lack): one container says which.
		runtimeOnce.Do(func() { runtimeErr = tryRuntime(e, name) })
		if runtimeErr == nil {
			return
		}
		msg = "the Engine has a " + name + " runtime but cannot run a container with it: " + runtimeErr.Error()
	}
	if os.Getenv("CI") == "true" {
		require.FailNow(t, msg)
	}
	t.Skip(msg)
}

var (
	runtimeOnce sync.Once
	runtimeErr  error
)

// tryRuntime runs `true` in a container on the runtime.
func tryRuntime(e *docker.Executor, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cli := e.Client()
	res, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config:     &container.Config{Image: fixtureRef, Entrypoint: []string{"true"}, Labels: runLabels()},
		HostConfig: &container.HostConfig{NetworkMode: "none", Runtime: name},
	})
	if err != nil {
		return err
	}
	defer cli.ContainerRemove(context.Background(), res.ID, client.ContainerRemoveOptions{Force: true})
	if _, err := cli.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
		return err
	}
	wait := cli.ContainerWait(ctx, res.ID, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	select {
	case r := <-wait.Result:
		if r.StatusCode != 0 {
			return fmt.Errorf("`true` exited with status %d", r.StatusCode)
		}
		return nil
	case err := <-wait.Error:
		return err
	}
}

// An unknown runtime is refused before anything is created, and the error
// names the runtimes the Engine has.
func TestOpenUnknownRuntime(t *testing.T) {
	e := newExecutor(t)
	spec := baseSpec()
	spec.Runtime = "no-such-runtime"
	spec.Labels = map[string]string{labelRun: runID, "runbox.test/unknown-runtime": "1"}
	_, err := e.Open(context.Background(), spec)
	require.ErrorIs(t, err, runbox.ErrInvalidSpec)
	assert.Contains(t, err.Error(), `unknown runtime "no-such-runtime"`)
	assert.Contains(t, err.Error(), "runc", "the Engine's runtimes are listed")
	res, err := e.Client().ContainerList(context.Background(), client.ContainerListOptions{
		All: true, Filters: client.Filters{}.Add("label", "runbox.test/unknown-runtime=1"),
	})
	require.NoError(t, err)
	assert.Empty(t, res.Items, "nothing was created")
}

// A gVisor session runs commands on gVisor's kernel through the agent,
// which it reaches over an exec (no host socket reaches inside gVisor).
func TestGVisorSession(t *testing.T) {
	e := agentExecutor(t)
	needRuntime(t, e, gvisor)
	spec := baseSpec()
	spec.Init = false
	spec.Runtime = gvisor
	s := open(t, e, spec)
	assert.True(t, s.Agent())
	assert.Equal(t, docker.AgentAuthKey, s.AgentAuth(), "gVisor's sockets are its own: the agent is reached over an exec with the session key")

	o := run(t, s, runbox.ShellCommand("dmesg | head -1; exit 3"))
	require.NoError(t, o.err)
	assert.Equal(t, 3, o.res.ExitCode)
	assert.Contains(t, o.stdout, "gVisor")

	g, err := s.Guarantees(context.Background())
	require.NoError(t, err)
	assert.Equal(t, runbox.KernelGVisor, g.Kernel)
	assert.Contains(t, g.Mechanisms, "runtime=runsc")
}

// The issue's own check: a session opened on runsc from the CLI runs its
// commands on gVisor's kernel; hardening flags reach the session.
func TestCLIRuntimeAndHardening(t *testing.T) {
	needRuntime(t, newExecutor(t), gvisor)
	r := cli(t, nil, "open", runLabelFlag(), "--runtime", gvisor, fixtureRef, "--", "sleep", "1000000")
	require.Equal(t, 0, r.code, r.stderr)
	id := strings.TrimSpace(r.stdout)
	t.Cleanup(func() { r := cli(t, nil, "close", id); assert.Equal(t, 0, r.code, r.stderr) })
	r = cli(t, nil, "exec", id, "--", "dmesg")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "Starting gVisor")
	r = cli(t, nil, "inspect", "--json", id)
	require.Equal(t, 0, r.code, r.stderr)
	var shown []struct {
		Runtime    string            `json:"runtime"`
		Guarantees runbox.Guarantees `json:"guarantees"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &shown), r.stdout)
	require.Len(t, shown, 1)
	assert.Equal(t, gvisor, shown[0].Runtime)
	assert.Equal(t, runbox.KernelGVisor, shown[0].Guarantees.Kernel)
	assert.True(t, shown[0].Guarantees.NetworkBoundary)
	r = cli(t, nil, "inspect", id)
	assert.Contains(t, r.stdout, "kernel gvisor")

	r = cli(t, nil, "open", runLabelFlag(), "--read-only", "--tmpfs", "/tmp:size=8m", "--cap-drop", "ALL",
		"--security-opt", "no-new-privileges", fixtureRef, "--", "sleep", "1000000")
	require.Equal(t, 0, r.code, r.stderr)
	hid := strings.TrimSpace(r.stdout)
	t.Cleanup(func() { r := cli(t, nil, "close", hid); assert.Equal(t, 0, r.code, r.stderr) })
	r = cli(t, nil, "exec", hid, "--", "sh", "-c", "echo x > /tmp/ok && cat /tmp/ok && grep NoNewPrivs /proc/self/status && chroot / true")
	assert.Equal(t, "x\nNoNewPrivs:\t1\n", r.stdout)
	assert.NotEqual(t, 0, r.code, "chroot needs a dropped capability")
	r = cli(t, nil, "inspect", hid)
	assert.Contains(t, r.stdout, "kernel host")
	assert.Contains(t, r.stdout, "read-only root; no new privileges; capabilities none")
	r = cli(t, nil, "exec", hid, "--", "sh", "-c", "echo x > /f")
	assert.NotEqual(t, 0, r.code, "the root filesystem is read-only")

	r = cli(t, nil, "open", runLabelFlag(), "--runtime", "no-such-runtime", fixtureRef)
	assert.Equal(t, 125, r.code)
	assert.Contains(t, r.stderr, `unknown runtime "no-such-runtime"`)
	assert.Contains(t, r.stderr, gvisor)
}

// Cancellation, streaming processes, Snapshot and Close behave under
// gVisor as under runc.
func TestGVisorLifecycle(t *testing.T) {
	e := agentExecutor(t)
	needRuntime(t, e, gvisor)
	spec := baseSpec()
	spec.Init = false
	spec.Runtime = gvisor
	s := open(t, e, spec)

	t.Run("cancel kills the process group", func(t *testing.T) {
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
		// gVisor's processes are its own: ask its ps, not the Engine's top.
		// Positive control: ps lists this very probe.
		o := run(t, s, runbox.ShellCommand("ps -o args"))
		require.NoError(t, o.err)
		assert.Contains(t, o.stdout, "ps -o args")
		assert.False(t, strings.Contains(o.stdout, "sleep 1001") || strings.Contains(o.stdout, "sleep 1002"), "no process of the cancelled command remains: %s", o.stdout)
	})

	t.Run("streaming processes", func(t *testing.T) {
		runboxtest.RunLifecycle(t, runboxtest.Lifecycle{
			Name: "gVisor session",
			Start: func(ctx context.Context, script string) (runbox.StreamingProcess, error) {
				return s.Start(ctx, runbox.ShellCommand(script))
			},
			Usable: func(ctx context.Context) error {
				ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				_, err := s.Run(ctx, argv("true"), runbox.Streams{})
				return err
			},
		})
	})

	t.Run("collect", func(t *testing.T) {
		runboxtest.RunCollect(t, runboxtest.CollectBackend{Name: "gVisor session", Runner: s, ScratchDir: "/tmp"})
	})

	t.Run("snapshot", func(t *testing.T) {
		o := run(t, s, runbox.ShellCommand("echo layer > /layerfile"))
		require.NoError(t, o.err)
		img, err := s.Snapshot(context.Background(), runbox.SnapshotOptions{})
		require.NoError(t, err)
		removeImage(t, e.Client(), img.ID)
		next := spec
		next.Image = img.ID
		s2 := open(t, newExecutor(t, docker.WithoutAgent()), next)
		o = run(t, s2, runbox.ShellCommand("cat /layerfile; ls -a / /dev | grep -c runbox"))
		require.NoError(t, o.err)
		assert.Equal(t, "layer\n0\n", o.stdout, "the layer is in the snapshot, nothing of the agent is")
	})

	t.Run("close after cancellation", func(t *testing.T) {
		s3, err := e.Open(context.Background(), spec)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		require.NoError(t, s3.Close(ctx))
		_, err = e.Client().ContainerInspect(context.Background(), s3.ID(), client.ContainerInspectOptions{})
		assert.True(t, cerrdefs.IsNotFound(err), "the container is gone: %v", err)
		_, err = s3.Run(context.Background(), argv("true"), runbox.Streams{})
		assert.ErrorIs(t, err, runbox.ErrSessionClosed)
	})
}

// Without the agent a gVisor session runs commands through plain Engine
// exec, with the Engine's init when asked.
func TestGVisorPlainExec(t *testing.T) {
	e := newExecutor(t, docker.WithoutAgent())
	needRuntime(t, e, gvisor)
	spec := baseSpec() // Init: the Engine's init is PID 1
	spec.Runtime = gvisor
	s := open(t, e, spec)
	require.False(t, s.Agent())
	o := run(t, s, runbox.ShellCommand("dmesg | head -1; cat /proc/1/cmdline | tr '\\0' ' '"))
	require.NoError(t, o.err)
	assert.Contains(t, o.stdout, "gVisor")
	assert.Contains(t, o.stdout, "docker-init")
	g, err := s.Guarantees(context.Background())
	require.NoError(t, err)
	assert.Equal(t, runbox.KernelGVisor, g.Kernel)
	assert.Equal(t, runbox.LifetimeContainmentUnspecified, g.Lifetime)
}
