package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/runbox-dev/runbox"
)

// buildCLI builds this command, static, for a test that runs it as a user
// would: the sandbox helper re-executes the binary, which a test binary
// cannot stand in for.
func buildCLI(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "runbox")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, string(out))
	return bin
}

type cliRun struct {
	stdout, stderr string
	code           int
}

// runCLI runs bin in dir with extra descriptors from fd 3 up (nil leaves a
// number closed), as a shell would pass them on.
func runCLI(t *testing.T, bin, dir string, extra []*os.File, args ...string) cliRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, bin, args...)
	c.Dir = dir
	c.ExtraFiles = extra
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return cliRun{stdout: out.String(), stderr: errb.String(), code: code}
}

// TestHostPassesNoInheritedDescriptors is the reproduction through
// the command line: runbox host is started with a writable file outside
// the sandbox, a directory, a socket and a pipe at fds 7 to 10, and the
// command, confined or not, must get none of them.
func TestHostPassesNoInheritedDescriptors(t *testing.T) {
	bin := buildCLI(t)
	base, err := os.MkdirTemp("/var/tmp", "runbox-cli-fd-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(base) })
	work, outside := filepath.Join(base, "w"), filepath.Join(base, "o")
	require.NoError(t, os.Mkdir(work, 0o755))
	require.NoError(t, os.Mkdir(outside, 0o755))

	const script = `echo via-file >&7
echo via-dir > /proc/self/fd/8/escape
chmod 600 /proc/self/fd/8/victim
echo via-socket >&9
echo via-pipe >&10
exit 0`
	for _, mode := range [][]string{nil, {"--unconfined"}} {
		name := "confined"
		if mode != nil {
			name = "unconfined"
		}
		t.Run(name, func(t *testing.T) {
			target, victim := filepath.Join(outside, "outside.txt"), filepath.Join(outside, "victim")
			require.NoError(t, os.WriteFile(target, nil, 0o644))
			require.NoError(t, os.WriteFile(victim, []byte("v"), 0o644))
			require.NoError(t, os.Chmod(victim, 0o644))
			os.Remove(filepath.Join(outside, "escape"))
			file, err := os.OpenFile(target, os.O_WRONLY|os.O_APPEND, 0)
			require.NoError(t, err)
			defer file.Close()
			dir, err := os.Open(outside)
			require.NoError(t, err)
			defer dir.Close()
			pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			require.NoError(t, err)
			sock, peer := os.NewFile(uintptr(pair[0]), "sock"), os.NewFile(uintptr(pair[1]), "peer")
			defer peer.Close()
			pr, pw, err := os.Pipe()
			require.NoError(t, err)
			defer pr.Close()
			extra := []*os.File{nil, nil, nil, nil, file, dir, sock, pw}

			args := append(append([]string{"host"}, mode...), "--", "ls", "-1", "/proc/self/fd")
			r := runCLI(t, bin, work, extra, args...)
			require.Equal(t, 0, r.code, r.stderr)
			assert.Equal(t, []string{"0", "1", "2", "3"}, strings.Fields(r.stdout), "descriptors of the command")

			args = append(append([]string{"host"}, mode...), "--", "bash", "-c", script)
			r = runCLI(t, bin, work, extra, args...)
			require.Equal(t, 0, r.code, r.stderr)
			sock.Close()
			pw.Close()
			b, _ := os.ReadFile(target)
			assert.Empty(t, string(b), "written through fd 7")
			assert.NoFileExists(t, filepath.Join(outside, "escape"), "created through fd 8")
			fi, err := os.Stat(victim)
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o644), fi.Mode().Perm(), "chmod through fd 8")
			b, _ = io.ReadAll(peer)
			assert.Empty(t, string(b), "written to the socket at fd 9")
			b, _ = io.ReadAll(pr)
			assert.Empty(t, string(b), "written to the pipe at fd 10")
		})
	}
}

