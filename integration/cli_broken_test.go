//go:build linux

package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
)

// An unknown or missing subcommand is an error: one line on stderr, exit
// 125, nothing on stdout (not the help text with exit 0).
func TestCLIUnknownSubcommand(t *testing.T) {
	for _, args := range [][]string{
		{"image", "rm", "ux/work:2"},
		{"image", "ls"},
		{"image", "tag", "a", "b"},
		{"image", "push", "a"},
		{"image"},
		{"completion", "nosuch"},
		{"completion"},
		{"nosuch"},
	} {
		r := cli(t, nil, args...)
		name := strings.Join(args, " ")
		assert.Equal(t, 125, r.code, name)
		assert.Empty(t, r.stdout, name)
		assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "%s: %q", name, r.stderr)
	}
	// Help asked for is still help.
	r := cli(t, nil, "image", "--help")
	assert.Equal(t, 0, r.code)
	assert.Contains(t, r.stdout, "pull")
	r = cli(t, nil, "completion", "bash")
	assert.Equal(t, 0, r.code)
	assert.NotEmpty(t, r.stdout)
}

// `exec -it` with stdin that is not a terminal refuses at once, as docker
// does ("the input device is not a TTY", exit 1), instead of hanging.
func TestCLIExecTTYWithoutTerminal(t *testing.T) {
	r := cli(t, nil, "open", runLabelFlag(), "--init", fixtureRef, "--", "sleep", "1000000")
	require.Equal(t, 0, r.code, r.stderr)
	id := strings.TrimSpace(r.stdout)
	t.Cleanup(func() { cli(t, nil, "close", id) })

	done := make(chan cliResult, 1)
	go func() { done <- cli(t, strings.NewReader("echo hi\n"), "exec", "-it", id, "--", "sh") }()
	select {
	case r = <-done:
	case <-time.After(90 * time.Second): // a hang, not a timing assertion: cli's own bound is 2 minutes
		require.FailNow(t, "runbox exec -it with a pipe on stdin hangs")
	}
	assert.Equal(t, 1, r.code, r.stderr)
	assert.Equal(t, "runbox: the input device is not a TTY\n", r.stderr)
	assert.Empty(t, r.stdout)

	r = cli(t, strings.NewReader("x"), "run", runLabelFlag(), "-it", fixtureRef, "--", "cat")
	assert.Equal(t, 1, r.code, r.stderr)
	assert.Equal(t, "runbox: the input device is not a TTY\n", r.stderr)

	// -t alone, or -i alone, with a pipe is fine (docker agrees).
	r = cli(t, strings.NewReader("piped\n"), "exec", "-i", id, "--", "cat")
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "piped\n", r.stdout)
}

// cliEnv runs the runbox binary with env added to this process's
// environment (an entry "K=" empties K; "-K" removes it).
func cliEnv(t *testing.T, env []string, stdin io.Reader, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, runboxBinary(t), args...)
	for _, e := range os.Environ() {
		k, _, _ := strings.Cut(e, "=")
		if !slices.Contains(env, "-"+k) {
			cmd.Env = append(cmd.Env, e)
		}
	}
	for _, e := range env {
		if !strings.HasPrefix(e, "-") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.Stdin = stdin
	return runCmd(t, cmd)
}

// caseLabel is a label that only one test's sessions carry, so that a
// test can count what it left and prune only its own.
func caseLabel(t *testing.T) (flag, filter string) {
	b := make([]byte, 6)
	_, err := rand.Read(b)
	require.NoError(t, err)
	v := hex.EncodeToString(b)
	return "--label=dev.runbox.test.case=" + v, "label=dev.runbox.test.case=" + v
}

// containersWith lists the containers carrying the label filter K=V.
func containersWith(t *testing.T, filter string) []string {
	t.Helper()
	res, err := newExecutor(t).Client().ContainerList(context.Background(), client.ContainerListOptions{
		All: true, Filters: client.Filters{}.Add("label", strings.TrimPrefix(filter, "label=")),
	})
	require.NoError(t, err)
	var ids []string
	for _, c := range res.Items {
		ids = append(ids, c.ID)
	}
	return ids
}

// openCLI opens a session with `runbox open` and closes it at the end.
func openCLI(t *testing.T, args ...string) string {
	t.Helper()
	r := cli(t, nil, append([]string{"open", runLabelFlag()}, args...)...)
	require.Equal(t, 0, r.code, r.stderr)
	id := strings.TrimSpace(r.stdout)
	t.Cleanup(func() { cli(t, nil, "close", id) })
	return id
}

