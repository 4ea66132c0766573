//go:build linux

package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
)

// pressureTrials is how many times each exhaustion is tried: the agent
// must survive every one of them.
const pressureTrials = 20

// runUnder runs cmd with a timeout and returns its outcome; a Result or an
// ErrCancelled are both truthful reports of a command under pressure.
func runUnder(t *testing.T, s runbox.Session, timeout time.Duration, cmd runbox.Command) (runbox.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return s.Run(ctx, cmd, runbox.Streams{})
}

// assertTruthful accepts a Result or a cancellation, nothing else: the
// session must not have ended and the transport must not have failed.
func assertTruthful(t *testing.T, trial int, res runbox.Result, err error) {
	t.Helper()
	if err != nil {
		require.ErrorIs(t, err, runbox.ErrCancelled, "trial %d: %v", trial, err)
		return
	}
	assert.GreaterOrEqual(t, res.ExitCode, 0, "trial %d", trial)
}

// assertNextRunWorks checks that the session still runs commands.
func assertNextRunWorks(t *testing.T, s runbox.Session, trial int) {
	t.Helper()
	o := run(t, s, argv("echo", fmt.Sprint("alive ", trial)))
	require.NoError(t, o.err, "trial %d: the session did not survive", trial)
	require.Equal(t, fmt.Sprint("alive ", trial, "\n"), o.stdout)
}

// TestAgentSurvivesPidExhaustion: fork bombs and pid-filling commands
// under Resources.Pids are killed on timeout and reported; the agent,
// which needs no new thread once serving, stays.
func TestAgentSurvivesPidExhaustion(t *testing.T) {
	e := agentExecutor(t)
	spec := baseSpec()
	spec.Resources.Pids = 64
	s := open(t, e, spec)

	loads := map[string]runbox.Command{
		"fork bomb": runbox.ShellCommand(`bomb() { bomb | bomb & }; bomb; sleep 100`),
		"sleepers":  runbox.ShellCommand(`while true; do sleep 100 >/dev/null 2>&1 & done`),
	}
	for name, cmd := range loads {
		t.Run(name, func(t *testing.T) {
			for trial := range pressureTrials {
				// Long enough that the agent has work to do while the pids
				// are gone: at one second the old agent survived by luck.
				res, err := runUnder(t, s, 2*time.Second, cmd)
				assertTruthful(t, trial, res, err)
				assertNextRunWorks(t, s, trial)
			}
		})
	}
}

// TestAgentSurvivesMemoryPressure: commands that exhaust
// Resources.MemoryBytes are the ones the kernel kills, not the agent.
func TestAgentSurvivesMemoryPressure(t *testing.T) {
	e := agentExecutor(t)
	spec := baseSpec()
	spec.Resources.MemoryBytes = 64 << 20
	s := open(t, e, spec)

	// Forty processes that each hold 2.5 MB and never end: more than the
	// session has, until the timeout kills what the kernel left.
	hog := runbox.ShellCommand(`for i in $(seq 40); do tail -c 2500000 /dev/zero & done; wait`)
	for trial := range pressureTrials {
		res, err := runUnder(t, s, 2*time.Second, hog)
		assertTruthful(t, trial, res, err)
		assertNextRunWorks(t, s, trial)
	}
	// The positive control: the kernel did kill for memory in the session.
	o := run(t, s, runbox.ShellCommand(`cat /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null | sed -n 's/^oom_kill //p'`))
	require.NoError(t, o.err)
	kills, err := strconv.Atoi(strings.TrimSpace(o.stdout))
	require.NoError(t, err, "no oom_kill count in the session's memory cgroup: %q", o.stdout)
	assert.Positive(t, kills, "the load never ran out of memory: the test proves nothing")

	o = run(t, s, runbox.ShellCommand("cat /proc/1/oom_score_adj; cat /proc/self/oom_score_adj"))
	require.NoError(t, o.err)
	assert.Equal(t, "0\n1000\n", o.stdout, "commands go first under memory pressure")
}
