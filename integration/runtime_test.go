//go:build linux

package integration

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/docker"
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
	if _, ok := info.Info.Runtimes[name]; ok {
		return
	}
	msg := "the Engine has no " + name + " runtime, so gVisor sessions cannot be tested: run scripts/gvisor (installs runsc, adds it to /etc/docker/daemon.json, reloads dockerd)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
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
	s := open(t, e, spec).(*docker.Session)
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
