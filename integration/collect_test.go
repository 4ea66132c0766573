//go:build linux

package integration

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/docker"
	"github.com/runbox-dev/runbox/runboxtest"
)

// TestCollect runs the outcome table of runbox.Collect (the one the host
// executor passes in runboxtest) against a session with the agent, a
// plain-exec session and the executor's one-shot Run.
func TestCollect(t *testing.T) {
	t.Run("agent session", func(t *testing.T) {
		spec := baseSpec()
		spec.Init = false // the agent is PID 1
		s := open(t, agentExecutor(t), spec)
		require.True(t, s.Agent(), "the session has no agent")
		runboxtest.RunCollect(t, runboxtest.CollectBackend{Name: "agent session", Runner: s, ScratchDir: "/tmp"})
	})
	t.Run("plain exec session", func(t *testing.T) {
		s := open(t, newExecutor(t, docker.WithoutAgent()), baseSpec())
		runboxtest.RunCollect(t, runboxtest.CollectBackend{Name: "plain exec session", Runner: s, ScratchDir: "/tmp"})
	})
	t.Run("one-shot Run", func(t *testing.T) {
		// Every command gets a new session: the scratch directory is a
		// host directory mounted into each.
		spec := baseSpec()
		spec.Init = false
		spec.Mounts = []runbox.Mount{{Source: t.TempDir(), Target: "/scratch"}}
		e := agentExecutor(t, docker.WithDefaultSpec(spec))
		runboxtest.RunCollect(t, runboxtest.CollectBackend{Name: "one-shot Run", Runner: e, ScratchDir: "/scratch"})
	})
}

// TestCLIOutputLimit: `runbox exec` and `runbox run` pass on at most
// --output-limit bytes of stdout and stderr together, then stop the
// command and exit 125 with one line saying so.
func TestCLIOutputLimit(t *testing.T) {
	r := cli(t, nil, "open", runLabelFlag(), fixtureRef, "--", "sleep", "1000000")
	require.Equal(t, 0, r.code, r.stderr)
	id := strings.TrimSpace(r.stdout)
	t.Cleanup(func() { cli(t, nil, "close", id) })

	// 5000 bytes to stdout, then a wait that only the stop ends.
	noisy := `i=0; while [ $i -lt 50 ]; do printf '%0100d' 0; i=$((i+1)); done; sleep 1000`
	r = cli(t, nil, "exec", "--output-limit", "1000", id, "--", "sh", "-c", noisy)
	assert.Equal(t, 125, r.code, r.stderr)
	assert.Equal(t, strings.Repeat("0", 1000), r.stdout, "exactly the limit is passed on")
	assert.Contains(t, r.stderr, "output limit exceeded")
	assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)

	r = cli(t, nil, "exec", "--output-limit", "1000", id, "--", "sh", "-c", "echo out; echo err >&2; exit 3")
	assert.Equal(t, 3, r.code, "under the limit the command's own status: %s", r.stderr)
	assert.Equal(t, "out\n", r.stdout)
	assert.Equal(t, "err\n", r.stderr)

	r = cli(t, nil, "exec", "--output-limit", "-1", id, "--", "true")
	assert.Equal(t, 125, r.code)
	assert.Contains(t, r.stderr, "--output-limit")

	r = cli(t, nil, "run", runLabelFlag(), "--output-limit", "100", fixtureRef, "--", "head", "-c", "1073741824", "/dev/zero")
	assert.Equal(t, 125, r.code, r.stderr)
	assert.Len(t, r.stdout, 100)
	assert.Contains(t, r.stderr, "output limit exceeded")
}
