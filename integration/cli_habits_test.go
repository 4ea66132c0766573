//go:build linux

package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// --pull missing (the default) pulls an absent image with progress on
// stderr, never refuses, always pulls again.
func TestCLIPullPolicy(t *testing.T) {
	host := testRegistry(t)
	ref := host + "/runbox-test/bb:single"
	t.Cleanup(func() { removeImage(t, newExecutor(t).Client(), ref) })

	r := cli(t, nil, "run", runLabelFlag(), "--pull", "never", ref, "--", "true")
	assert.Equal(t, 125, r.code)
	assert.Contains(t, r.stderr, "image unavailable")

	r = cli(t, nil, "run", runLabelFlag(), ref, "--", "echo", "pulled")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "pulled\n", r.stdout, "stdout stays the command's")
	assert.Contains(t, r.stderr, "Status: ", "progress on stderr")

	r = cli(t, nil, "run", runLabelFlag(), ref, "--", "true")
	require.Equal(t, 0, r.code, r.stderr)
	assert.NotContains(t, r.stderr, "Status: ", "present: no pull")

	id := openCLI(t, "--pull", "always", ref, "--", "sleep", "1000000")
	assert.Regexp(t, fullID, id+"\n")

	r = cli(t, nil, "run", runLabelFlag(), "--pull", "sometimes", ref, "--", "true")
	assert.Equal(t, 125, r.code)
	assert.Contains(t, r.stderr, "--pull")

	// --platform: the local image must be of it.
	r = cli(t, nil, "run", runLabelFlag(), "--pull", "never", "--platform", "linux/"+otherArch, fixtureRef, "--", "true")
	assert.Equal(t, 125, r.code)
	assert.Contains(t, r.stderr, "platform mismatch")
	r = cli(t, nil, "run", runLabelFlag(), "--platform", "linux/"+runtime.GOARCH, fixtureRef, "--", "true")
	assert.Equal(t, 0, r.code, r.stderr)
}

// -e K passes this shell's value; --env-file reads K=V and K lines.
func TestCLIEnvFromCaller(t *testing.T) {
	t.Setenv("RUNBOX_TEST_FROM_SHELL", "shell value")
	file := filepath.Join(t.TempDir(), "env")
	require.NoError(t, os.WriteFile(file, []byte("# a comment\nFROM_FILE=file value\nRUNBOX_TEST_FROM_SHELL\n"), 0o600))
	id := openCLI(t, "--init", fixtureRef, "--", "sleep", "1000000")
	show := []string{"--", "sh", "-c", `echo "[$RUNBOX_TEST_FROM_SHELL][$FROM_FILE][${RUNBOX_TEST_UNSET-unset}]"`}

	r := cli(t, nil, append([]string{"exec", "-e", "RUNBOX_TEST_FROM_SHELL", "-e", "RUNBOX_TEST_UNSET", id}, show...)...)
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "[shell value][][unset]\n", r.stdout, "an unset K is not passed")

	r = cli(t, nil, append([]string{"exec", "--env-file", file, id}, show...)...)
	assert.Equal(t, "[shell value][file value][unset]\n", r.stdout)

	r = cli(t, nil, append([]string{"run", runLabelFlag(), "--env-file", file, "-e", "FROM_FILE=flag wins", fixtureRef}, show...)...)
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "[shell value][flag wins][unset]\n", r.stdout)
}

// inspect shows what the session is made of.
func TestCLIInspect(t *testing.T) {
	dir := t.TempDir()
	id := openCLI(t, "--name", "inspect-"+runID, "--memory", "64m", "--cpus", "0.5", "--pids-limit", "50",
		"-v", dir+":/data:ro", "--label", "project=demo", "--init", fixtureRef, "--", "sleep", "1000000")

	r := cli(t, nil, "inspect", "--json", "inspect-"+runID)
	require.Equal(t, 0, r.code, r.stderr)
	var got []struct {
		ID, Name, Image, State, Owner, Lease, Network, Containment string
		Process                                                    []string
		Mounts                                                     []struct {
			Source, Target string
			ReadOnly       bool `json:"read_only"`
		}
		Limits struct {
			MemoryBytes int64 `json:"memory_bytes"`
			CPUs        float64
			Pids        int64
		}
		Agent struct {
			Present bool
			Auth    string
		}
		Labels map[string]string
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got))
	require.Len(t, got, 1)
	s := got[0]
	assert.Equal(t, id, s.ID)
	assert.Equal(t, "inspect-"+runID, s.Name)
	assert.Equal(t, fixtureRef, s.Image)
	assert.Equal(t, "running", s.State)
	assert.True(t, strings.HasSuffix(s.Owner, "/cli"), s.Owner)
	assert.Equal(t, "persistent", s.Lease)
	assert.Equal(t, "none", s.Network)
	assert.Equal(t, []string{"sleep", "1000000"}, s.Process)
	require.Len(t, s.Mounts, 1, "the agent's own mounts are not the caller's")
	assert.Equal(t, "/data", s.Mounts[0].Target)
	assert.True(t, s.Mounts[0].ReadOnly)
	assert.Equal(t, int64(64<<20), s.Limits.MemoryBytes)
	assert.Equal(t, 0.5, s.Limits.CPUs)
	assert.Equal(t, int64(50), s.Limits.Pids, "--pids-limit is --pids")
	assert.True(t, s.Agent.Present)
	assert.NotEmpty(t, s.Containment)
	assert.Equal(t, "demo", s.Labels["project"])
	for k := range s.Labels {
		assert.NotContains(t, k, "agent-key", "the session key is never shown")
	}

	r = cli(t, nil, "inspect", id[:12])
	require.Equal(t, 0, r.code, r.stderr)
	assert.Regexp(t, `(?m)^Limits: +memory 64MiB, cpus 0.5, pids 50$`, r.stdout)
	assert.Regexp(t, `(?m)^Mounts: +.*:/data:ro$`, r.stdout)

	r = cli(t, nil, "inspect", "runbox-no-such-"+runID)
	assert.Equal(t, 125, r.code)
	oneLine(t, r, "inspect unknown")
}