// oneLine asserts that stderr is one line with one "runbox: " prefix.
func oneLine(t *testing.T, r cliResult, what string) {
	t.Helper()
	assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "%s: %q", what, r.stderr)
	assert.True(t, strings.HasPrefix(r.stderr, "runbox: "), "%s: %q", what, r.stderr)
	assert.NotContains(t, r.stderr, "runbox: runbox:", what)
	assert.NotContains(t, r.stderr, "runbox/docker:", what)
}

// lastLine asserts that stderr ends with one failure line (after
// progress lines) with one prefix.
func lastLine(t *testing.T, r cliResult, what string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	last := lines[len(lines)-1]
	assert.True(t, strings.HasPrefix(last, "runbox: "), "%s: %q", what, r.stderr)
	assert.NotContains(t, last, "runbox: runbox:", what)
	assert.Equal(t, 1, strings.Count(r.stderr, "runbox: "), "%s: one failure line: %q", what, r.stderr)
}

// Errors have one prefix; a missing image is named once; `run IMAGE`
// without a command shows the usage.
func TestCLIErrorsReadOnce(t *testing.T) {
	r := cli(t, nil, "exec", "nosuch-"+runID, "--", "true")
	assert.Equal(t, 125, r.code)
	oneLine(t, r, "session not found")
	assert.Contains(t, r.stderr, "runbox ls")

	absent := "runbox-test/absent:" + runID
	for _, args := range [][]string{{"image", "inspect", absent}, {"run", runLabelFlag(), "--pull", "never", absent, "--", "true"}} {
		r = cli(t, nil, args...)
		assert.Equal(t, 125, r.code, r.stderr)
		oneLine(t, r, args[0])
		assert.Equal(t, 1, strings.Count(r.stderr, absent), "the missing image is named once: %q", r.stderr)
		assert.Contains(t, r.stderr, "runbox image pull", "an absent image may be pulled")
	}

	r = cli(t, nil, "run", runLabelFlag(), fixtureRef)
	assert.Equal(t, 125, r.code)
	oneLine(t, r, "run without a command")
	assert.Contains(t, r.stderr, "usage: runbox run [flags] IMAGE -- ARGV...")

	// A missing network is the spec's fault, not the command's.
	flag, filter := caseLabel(t)
	r = cli(t, nil, "open", runLabelFlag(), flag, "--network", "runbox-test-nosuch-"+runID, fixtureRef, "--", "sleep", "1000000")
	assert.Equal(t, 125, r.code)
	oneLine(t, r, "missing network")
	assert.Contains(t, r.stderr, "network")
	assert.NotContains(t, r.stderr, "could not be started")
	assert.Empty(t, containersWith(t, filter))
}

// A failed pull does not advise pulling.
func TestCLIPullFailureHint(t *testing.T) {
	host := testRegistry(t)
	missing := host + "/runbox-test/bb:no-such-tag"
	for _, args := range [][]string{
		{"image", "pull", missing},
		{"run", runLabelFlag(), "--pull", "always", missing, "--", "true"},
		{"run", runLabelFlag(), missing, "--", "true"}, // --pull missing by default
	} {
		r := cli(t, nil, args...)
		name := strings.Join(args[:2], " ")
		assert.Equal(t, 125, r.code, name)
		lastLine(t, r, name)
		assert.Contains(t, r.stderr, "no-such-tag", name)
		assert.NotContains(t, r.stderr, "runbox image pull", "%s: pulling is what failed", name)
	}
}

// A session closed from another shell while a command runs is reported as
// closed, not as a session to close.
func TestCLISessionClosedElsewhere(t *testing.T) {
	id := openCLI(t, "--init", fixtureRef, "--", "sleep", "1000000")
	done := make(chan cliResult, 1)
	go func() { done <- cli(t, nil, "exec", id, "--", "sleep", "1000") }()
	waitForProcess(t, id, "sleep 1000")
	r := cli(t, nil, "close", id)
	require.Equal(t, 0, r.code, r.stderr)
	r = <-done
	assert.Equal(t, 125, r.code, r.stderr)
	oneLine(t, r, "closed elsewhere")
	assert.Contains(t, r.stderr, "closed")
	assert.NotContains(t, r.stderr, "close it with")
}