// TestHostResourceLimits: --memory, --pids and --cpus are enforced, and
// reported, or refused.
func TestHostResourceLimits(t *testing.T) {
	bin := buildCLI(t)
	work, err := os.MkdirTemp("/var/tmp", "runbox-cli-limits-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(work) })

	r := runCLI(t, bin, work, nil, "host", "--json", "--memory", "64m", "--pids", "64", "--cpus", "1", "--",
		"dd", "if=/dev/zero", "of=/dev/null", "bs=256M", "count=1")
	assert.Equal(t, 137, r.code, "a memory hog over --memory is killed: %s", r.stderr)
	lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
	var rep struct {
		Guarantees struct {
			Level          string   `json:"level"`
			ResourceLimits bool     `json:"resourceLimits"`
			Mechanisms     []string `json:"mechanisms"`
		} `json:"guarantees"`
		ExitCode int    `json:"exitCode"`
		Signal   string `json:"signal"`
	}
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &rep), r.stderr)
	assert.True(t, rep.Guarantees.ResourceLimits)
	assert.Equal(t, "full", rep.Guarantees.Level)
	assert.Equal(t, 137, rep.ExitCode)
	assert.Equal(t, "SIGKILL", rep.Signal)

	// Positive control: the same command under a limit it stays below.
	r = runCLI(t, bin, work, nil, "host", "--memory", "512m", "--", "dd", "if=/dev/zero", "of=/dev/null", "bs=256M", "count=1")
	assert.Equal(t, 0, r.code, r.stderr)

	r = runCLI(t, bin, work, nil, "host", "--unconfined", "--pids", "10", "--", "true")
	assert.Equal(t, exitFailure, r.code)
	assert.Contains(t, r.stderr, "--unconfined has none")
	r = runCLI(t, bin, work, nil, "host", "--memory", "lots", "--", "true")
	assert.Equal(t, exitFailure, r.code)
	assert.Contains(t, r.stderr, "--memory")
}

// lastJSON decodes the last line of stderr, which --json promises is the
// report whatever happened.
func lastJSON(t *testing.T, stderr string) map[string]any {
	t.Helper()
	lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
	var rep map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &rep), "last stderr line of %q", stderr)
	require.Contains(t, rep, "guarantees")
	return rep
}

// guaranteesRoundTrip decodes the report's guarantees with the library's
// own type, as a Go program reading `runbox host --json` would, and checks
// that encoding them again gives the same object: every enum the CLI
// writes, the library reads.
func guaranteesRoundTrip(t *testing.T, stderr string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
	var rep struct {
		Guarantees json.RawMessage `json:"guarantees"`
	}
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &rep))
	var g runbox.Guarantees
	require.NoError(t, json.Unmarshal(rep.Guarantees, &g), string(rep.Guarantees))
	again, err := json.Marshal(g)
	require.NoError(t, err)
	assert.JSONEq(t, string(rep.Guarantees), string(again))
}

// TestHostJSONIsLastOnEveryOutcome: after a timeout, a start failure, an
// output-limit stop and a refused sandbox, as after a plain exit, the
// report is the last line of stderr and runbox's own message comes before.
func TestHostJSONIsLastOnEveryOutcome(t *testing.T) {
	bin := buildCLI(t)
	work, err := os.MkdirTemp("/var/tmp", "runbox-cli-json-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(work) })

	cases := []struct {
		name string
		args []string
		code int
		msg  string // runbox's own message, before the report
	}{
		{"exit", []string{"--", "sh", "-c", "echo no newline >&2; printf x >&2; exit 3"}, 3, ""},
		{"timeout", []string{"--timeout", "300ms", "--", "sleep", "100"}, exitTimeout, "timed out"},
		{"start failure", []string{"--", "/no/such/program"}, exitNotFound, "could not be started"},
		{"output limit", []string{"--output-limit", "1000", "--", "sh", "-c", "yes | head -c 100000"}, exitFailure, "output limit"},
		{"refused", []string{"--unconfined", "--network", "--", "true"}, exitFailure, "--unconfined has none"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := runCLI(t, bin, work, nil, append([]string{"host", "--json"}, c.args...)...)
			assert.Equal(t, c.code, r.code, r.stderr)
			rep := lastJSON(t, r.stderr)
			guaranteesRoundTrip(t, r.stderr)
			if c.msg != "" {
				before := r.stderr[:strings.LastIndex(strings.TrimRight(r.stderr, "\n"), "\n")+1]
				assert.Contains(t, before, c.msg)
				assert.Contains(t, before, "runbox: ")
			}
			if c.code == exitFailure {
				assert.EqualValues(t, -1, rep["exitCode"])
				assert.NotEmpty(t, rep["error"])
			}
		})
	}
}

// TestHostInheritEnv: --inherit-env is the user's choice, not a boundary
// the host failed to enforce.
func TestHostInheritEnv(t *testing.T) {
	bin := buildCLI(t)
	work, err := os.MkdirTemp("/var/tmp", "runbox-cli-env-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(work) })
	t.Setenv("RUNBOX_CLI_INHERITED", "passed")
	r := runCLI(t, bin, work, nil, "host", "--json", "--inherit-env", "--", "sh", "-c", "echo $RUNBOX_CLI_INHERITED")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "passed\n", r.stdout)
	g := lastJSON(t, r.stderr)["guarantees"].(map[string]any)
	assert.Equal(t, false, g["envScrub"])
	assert.Equal(t, "full", g["level"], "everything asked for is enforced")
	r = runCLI(t, bin, work, nil, "host", "--", "sh", "-c", "echo [$RUNBOX_CLI_INHERITED]")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "[]\n", r.stdout, "scrubbed without --inherit-env")
}