// logs prints the lifetime process's output, then how it ended.
func TestCLILogs(t *testing.T) {
	id := openCLI(t, fixtureRef, "--", "sh", "-c", "echo out; echo err >&2; exec sleep 1000000")
	waitForProcess(t, id, "sleep 1000000")
	r := cli(t, nil, "logs", id)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "out\n", r.stdout)
	assert.Equal(t, "err\n", r.stderr, "running: no last word")

	cli(t, nil, "exec", id, "--", "sh", "-c", "kill -TERM $(pidof sleep)") // the session may end under it
	c := newExecutor(t).Client()
	waitStopped(t, c, id)
	r = cli(t, nil, "logs", id)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "out\n", r.stdout)
	assert.Equal(t, "err\nrunbox: the lifetime process exited with code 143\n", r.stderr)
}

// ls: running sessions by default, -a, -q, --no-trunc, --filter,
// --format, and ps as an alias.
func TestCLILsHabits(t *testing.T) {
	flag, filter := caseLabel(t)
	running := openCLI(t, flag, "--label", "colour=blue", "--name", "ls-"+runID, "--init", fixtureRef, "--", "sleep", "1000000")
	ended := openCLI(t, flag, "--init", fixtureRef, "--", "sleep", "1000001")
	cli(t, nil, "exec", ended, "--", "sh", "-c", "kill $(pidof sleep)") // the session may end under it
	waitStopped(t, newExecutor(t).Client(), ended)

	r := cli(t, nil, "ls", "-q", "--filter", filter)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, running[:12]+"\n", r.stdout, "running sessions only, short IDs")
	r = cli(t, nil, "ps", "-a", "-q", "--no-trunc", "--filter", filter)
	require.Equal(t, 0, r.code, r.stderr)
	assert.ElementsMatch(t, []string{running, ended}, strings.Fields(r.stdout))
	r = cli(t, nil, "ls", "--filter", filter, "--format", `{{.Name}} {{.Label "colour"}} {{.State}}`)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "ls-"+runID+" blue running\n", r.stdout)
	r = cli(t, nil, "ls", "-a", "--filter", filter, "--filter", "status=exited", "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var one struct{ ID, State string }
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &one))
	assert.Equal(t, ended, one.ID)
	assert.Equal(t, "exited", one.State)
	r = cli(t, nil, "ls", "--format", "{{.Nope}}", "--filter", filter)
	assert.Equal(t, 125, r.code)
	oneLine(t, r, "bad template")
}

// exec -u runs the command as another user, with the agent and without.
func TestCLIExecUser(t *testing.T) {
	for _, agentEnv := range []string{"-RUNBOX_AGENT", "RUNBOX_AGENT=/nonexistent"} {
		r := cliEnv(t, []string{agentEnv}, nil, "open", runLabelFlag(), "--init", fixtureRef, "--", "sleep", "1000000")
		require.Equal(t, 0, r.code, r.stderr)
		id := strings.TrimSpace(r.stdout)
		t.Cleanup(func() { cli(t, nil, "close", id) })
		r = cliEnv(t, []string{agentEnv}, nil, "exec", id, "--", "sh", "-c",
			`echo alice:x:1001:1002::/:/bin/sh >> /etc/passwd; echo team:x:1003:alice >> /etc/group`)
		require.Equal(t, 0, r.code, r.stderr)

		ids := []string{"--", "sh", "-c", "echo $(id -u) $(id -g) $(id -G)"}
		r = cliEnv(t, []string{agentEnv}, nil, append([]string{"exec", id}, ids...)...)
		assert.True(t, strings.HasPrefix(r.stdout, "0 0 "), "without -u, the session's user (root): %q", r.stdout)
		r = cliEnv(t, []string{agentEnv}, nil, append([]string{"exec", "-u", "1234:5678", id}, ids...)...)
		assert.Equal(t, 0, r.code, r.stderr)
		assert.Equal(t, "1234 5678 5678\n", r.stdout, agentEnv)
		r = cliEnv(t, []string{agentEnv}, nil, append([]string{"exec", "--user", "alice", id}, ids...)...)
		assert.Equal(t, 0, r.code, r.stderr)
		assert.Equal(t, "1001 1002 1002 1003\n", r.stdout, agentEnv)
		r = cliEnv(t, []string{agentEnv}, nil, "exec", "-u", "nobody-"+runID, id, "--", "true")
		assert.Equal(t, 125, r.code, agentEnv)
		assert.Contains(t, r.stderr, "nobody-"+runID)
	}
}