// TestCLISessionEndedByItself is the other side: a session whose lifetime
// process ended on its own stays, and the hint says to close it.
func TestCLISessionEndedByItself(t *testing.T) {
	id := openCLI(t, "--init", fixtureRef, "--", "sleep", "2")
	r := cli(t, nil, "exec", id, "--", "sleep", "1000")
	assert.Equal(t, 125, r.code, r.stderr)
	oneLine(t, r, "ended by itself")
	assert.Contains(t, r.stderr, "close it with `runbox close`")
	assert.NotContains(t, r.stderr, "closed or removed")
}

// waitForProcess waits until a process whose command line ends with cmd
// runs in the session.
func waitForProcess(t *testing.T, id, cmd string) {
	t.Helper()
	c := newExecutor(t).Client()
	require.Eventually(t, func() bool {
		top, err := c.ContainerTop(context.Background(), id, client.ContainerTopOptions{})
		if err != nil {
			return false
		}
		for _, p := range top.Processes {
			if strings.HasSuffix(p[len(p)-1], cmd) {
				return true
			}
		}
		return false
	}, time.Minute, 20*time.Millisecond, "%q never ran", cmd)
}

// -t gives the command TERM: the caller's, else xterm, as docker does.
func TestCLITermOnTTY(t *testing.T) {
	id := openCLI(t, "--init", fixtureRef, "--", "sleep", "1000000")
	echo := []string{"--", "sh", "-c", `echo "[$TERM]"`}
	r := cliEnv(t, []string{"TERM=screen"}, nil, append([]string{"exec", "-t", id}, echo...)...)
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "[screen]\r\n", r.stdout)
	r = cliEnv(t, []string{"-TERM"}, nil, append([]string{"exec", "-t", id}, echo...)...)
	assert.Equal(t, "[xterm]\r\n", r.stdout)
	r = cliEnv(t, []string{"-TERM"}, nil, append([]string{"run", runLabelFlag(), "-t", fixtureRef}, echo...)...)
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "[xterm]\r\n", r.stdout)
	r = cliEnv(t, []string{"TERM=screen"}, nil, append([]string{"exec", "-t", "-e", "TERM=vt100", id}, echo...)...)
	assert.Equal(t, "[vt100]\r\n", r.stdout, "-e TERM wins")
	r = cliEnv(t, []string{"TERM=screen"}, nil, append([]string{"exec", id}, echo...)...)
	assert.Equal(t, "[]\n", r.stdout, "without -t the session's environment stays as it is")
}

// A program that is not there exits 127, one that cannot be executed 126,
// with the agent and without it.
func TestCLIStartFailureCodes(t *testing.T) {
	for _, agentEnv := range []string{"-" + "RUNBOX_AGENT", "RUNBOX_AGENT=/nonexistent"} {
		id := openCLI(t, "--init", fixtureRef, "--", "sleep", "1000000")
		r := cli(t, nil, "exec", id, "--", "sh", "-c", "echo data > /tmp/plain")
		require.Equal(t, 0, r.code, r.stderr)
		for _, c := range []struct {
			argv []string
			code int
		}{
			{[]string{"/no/such/program"}, 127},
			{[]string{"no-such-program"}, 127},
			{[]string{"/etc"}, 126},
			{[]string{"/tmp/plain"}, 126},
		} {
			r := cliEnv(t, []string{agentEnv}, nil, append([]string{"exec", id, "--"}, c.argv...)...)
			assert.Equal(t, c.code, r.code, "%s %v: %q", agentEnv, c.argv, r.stderr)
			oneLine(t, r, c.argv[0])
			assert.Empty(t, r.stdout)
		}
		r = cliEnv(t, []string{agentEnv}, nil, "exec", id, "--", "sh", "-c", "exit 127")
		assert.Equal(t, 127, r.code, "a command's own 127 is its own")
		assert.Empty(t, r.stderr)
	}
	r := cli(t, nil, "run", runLabelFlag(), fixtureRef, "--", "/no/such/program")
	assert.Equal(t, 127, r.code, r.stderr)
}

// `open` whose lifetime process ends at once fails and leaves nothing.
func TestCLIOpenEndedProcess(t *testing.T) {
	flag, filter := caseLabel(t)
	for _, process := range [][]string{{"true"}, {"sh", "-c", "exit 3"}, {"/no/such/program"}} {
		r := cli(t, nil, append([]string{"open", runLabelFlag(), flag, fixtureRef, "--"}, process...)...)
		assert.Equal(t, 125, r.code, "%v: %q", process, r.stderr)
		assert.Empty(t, r.stdout, "no ID")
		oneLine(t, r, process[0])
		assert.NotContains(t, r.stderr, "close it with", "nothing is left to close")
	}
	assert.Empty(t, containersWith(t, filter), "nothing is left")
}

