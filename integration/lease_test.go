//go:build linux

package integration

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/docker"
)

// testLease is the time to live the lease tests use.
const testLease = 2 * time.Second

// containersLabelled lists every container, running or not, with label.
func containersLabelled(t *testing.T, cli *client.Client, label string) []string {
	t.Helper()
	res, err := cli.ContainerList(context.Background(), client.ContainerListOptions{
		All: true, Filters: client.Filters{}.Add("label", label),
	})
	require.NoError(t, err)
	var out []string
	for _, c := range res.Items {
		out = append(out, c.ID[:12]+" "+string(c.State))
	}
	return out
}

// staysRunning checks, for d, that the session id keeps running: a test
// of a time to live must let the time pass, and watches the session
// meanwhile instead of sleeping blind. It asks the Engine, never the
// agent, since connecting to the agent would renew the lease.
func staysRunning(t *testing.T, cli *client.Client, id string, d time.Duration, why string) {
	t.Helper()
	require.Never(t, func() bool {
		c, err := cli.ContainerInspect(context.Background(), id, client.ContainerInspectOptions{})
		return err != nil || c.Container.State == nil || !c.Container.State.Running
	}, d, 100*time.Millisecond, why)
}

// buildOwner builds the owner program.
func buildOwner(t *testing.T) string {
	t.Helper()
	prog := filepath.Join(t.TempDir(), "owner")
	out, err := exec.Command("go", "build", "-o", prog, "./testdata/owner").CombinedOutput()
	require.NoError(t, err, "%s", out)
	return prog
}

// TestReapPlainSessionsOfDeadOwners: a session without an agent has no
// lease to end it; the next Executor's first Open (or Reap) removes it
// once its program is gone, and leaves alone the sessions of live
// programs and persistent ones.
func TestReapPlainSessionsOfDeadOwners(t *testing.T) {
	prog := buildOwner(t)
	label := fmt.Sprintf("%s=%s-reap", labelRun, runID)
	cmd := exec.Command(prog, fixtureRef, testLease.String(), label, "idle")
	cmd.Env = append(os.Environ(), "RUNBOX_OWNER_PLAIN=1")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	id := strings.TrimSpace(strings.TrimPrefix(line, "opened "))

	mine := open(t, newExecutor(t, docker.WithoutAgent()), baseSpec())
	persistent := open(t, newExecutor(t, docker.WithoutAgent(), docker.WithoutLease()), baseSpec())

	e := newExecutor(t)
	removed, err := e.Reap(context.Background())
	require.NoError(t, err)
	assert.NotContains(t, removed, id, "its program still runs")

	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	assert.Len(t, containersLabelled(t, e.Client(), label), 1, "nothing ends a plain session by itself")
	s := open(t, newExecutor(t), baseSpec()) // the first Open reaps
	assert.Empty(t, containersLabelled(t, e.Client(), label), "the dead program's session is gone")
	for _, live := range []runbox.Session{mine, persistent, s} {
		o := run(t, live, argv("true"))
		require.NoError(t, o.err, "a live program's or a persistent session was reaped")
	}
}

// TestLeaseEndsSessionsOfDeadOwners: a program killed with SIGKILL while it
// opens a session, runs a command in it, or idles, leaves nothing behind
// once the lease's time to live has passed (plus 5 s), without prune.
func TestLeaseEndsSessionsOfDeadOwners(t *testing.T) {
	prog := buildOwner(t)
	agentBin := runboxBinary(t)
	cli := newExecutor(t).Client()

	// Only the directories the killed programs make are this test's to
	// age: others belong to runs that may still be opening sessions.
	existing := map[string]bool{}
	earlier, err := filepath.Glob(filepath.Join(os.TempDir(), "runbox-agent-*"))
	require.NoError(t, err)
	for _, d := range earlier {
		existing[d] = true
	}

	modes := []string{"open", "run", "idle"}
	neverStarted := 0
	for trial := range 20 {
		mode := modes[trial%len(modes)]
		label := fmt.Sprintf("%s=%s-lease-%d", labelRun, runID, trial)
		progMode := mode
		if mode == "open" {
			progMode = "idle"
		}
		cmd := exec.Command(prog, fixtureRef, testLease.String(), label, progMode)
		cmd.Env = append(os.Environ(), docker.EnvAgent+"="+agentBin)
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		if mode == "open" {
			// Somewhere between the first Engine call and the end of Open.
			time.Sleep(time.Duration(rand.IntN(800)) * time.Millisecond)
		} else {
			line, err := bufio.NewReader(stdout).ReadString('\n')
			require.NoError(t, err)
			require.True(t, strings.HasPrefix(line, "opened "), line)
			time.Sleep(time.Duration(rand.IntN(500)) * time.Millisecond)
		}
		require.NoError(t, cmd.Process.Kill())
		_ = cmd.Wait()
		killed := time.Now()
		// A started session goes with its lease. A container whose
		// program died between creating and starting it has no agent to
		// end it: it stays "created" until the next Executor's Reap.
		var left []string
		if !assert.Eventually(t, func() bool {
			left = containersLabelled(t, cli, label)
			for _, c := range left {
				if !strings.HasSuffix(c, " created") {
					return false
				}
			}
			return true
		}, testLease+5*time.Second, 50*time.Millisecond) {
			t.Fatalf("trial %d (%s): still there %s after the kill: %v", trial, mode, time.Since(killed).Round(time.Millisecond), left)
		}
		if len(left) > 0 {
			require.Equal(t, "open", mode, "only a program killed inside Open can leave a container that never started: %v", left)
			neverStarted++
			removed, err := newExecutor(t).Reap(context.Background())
			require.NoError(t, err)
			for _, c := range left {
				id, _, _ := strings.Cut(c, " ")
				assert.True(t, slices.ContainsFunc(removed, func(r string) bool { return strings.HasPrefix(r, id) }),
					"Reap did not remove %s, the never-started session of a dead program (removed %v)", id, removed)
			}
			require.Empty(t, containersLabelled(t, cli, label))
		}
	}
	t.Logf("%d of 20 killed programs left a container that never started; Reap removed it", neverStarted)

	// The dead programs' host directories go too, at the next Reap once
	// they are old enough not to belong to an Open in progress.
	before := time.Now()
	dirs, err := filepath.Glob(filepath.Join(os.TempDir(), "runbox-agent-*"))
	require.NoError(t, err)
	var left []string
	for _, d := range dirs {
		if existing[d] {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(d, "engine")); err == nil && string(b) == cli.DaemonHost() {
			fi, err := os.Stat(d)
			if err == nil && fi.ModTime().Before(before) {
				left = append(left, d)
				old := before.Add(-time.Hour)
				require.NoError(t, os.Chtimes(d, old, old))
			}
		}
	}
	require.NotEmpty(t, left, "the killed programs left no directory: the check below proves nothing")
	_, err = newExecutor(t).Reap(context.Background())
	require.NoError(t, err)
	for _, d := range left {
		assert.NoDirExists(t, d, "a dead program's agent directory survived Reap")
	}
}

