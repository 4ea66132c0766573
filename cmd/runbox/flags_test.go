package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/docker"
)

// badTimeouts overflow a time.Duration, round to nothing, or are not
// numbers: each once meant "no timeout".
var badTimeouts = []string{"1e300", "inf", "+Inf", "Infinity", "1e10", "9.3e9", "NaN", "-1", "-5s", "0", "0s", "1e-12", "9999999999h", "soon"}

func TestParseTimeout(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"30s": 30 * time.Second, "5m": 5 * time.Minute, "1.5": 1500 * time.Millisecond, "2": 2 * time.Second,
		"1e9": 1e9 * time.Second, "2562047h": 2562047 * time.Hour, "": 0,
	} {
		got, err := (&execFlags{timeout: in}).parseTimeout()
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range badTimeouts {
		got, err := (&execFlags{timeout: in}).parseTimeout()
		assert.ErrorIs(t, err, runbox.ErrInvalidCommand, "%s gave %v", in, got)
	}
}

// TestBadTimeoutExits125: every command with --timeout refuses a bad one
// with exit status 125 and one line, before reaching anything.
func TestBadTimeoutExits125(t *testing.T) {
	for _, in := range badTimeouts {
		for _, args := range [][]string{
			{"exec", "--timeout", in, "no-such-session", "--", "true"},
			{"run", "--timeout", in, "no-such-image:1", "--", "true"},
			{"host", "--timeout", in, "--", "true"},
		} {
			code, msg := executeCapturingStderr(t, args)
			assert.Equal(t, exitFailure, code, "%v", args)
			assert.Equal(t, 1, strings.Count(msg, "\n"), "%v: one line: %q", args, msg)
			assert.Contains(t, msg, "--timeout", "%v", args)
		}
	}
}

func executeCapturingStderr(t *testing.T, args []string) (int, string) {
	t.Helper()
	stderr := os.Stderr
	r, w, err := os.Pipe()
	require.NoError(t, err)
	os.Stderr = w
	code := execute(args)
	w.Close()
	os.Stderr = stderr
	msg, _ := io.ReadAll(r)
	r.Close()
	return code, string(msg)
}

func TestFailureIsOneLine(t *testing.T) {
	var b strings.Builder
	printFailure(&b, errors.Join(errors.New("first\n"), fmt.Errorf("%w: second", runbox.ErrSessionNotFound)))
	assert.Equal(t, "runbox: first; session not found: second (see `runbox ls` for the sessions there are)\n", b.String())
}

func TestFailureCodesAndHints(t *testing.T) {
	notFound := fmt.Errorf("%w: %w", runbox.ErrStart, fs.ErrNotExist)
	assert.Equal(t, exitNotFound, failureCode(notFound))
	assert.Equal(t, exitCannotExecute, failureCode(fmt.Errorf("%w: %w", runbox.ErrStart, fs.ErrPermission)))
	assert.Equal(t, exitFailure, failureCode(runbox.ErrStart))
	assert.Equal(t, exitFailure, failureCode(fs.ErrNotExist), "only a start failure is 127")

	pulled := fmt.Errorf("%w: %w", errPullFailed, runbox.ErrImageUnavailable)
	assert.NotContains(t, hint(pulled), "pull")
	assert.Contains(t, hint(runbox.ErrImageUnavailable), "runbox image pull")
	assert.NotContains(t, hint(fmt.Errorf("%w: %w", errEndedAtOpen, runbox.ErrSessionEnded)), "runbox close")
	assert.Equal(t, "a: b: c", trimPrefixes("runbox: a: runbox: b: runbox/docker: c"))
}

func TestResolveEnv(t *testing.T) {
	t.Setenv("RUNBOX_TEST_SET", "from-shell")
	file := filepath.Join(t.TempDir(), "env")
	require.NoError(t, os.WriteFile(file, []byte("# comment\n\nA=1\nRUNBOX_TEST_SET\nRUNBOX_TEST_UNSET\n"), 0o600))
	env, err := resolveEnv([]string{"B=2", "RUNBOX_TEST_SET", "A=3"}, []string{file})
	require.NoError(t, err)
	assert.Equal(t, []string{"A=1", "RUNBOX_TEST_SET=from-shell", "B=2", "RUNBOX_TEST_SET=from-shell", "A=3"}, env)
	require.NoError(t, os.WriteFile(file, []byte("=x\n"), 0o600))
	_, err = resolveEnv(nil, []string{file})
	assert.ErrorIs(t, err, runbox.ErrInvalidCommand)
	_, err = resolveEnv(nil, []string{file + ".missing"})
	assert.ErrorIs(t, err, runbox.ErrInvalidCommand)
}

