//go:build linux

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

var (
	cliOnce sync.Once
	cliPath string
	cliErr  error
)

// runboxBinary builds cmd/runbox once per test run.
func runboxBinary(t testing.TB) string {
	t.Helper()
	needEngine(t)
	cliOnce.Do(func() {
		cliDir, cliErr = os.MkdirTemp("", "runbox-cli-")
		if cliErr != nil {
			return
		}
		cliPath = filepath.Join(cliDir, "runbox")
		build := exec.Command("go", "build", "-o", cliPath, "../cmd/runbox")
		// Static, so that the binary can also serve as the in-session agent.
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		out, err := build.CombinedOutput()
		if err != nil {
			cliErr = errors.New(string(out))
		}
	})
	require.NoError(t, cliErr)
	return cliPath
}

type cliResult struct {
	stdout, stderr string
	code           int
}

// cli runs the runbox binary as a user would.
func cli(t *testing.T, stdin io.Reader, args ...string) cliResult {
	t.Helper()
	return cliIn(t, "", stdin, args...)
}

// cliIn runs the runbox binary in dir.
func cliIn(t *testing.T, dir string, stdin io.Reader, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, runboxBinary(t), args...)
	cmd.Dir = dir
	cmd.Stdin = stdin
	return runCmd(t, cmd)
}

// runCmd runs cmd to its end and returns its output and exit status; an
// exit status is a result, a failure to run it fails the test.
func runCmd(t testing.TB, cmd *exec.Cmd) cliResult {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return cliResult{out.String(), errb.String(), code}
}

var fullID = regexp.MustCompile(`^[0-9a-f]{64}\n$`)

func runLabelFlag() string { return "--label=" + labelRun + "=" + runID }

func TestCLIWorkflow(t *testing.T) {
	r := cli(t, nil, "open", runLabelFlag(), "--init", fixtureRef, "--", "sleep", "1000000")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, fullID, r.stdout, "open prints the session ID and nothing else")
	id := strings.TrimSpace(r.stdout)
	t.Cleanup(func() { cli(t, nil, "close", id) })

	r = cli(t, nil, "exec", id[:12], "--", "sh", "-c", "echo out; echo err >&2; exit 3")
	assert.Equal(t, 3, r.code, "the command's own exit status")
	assert.Equal(t, "out\n", r.stdout)
	assert.Equal(t, "err\n", r.stderr)

	r = cli(t, strings.NewReader("piped\n"), "exec", "-i", id, "--", "cat")
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "piped\n", r.stdout)

	r = cli(t, strings.NewReader("ignored"), "exec", id, "--", "cat")
	assert.Equal(t, 0, r.code)
	assert.Empty(t, r.stdout, "without -i stdin is empty")

	r = cli(t, nil, "exec", "-e", "A=1", "-w", "/tmp", id, "--", "sh", "-c", `echo "$A $(pwd)"`)
	assert.Equal(t, "1 /tmp\n", r.stdout)

	r = cli(t, nil, "exec", id, "--", "/no/such/program")
	assert.Equal(t, 127, r.code, "not found, as docker says")
	assert.Empty(t, r.stdout)
	assert.Contains(t, r.stderr, "could not be started")

	r = cli(t, nil, "exec", "--timeout", "500ms", id, "--", "sleep", "1000")
	assert.Equal(t, 124, r.code)
	assert.Contains(t, r.stderr, "timed out")

	r = cli(t, nil, "exec", id, "--", "sh", "-c", "kill -TERM $$")
	assert.Equal(t, 128+15, r.code, "death by signal N is 128+N")

	r = cli(t, nil, "exec", id, "--", "sh", "-c", "echo snap > /snapfile")
	require.Equal(t, 0, r.code)
	tag := "runbox-test/cli-snap:" + runID
	r = cli(t, nil, "snapshot", "--tag", tag, id)
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `^sha256:[0-9a-f]{64}\n$`, r.stdout)
	removeImage(t, newExecutor(t).Client(), tag)

	r = cli(t, nil, "run", runLabelFlag(), tag, "--", "cat", "/snapfile")
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "snap\n", r.stdout)

	r = cli(t, nil, "ls", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var list []struct {
		ID, Name, Image, State, Owner string
		Created                       time.Time
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list))
	var seen bool
	for _, s := range list {
		if s.ID == id {
			seen = true
			assert.Equal(t, "running", s.State)
			assert.Equal(t, fixtureRef, s.Image)
			assert.True(t, strings.HasSuffix(s.Owner, "/cli"))
		}
	}
	assert.True(t, seen)

	r = cli(t, nil, "close", id)
	assert.Equal(t, 0, r.code, r.stderr)
	r = cli(t, nil, "ls", "--json")
	assert.NotContains(t, r.stdout, id, "nothing left")
	assert.Empty(t, containersOfRun(t, newExecutor(t).Client()))

	r = cli(t, nil, "exec", id, "--", "true")
	assert.Equal(t, 125, r.code)
	assert.Contains(t, r.stderr, "runbox ls")
}

