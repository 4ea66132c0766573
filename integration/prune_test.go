//go:build linux

package integration

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox/docker"
	"github.com/runbox-dev/runbox/internal/procstart"
)

// TestCLIPruneTellsAReusedPid: a session whose owner died while an
// unrelated process got the owner's pid is pruned; the session of the
// process that really has that pid and start time stays.
func TestCLIPruneTellsAReusedPid(t *testing.T) {
	needEngine(t)
	sleep := exec.Command("sleep", "1000")
	require.NoError(t, sleep.Start())
	t.Cleanup(func() { _ = sleep.Process.Kill(); _ = sleep.Wait() })
	st, err := procstart.Of(sleep.Process.Pid)
	require.NoError(t, err)
	host, err := os.Hostname()
	require.NoError(t, err)

	// The dead owner had the pid before sleep got it: same pid, another start.
	dead := docker.Owner{Host: host, PID: sleep.Process.Pid, Start: st.ID + "0"}
	living := docker.Owner{Host: host, PID: sleep.Process.Pid, Start: st.ID}
	// Persistent, so that no Executor's reaper takes it before prune does.
	orphan := open(t, newExecutor(t, docker.WithOwner(dead.String()), docker.WithoutLease()), baseSpec())
	owned := open(t, newExecutor(t, docker.WithOwner(living.String())), baseSpec())

	// Other sessions on a shared Engine may fail to close: only these two
	// are judged here.
	r := cli(t, nil, "prune", "--filter", "label="+labelRun+"="+runID)
	assert.Contains(t, strings.Fields(r.stdout), orphan.ID(), "the orphan is pruned (stderr %q)", r.stderr)
	assert.NotContains(t, strings.Fields(r.stdout), owned.ID(), "a live owner's session stays")

	cli := newExecutor(t).Client()
	_, err = cli.ContainerInspect(context.Background(), orphan.ID(), client.ContainerInspectOptions{})
	assert.True(t, cerrdefs.IsNotFound(err), "the orphan's container is gone: %v", err)
	_, err = cli.ContainerInspect(context.Background(), owned.ID(), client.ContainerInspectOptions{})
	assert.NoError(t, err)
}