func TestForSession(t *testing.T) {
	t.Setenv("TERM", "screen")
	c := runbox.Command{Args: []string{"x"}, TTY: true}
	require.NoError(t, forSession(&c))
	assert.Equal(t, []string{"TERM=screen"}, c.Env)
	t.Setenv("TERM", "")
	c = runbox.Command{Args: []string{"x"}, TTY: true}
	require.NoError(t, forSession(&c))
	assert.Equal(t, []string{"TERM=xterm"}, c.Env)
	c = runbox.Command{Args: []string{"x"}, TTY: true, Env: []string{"TERM=vt100"}}
	require.NoError(t, forSession(&c))
	assert.Equal(t, []string{"TERM=vt100"}, c.Env)
	c = runbox.Command{Args: []string{"x"}}
	require.NoError(t, forSession(&c))
	assert.Empty(t, c.Env, "no terminal, no TERM")
	c = runbox.Command{Args: []string{"x"}, Dir: "tmp"}
	assert.ErrorIs(t, forSession(&c), runbox.ErrInvalidCommand)
}

func TestSessionFilter(t *testing.T) {
	now := time.Now()
	s := docker.SessionInfo{ID: "abcdef", Name: "work-1", Image: "busybox:1", State: "exited",
		Created: now.Add(-time.Hour), Labels: map[string]string{"k": "v", "x": ""}}
	for _, c := range []struct {
		filters []string
		match   bool
	}{
		{nil, true},
		{[]string{"label=k"}, true},
		{[]string{"label=k=v", "label=x"}, true},
		{[]string{"label=k=w"}, false},
		{[]string{"label=k", "label=absent"}, false},
		{[]string{"name=work"}, true},
		{[]string{"name=other", "name=work"}, true},
		{[]string{"id=abc", "status=exited"}, true},
		{[]string{"state=running"}, false},
		{[]string{"ancestor=busybox:1"}, true},
		{[]string{"until=30m"}, true},
		{[]string{"until=2h"}, false},
	} {
		f, err := parseFilters(c.filters)
		require.NoError(t, err, c.filters)
		assert.Equal(t, c.match, f.match(s, now), c.filters)
	}
	for _, bad := range []string{"colour=red", "label", "until=soon"} {
		_, err := parseFilters([]string{bad})
		assert.ErrorIs(t, err, runbox.ErrInvalidCommand, bad)
	}
}

func TestHardenFlags(t *testing.T) {
	var of openFlags
	fs := pflag.NewFlagSet("open", pflag.ContinueOnError)
	of.register(fs)
	require.NoError(t, fs.Parse([]string{"--runtime", "runsc", "--cap-drop", "ALL", "--cap-add", "CHOWN",
		"--security-opt", "no-new-privileges", "--read-only", "--tmpfs", "/tmp:size=64m,mode=1777", "--tmpfs", "/run"}))
	spec, err := of.spec("img", nil)
	require.NoError(t, err)
	assert.Equal(t, "runsc", spec.Runtime)
	assert.Equal(t, runbox.Security{CapDrop: []string{"ALL"}, CapAdd: []string{"CHOWN"}, NoNewPrivileges: true, ReadOnlyRootfs: true,
		Tmpfs: []runbox.Tmpfs{{Target: "/tmp", Options: "size=64m,mode=1777"}, {Target: "/run"}}}, spec.Security)

	for _, bad := range [][]string{{"--security-opt", "seccomp=unconfined"}, {"--tmpfs", "relative"}, {"--cap-drop", "NET RAW"}} {
		var of openFlags
		fs := pflag.NewFlagSet("open", pflag.ContinueOnError)
		of.register(fs)
		require.NoError(t, fs.Parse(bad))
		_, err := of.spec("img", nil)
		assert.ErrorIs(t, err, runbox.ErrInvalidSpec, bad)
	}
}