// prune removes ended sessions by default, asks before --all, and
// --filter narrows it.
func TestCLIPruneEndedAndAll(t *testing.T) {
	flag, filter := caseLabel(t)
	ended := openCLI(t, flag, "--init", fixtureRef, "--", "sleep", "1000000")
	running := openCLI(t, flag, "--init", fixtureRef, "--", "sleep", "1000001")
	other := openCLI(t, "--init", fixtureRef, "--", "sleep", "1000002") // not this case's
	c := newExecutor(t).Client()
	r := cli(t, nil, "exec", ended, "--", "sh", "-c", "kill $(pidof sleep)")
	require.Contains(t, []int{0, 125, 137, 143}, r.code, r.stderr) // the session may end under the exec
	require.Eventually(t, func() bool {
		res, err := c.ContainerInspect(context.Background(), ended, client.ContainerInspectOptions{})
		return err == nil && !res.Container.State.Running
	}, time.Minute, 20*time.Millisecond)

	r = cli(t, nil, "prune", "--filter", filter)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, ended+"\n", r.stdout, "the ended session is pruned, the running one stays")

	r = cli(t, strings.NewReader("n\n"), "prune", "--all", "--filter", filter)
	assert.Equal(t, 1, r.code, r.stderr)
	assert.Empty(t, r.stdout)
	assert.Contains(t, r.stderr, "[y/N]")
	assert.Equal(t, []string{running}, containersWith(t, filter), "not confirmed: nothing removed")

	r = cli(t, nil, "prune", "--all", "-f", "--filter", filter)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, running+"\n", r.stdout)
	assert.Empty(t, containersWith(t, filter))
	_, err := c.ContainerInspect(context.Background(), other, client.ContainerInspectOptions{})
	assert.NoError(t, err, "the filter kept prune to this case's sessions")

	r = cli(t, nil, "prune", "--filter", "colour=red")
	assert.Equal(t, 125, r.code)
	oneLine(t, r, "bad filter")
}

// -e on run reaches the command, --clean-env or not.
func TestCLIRunEnvReachesCommand(t *testing.T) {
	r := cli(t, nil, "run", runLabelFlag(), "--clean-env", "-e", "K=V", fixtureRef, "--", "env")
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "K=V\n", r.stdout)
	r = cli(t, nil, "run", runLabelFlag(), "-e", "K=V", fixtureRef, "--", "sh", "-c", `echo "$K"`)
	assert.Equal(t, "V\n", r.stdout)
}

// A relative working directory is refused, as docker does.
func TestCLIRelativeWorkdir(t *testing.T) {
	id := openCLI(t, "--init", fixtureRef, "--", "sleep", "1000000")
	for _, args := range [][]string{
		{"exec", "-w", "tmp", id, "--", "pwd"},
		{"run", runLabelFlag(), "-w", "tmp", fixtureRef, "--", "pwd"},
		{"shell", "-w", "tmp", id},
	} {
		r := cli(t, nil, args...)
		assert.Equal(t, 125, r.code, "%v: %q", args, r.stderr)
		assert.Empty(t, r.stdout)
		oneLine(t, r, args[0])
		assert.Contains(t, r.stderr, "absolute")
	}
	r := cli(t, nil, "exec", "-w", "/tmp", id, "--", "pwd")
	assert.Equal(t, "/tmp\n", r.stdout)
}

// A pull of the wrong platform leaves no image behind, and leaves a
// reference that named another image naming it again.
func TestCLIPullWrongPlatformLeavesNothing(t *testing.T) {
	host := testRegistry(t)
	ref := host + "/runbox-test/bb:single"
	e := newExecutor(t)
	r := cli(t, nil, "image", "pull", "--platform", "linux/"+otherArch, ref)
	assert.Equal(t, 125, r.code, r.stderr)
	lastLine(t, r, "wrong platform")
	_, err := e.InspectImage(context.Background(), ref)
	if !assert.ErrorIs(t, err, runbox.ErrImageUnavailable, "the pulled image is gone") {
		removeImage(t, e.Client(), ref)
	}

	// The reference named the fixture before: it does again.
	_, err = e.Client().ImageTag(context.Background(), client.ImageTagOptions{Source: fixtureRef, Target: ref})
	require.NoError(t, err)
	removeImage(t, e.Client(), ref)
	r = cli(t, nil, "image", "pull", "--platform", "linux/"+otherArch, ref)
	assert.Equal(t, 125, r.code, r.stderr)
	img, err := e.InspectImage(context.Background(), ref)
	require.NoError(t, err)
	assert.Equal(t, fixtureID, img.ID)
}