func TestCLIImageInspectJSON(t *testing.T) {
	r := cli(t, nil, "image", "inspect", "--json", fixtureRef)
	require.Equal(t, 0, r.code, r.stderr)
	var img struct{ ID, OS, Architecture, Variant string }
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &img))
	assert.Equal(t, fixtureID, img.ID)
	assert.Equal(t, "linux", img.OS)

	r = cli(t, nil, "image", "inspect", "runbox-test/absent:"+runID)
	assert.Equal(t, 125, r.code)
	assert.Contains(t, r.stderr, "image unavailable")

	r = cli(t, nil, "image", "pull", "--platform", "linux", "x:1")
	assert.Equal(t, 125, r.code)
	assert.Contains(t, r.stderr, "os/arch")
}

func TestCLIBadInputCreatesNothing(t *testing.T) {
	dir := t.TempDir()
	cases := map[string][]string{
		"relative -v source":  {"open", runLabelFlag(), "-v", "rel:/x", fixtureRef, "--", "sleep", "1"},
		"missing -v source":   {"open", runLabelFlag(), "-v", "/no/such/dir:/x", fixtureRef, "--", "sleep", "1"},
		"-v without target":   {"open", runLabelFlag(), "-v", dir, fixtureRef, "--", "sleep", "1"},
		"-v bad mode":         {"open", runLabelFlag(), "-v", dir + ":/x:rx", fixtureRef, "--", "sleep", "1"},
		"bad -e":              {"open", runLabelFlag(), "-e", "=NONAME", fixtureRef, "--", "sleep", "1"},
		"bad --memory":        {"open", runLabelFlag(), "--memory", "lots", fixtureRef, "--", "sleep", "1"},
		"negative --pids":     {"open", runLabelFlag(), "--pids", "-1", fixtureRef, "--", "sleep", "1"},
		"unknown network":     {"open", runLabelFlag(), "--network", "no-such-net-" + runID, fixtureRef},
		"unknown session":     {"exec", "runbox-no-such-" + runID, "--", "true"},
		"bad --timeout":       {"exec", "--timeout", "soon", "whatever", "--", "true"},
		"run with bad -v":     {"run", runLabelFlag(), "-v", "rel:/x", fixtureRef, "--", "true"},
		"run bad --timeout":   {"run", runLabelFlag(), "--timeout", "-1s", fixtureRef, "--", "true"},
		"bad platform":        {"image", "pull", "--platform", "linux/", "x:1"},
		"unknown flag":        {"open", "--no-such-flag", fixtureRef},
		"snapshot bad tag":    {"snapshot", "--tag", "Bad//Tag", "runbox-no-such-" + runID},
		"close unknown":       {"close", "runbox-no-such-" + runID},
		"unparsable image":    {"open", runLabelFlag(), "Bad//Image", "--", "sleep", "1"},
		"host empty argv":     {"host", "--"},
		"host negative limit": {"host", "--output-limit", "-5", "--", "true"},
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			r := cli(t, nil, args...)
			assert.Equal(t, 125, r.code, r.stderr)
			assert.Empty(t, r.stdout)
			lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
			assert.Len(t, lines, 1, "one line says what failed: %q", r.stderr)
			assert.True(t, strings.HasPrefix(r.stderr, "runbox: ") || strings.HasPrefix(r.stderr, "Error: "), r.stderr)
		})
	}
	assert.Empty(t, containersOfRun(t, newExecutor(t).Client()))
}

func TestCLIShellThroughATerminal(t *testing.T) {
	bin := runboxBinary(t)
	e := newExecutor(t)
	s := open(t, e, baseSpec())

	ptmx, tty, err := pty.Open()
	require.NoError(t, err)
	defer ptmx.Close()
	defer tty.Close()
	require.NoError(t, pty.Setsize(ptmx, &pty.Winsize{Rows: 33, Cols: 91}))
	before, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	require.NoError(t, err)

	cmd := exec.Command(bin, "shell", s.ID())
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	require.NoError(t, cmd.Start())

	var out syncBuffer
	go func() { _, _ = io.Copy(&out, ptmx) }()
	_, err = ptmx.Write([]byte("stty size; echo hi-$((40+2))\n"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "hi-42") }, time.Minute, 20*time.Millisecond)
	assert.Contains(t, out.String(), "33 91", "the window size reached the session")
	_, err = ptmx.Write([]byte("exit 7\n"))
	require.NoError(t, err)

	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee)
		assert.Equal(t, 7, ee.ExitCode())
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		require.FailNow(t, "shell did not exit")
	}
	after, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	require.NoError(t, err)
	assert.Equal(t, *before, *after, "the terminal was restored")
}