// --json on the commands that print a value; run's result as the last
// line of stderr.
func TestCLIJSONValues(t *testing.T) {
	r := cli(t, nil, "open", runLabelFlag(), "--json", "--init", fixtureRef, "--", "sleep", "1000000")
	require.Equal(t, 0, r.code, r.stderr)
	var opened struct {
		ID    string
		Agent bool
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &opened))
	t.Cleanup(func() { cli(t, nil, "close", opened.ID) })
	assert.Regexp(t, fullID, opened.ID+"\n")
	assert.True(t, opened.Agent)

	tag := "runbox-test/cli-json:" + runID
	r = cli(t, nil, "snapshot", "--json", "--tag", tag, opened.ID)
	require.Equal(t, 0, r.code, r.stderr)
	removeImage(t, newExecutor(t).Client(), tag)
	var img struct{ ID, OS string }
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &img))
	assert.Regexp(t, `^sha256:[0-9a-f]{64}$`, img.ID)
	assert.Equal(t, "linux", img.OS)

	type result struct {
		Session  string
		ExitCode int
		Error    string
	}
	last := func(stderr string) result {
		lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
		var res result
		require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &res), stderr)
		return res
	}
	r = cli(t, nil, "run", runLabelFlag(), "--json", fixtureRef, "--", "sh", "-c", "echo out; exit 3")
	assert.Equal(t, 3, r.code)
	assert.Equal(t, "out\n", r.stdout)
	res := last(r.stderr)
	assert.Equal(t, 3, res.ExitCode)
	assert.Regexp(t, fullID, res.Session+"\n")
	assert.Empty(t, res.Error)

	r = cli(t, nil, "run", runLabelFlag(), "--json", fixtureRef, "--", "/no/such/program")
	assert.Equal(t, 127, r.code)
	res = last(r.stderr)
	assert.Equal(t, -1, res.ExitCode)
	assert.Contains(t, res.Error, "could not be started")
	assert.True(t, strings.HasPrefix(r.stderr, "runbox: command could not be started"), "the message, then the report: %q", r.stderr)

	host := testRegistry(t)
	ref := host + "/runbox-test/bb:index"
	r = cli(t, nil, "image", "pull", "--json", "--quiet", ref)
	require.Equal(t, 0, r.code, r.stderr)
	removeImage(t, newExecutor(t).Client(), ref)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &img))
	assert.Equal(t, "linux", img.OS)
}

// Shell completion offers the sessions and the local images.
func TestCLICompletion(t *testing.T) {
	id := openCLI(t, "--name", "complete-"+runID, "--init", fixtureRef, "--", "sleep", "1000000")
	r := cli(t, nil, "__complete", "exec", "complete-")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "complete-"+runID+"\t")
	r = cli(t, nil, "__complete", "close", id[:6])
	assert.Contains(t, r.stdout, id[:12])
	r = cli(t, nil, "__complete", "exec", id, "")
	assert.NotContains(t, r.stdout, id[:12], "only the first argument of exec is a session")
	r = cli(t, nil, "__complete", "run", "runbox-test/busybox:")
	assert.Contains(t, strings.Fields(r.stdout), fixtureRef)
}

// open -w sets the session's working directory; it must be absolute.
func TestCLIOpenWorkdir(t *testing.T) {
	id := openCLI(t, "-w", "/tmp", "--init", fixtureRef, "--", "sleep", "1000000")
	r := cli(t, nil, "exec", id, "--", "pwd")
	assert.Equal(t, "/tmp\n", r.stdout)
	r = cli(t, nil, "exec", "-w", "/", id, "--", "pwd")
	assert.Equal(t, "/\n", r.stdout, "the command's -w wins")
	r = cli(t, nil, "inspect", "--json", id)
	assert.Contains(t, r.stdout, `"workdir":"/tmp"`)
	r = cli(t, nil, "run", runLabelFlag(), "-w", "/tmp", fixtureRef, "--", "pwd")
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "/tmp\n", r.stdout, "run -w")

	flag, filter := caseLabel(t)
	r = cli(t, nil, "open", runLabelFlag(), flag, "-w", "tmp", fixtureRef, "--", "sleep", "1000000")
	assert.Equal(t, 125, r.code)
	oneLine(t, r, "relative open -w")
	assert.Contains(t, r.stderr, "absolute")
	assert.Empty(t, containersWith(t, filter))
}