// A session opened without its agent says so once, on stderr.
func TestCLIAgentMissingSaysSo(t *testing.T) {
	r := cliEnv(t, []string{"RUNBOX_AGENT=/nonexistent"}, nil, "open", runLabelFlag(), "--init", fixtureRef, "--", "sleep", "1000000")
	require.Equal(t, 0, r.code, r.stderr)
	id := strings.TrimSpace(r.stdout)
	t.Cleanup(func() { cli(t, nil, "close", id) })
	assert.Regexp(t, fullID, r.stdout)
	oneLine(t, r, "no agent")
	assert.Contains(t, r.stderr, "no agent")
	assert.Contains(t, r.stderr, "/nonexistent")

	r = cliEnv(t, []string{"RUNBOX_AGENT=/nonexistent"}, nil, "exec", id, "--", "true")
	assert.Equal(t, 0, r.code)
	assert.Empty(t, r.stderr, "said once, at open")

	r = cliEnv(t, []string{"RUNBOX_AGENT=/nonexistent"}, nil, "run", runLabelFlag(), fixtureRef, "--", "echo", "ran")
	assert.Equal(t, 0, r.code)
	assert.Equal(t, "ran\n", r.stdout)
	assert.Equal(t, 1, strings.Count(r.stderr, "no agent"), r.stderr)

	r = cli(t, nil, "open", runLabelFlag(), "--init", fixtureRef, "--", "sleep", "1000000")
	require.Equal(t, 0, r.code, r.stderr)
	withAgent := strings.TrimSpace(r.stdout)
	t.Cleanup(func() { cli(t, nil, "close", withAgent) })
	assert.Empty(t, r.stderr, "with its agent, open prints nothing on stderr")
}

// version names runbox's version and the Engine's; --version works.
func TestCLIVersion(t *testing.T) {
	r := cli(t, nil, "version")
	require.Equal(t, 0, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	assert.NotEqual(t, "dev", lines[0])
	assert.Regexp(t, `^runbox \S+ \(go`, lines[0])
	assert.Regexp(t, `(?m)^ Server: +\S+`, r.stdout)
	assert.Regexp(t, `(?m)^ API version: +1\.\d+`, r.stdout)

	r = cli(t, nil, "version", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var v struct {
		Client struct{ Version string }
		Engine struct {
			Version    string
			APIVersion string `json:"api_version"`
			Error      string
		}
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &v))
	assert.NotEmpty(t, v.Client.Version)
	assert.NotEmpty(t, v.Engine.Version)
	assert.NotEmpty(t, v.Engine.APIVersion)
	assert.Empty(t, v.Engine.Error)

	r = cli(t, nil, "--version")
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Regexp(t, `^runbox version \S+\n$`, r.stdout)

	r = cliEnv(t, []string{"DOCKER_HOST=unix:///nonexistent/docker.sock", "-DOCKER_CONTEXT"}, nil, "version", "--json")
	v.Engine.Error = ""
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &v), r.stderr)
	assert.NotEmpty(t, v.Client.Version, "runbox's own version is still printed")
	assert.NotEmpty(t, v.Engine.Error)

	// make build stamps the version from git.
	dir := t.TempDir()
	out, err := exec.Command("go", "build", "-ldflags", "-X main.version=v9.9.9-test", "-o", dir+"/runbox", "../cmd/runbox").CombinedOutput()
	require.NoError(t, err, string(out))
	out, err = exec.Command(dir+"/runbox", "--version").Output()
	require.NoError(t, err)
	assert.Equal(t, "runbox version v9.9.9-test\n", string(out))
}

// waitStopped waits until the container no longer runs.
func waitStopped(t *testing.T, c *client.Client, id string) {
	t.Helper()
	require.Eventually(t, func() bool {
		res, err := c.ContainerInspect(context.Background(), id, client.ContainerInspectOptions{})
		return err == nil && !res.Container.State.Running
	}, time.Minute, 20*time.Millisecond, "the session never stopped")
}