func TestCLIInterruptedRunLeavesNothing(t *testing.T) {
	bin := runboxBinary(t)
	cli := newExecutor(t).Client()
	cmd := exec.Command(bin, "run", runLabelFlag(), fixtureRef, "--", "sleep", "1000")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	require.NoError(t, cmd.Start())
	// Ctrl-C once the command runs in the session, so that both the
	// command and the session must be cleaned up.
	require.Eventually(t, func() bool {
		ids := containersOfRun(t, cli)
		if len(ids) != 1 {
			return false
		}
		top, err := cli.ContainerTop(context.Background(), ids[0], client.ContainerTopOptions{})
		return err == nil && topHas(top, "sleep 1000")
	}, time.Minute, 50*time.Millisecond, "the command runs in the session")
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	err := cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, errb.String())
	assert.Equal(t, 130, ee.ExitCode(), errb.String())
	assert.Empty(t, containersOfRun(t, cli), "Ctrl-C during run leaves no container")
}

func TestCLIHost(t *testing.T) {
	t.Setenv("RUNBOX_TEST_SECRET", "hunter2")
	r := cli(t, nil, "host", "--", "sh", "-c", `echo "[$RUNBOX_TEST_SECRET]"; echo err >&2; exit 4`)
	assert.Equal(t, 4, r.code, r.stderr)
	assert.Equal(t, "[]\n", r.stdout, "the caller's environment is not passed by default")
	assert.Equal(t, "err\n", r.stderr)

	r = cli(t, nil, "host", "--output-limit", "1000", "--", "sh", "-c", "yes | head -c 100000000")
	assert.Equal(t, 125, r.code)
	assert.LessOrEqual(t, len(r.stdout), 1000)
	assert.Contains(t, r.stderr, "output limit")

	r = cli(t, nil, "host", "--timeout", "300ms", "--", "sleep", "100")
	assert.Equal(t, 124, r.code)

	r = cli(t, nil, "host", "--", "/no/such/program")
	assert.Equal(t, 127, r.code, "not found, as docker says")
}

func TestCLIHostConfinement(t *testing.T) {
	work, other := t.TempDir(), t.TempDir()
	target := filepath.Join(other, "out")
	write := "echo x > " + target

	r := cliIn(t, work, nil, "host", "--json", "--", "sh", "-c", "echo in > here && "+write)
	assert.NotEqual(t, 0, r.code, "a write outside the working directory is refused")
	assert.NotEqual(t, 125, r.code, "the command ran; its write failed")
	assert.NoFileExists(t, target)
	assert.FileExists(t, filepath.Join(work, "here"), "the working directory is writable")

	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	var report struct {
		Guarantees struct {
			Level           string
			WriteBoundary   bool
			NetworkBoundary bool
			ProcessBoundary bool
		}
		Access struct {
			Kind       string
			WritePaths []string
		}
		ExitCode int
	}
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &report), r.stderr)
	assert.Equal(t, "full", report.Guarantees.Level)
	assert.True(t, report.Guarantees.WriteBoundary)
	assert.True(t, report.Guarantees.NetworkBoundary)
	assert.True(t, report.Guarantees.ProcessBoundary)
	assert.Equal(t, "scoped-write", report.Access.Kind)
	canonical, err := filepath.EvalSymlinks(work)
	require.NoError(t, err)
	assert.Contains(t, report.Access.WritePaths, canonical)
	assert.Equal(t, r.code, report.ExitCode)
	assert.Empty(t, r.stdout, "stdout stays the command's own")

	r = cliIn(t, work, nil, "host", "--write", other, "--", "sh", "-c", write)
	assert.Equal(t, 0, r.code, r.stderr)
	assert.FileExists(t, target)
	require.NoError(t, os.Remove(target))

	r = cliIn(t, work, nil, "host", "--unconfined", "--", "sh", "-c", write)
	assert.Equal(t, 0, r.code, r.stderr)
	assert.FileExists(t, target)

	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	connect := "exec 3<>/dev/tcp/127.0.0.1/" + port
	r = cliIn(t, work, nil, "host", "--", "bash", "-c", connect)
	assert.NotEqual(t, 0, r.code, "no network unless asked")
	r = cliIn(t, work, nil, "host", "--network", "--", "bash", "-c", connect)
	assert.Equal(t, 0, r.code, r.stderr)
}

func TestCLIImagePull(t *testing.T) {
	host := testRegistry(t)
	ref := host + "/runbox-test/bb:index"
	r := cli(t, nil, "image", "pull", "--platform", "linux/"+runtime.GOARCH, ref)
	require.Equal(t, 0, r.code, r.stderr)
	removeImage(t, newExecutor(t).Client(), ref)
	require.Regexp(t, `^sha256:[0-9a-f]{64}\n$`, r.stdout, "stdout is the image ID only")
	assert.Contains(t, r.stderr, "Status: ", "progress goes to stderr as plain lines")
	assert.NotContains(t, r.stderr, "\x1b[")

	r = cli(t, nil, "image", "pull", "--quiet", ref)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Empty(t, r.stderr, "--quiet prints no progress")

	r = cli(t, nil, "image", "pull", "--platform", "linux/s390x", ref)
	assert.Equal(t, 125, r.code)
	assert.Contains(t, r.stderr, "s390x")
}