// TestLeaseLivesWithItsOwner: while its program lives the session lives,
// well past the time to live; Detach hands it over, after which it
// outlives its opener until closed.
func TestLeaseLivesWithItsOwner(t *testing.T) {
	e := agentExecutor(t, docker.WithLease(testLease))
	s := open(t, e, baseSpec())
	staysRunning(t, e.Client(), s.ID(), 3*testLease, "ended though its Session renews it")
	o := run(t, s, argv("echo", "alive"))
	require.NoError(t, o.err)
	assert.Equal(t, "alive\n", o.stdout)

	require.NoError(t, s.Detach(context.Background()))
	require.NoError(t, e.Close())
	other := agentExecutor(t)
	staysRunning(t, other.Client(), s.ID(), 3*testLease, "a detached session ended unrenewed")
	s2, err := other.Session(context.Background(), s.ID())
	require.NoError(t, err)
	o = run(t, s2, argv("echo", "still"))
	require.NoError(t, o.err)
	assert.Equal(t, "still\n", o.stdout)
}

// TestLeaseCLI: `runbox open` is persistent unless --lease says otherwise;
// a leased session lives while execs or `runbox renew` renew it, and ends
// when nobody does.
func TestLeaseCLI(t *testing.T) {
	r := cli(t, nil, "open", runLabelFlag(), "--lease", testLease.String(), fixtureRef, "--", "sleep", "1000000")
	require.Equal(t, 0, r.code, r.stderr)
	id := strings.TrimSpace(r.stdout)
	t.Cleanup(func() { cli(t, nil, "close", id) })
	watch := newExecutor(t).Client()
	for range 4 {
		staysRunning(t, watch, id, testLease/2, "ended while renewed")
		r = cli(t, nil, "renew", id)
		require.Equal(t, 0, r.code, r.stderr)
	}
	r = cli(t, nil, "exec", id, "--", "echo", "renewed")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "renewed\n", r.stdout)

	e := newExecutor(t)
	// Asked of the Engine, not of the agent: connecting would renew.
	require.Eventually(t, func() bool {
		_, err := e.Client().ContainerInspect(context.Background(), id, client.ContainerInspectOptions{})
		return cerrdefs.IsNotFound(err)
	}, testLease+5*time.Second, 50*time.Millisecond, "the unrenewed session stayed")

	r = cli(t, nil, "open", runLabelFlag(), fixtureRef, "--", "sleep", "1000000")
	require.Equal(t, 0, r.code, r.stderr)
	id = strings.TrimSpace(r.stdout)
	t.Cleanup(func() { cli(t, nil, "close", id) })
	c, err := e.Client().ContainerInspect(context.Background(), id, client.ContainerInspectOptions{})
	require.NoError(t, err)
	assert.Equal(t, "persistent", c.Container.Config.Labels[docker.LabelLease])
	assert.NotContains(t, c.Container.Config.Entrypoint, "--lease", "a session opened without --lease never expires")
	assert.False(t, c.Container.HostConfig.AutoRemove)
}

// TestLeaseEndReported: when a leased session's lifetime process ends,
// the Engine removes the container at once; the caller still learns why.
func TestLeaseEndReported(t *testing.T) {
	e := agentExecutor(t, docker.WithLease(testLease))
	spec := baseSpec()
	spec.Process = []string{"sh", "-c", "sleep 1; exit 7"}
	s := open(t, e, spec)
	require.Eventually(t, func() bool {
		_, err := s.Run(context.Background(), argv("true"), runbox.Streams{})
		if err != nil {
			require.ErrorIs(t, err, runbox.ErrSessionEnded)
			assert.Contains(t, err.Error(), "code 7")
			return true
		}
		return false
	}, 30*time.Second, 50*time.Millisecond)
}
