//go:build linux

package integration

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/docker"
)

// TestPlainExecNeverInventsExitCode: with plain Engine exec, the runtime
// reports an execve that failed after the process was created (too big an
// environment, a file the kernel cannot run) as exit code 1 and a line on
// stderr. That process never started: the result is ErrStart, never a
// Result, and the runtime's line is the error, not output.
func TestPlainExecNeverInventsExitCode(t *testing.T) {
	s := open(t, newExecutor(t, docker.WithoutAgent()), baseSpec())
	require.False(t, s.Agent())
	big := "BIG=" + strings.Repeat("x", 200<<10)

	o := run(t, s, runbox.Command{Args: []string{"true"}, Env: []string{big}})
	require.ErrorIs(t, o.err, runbox.ErrStart, "stdout %q stderr %q", o.stdout, o.stderr)
	assert.Equal(t, -1, o.res.ExitCode)
	assert.Contains(t, o.err.Error(), "argument list too long")
	assert.Empty(t, o.stdout+o.stderr, "the runtime's message is the error, not output")

	o = run(t, s, runbox.Command{Args: []string{"true"}, Env: []string{big}, TTY: true})
	require.ErrorIs(t, o.err, runbox.ErrStart, "with a terminal: stdout %q", o.stdout)
	assert.Empty(t, o.stdout)

	o = run(t, s, runbox.Command{Args: []string{"echo", strings.Repeat("y", 200<<10)}})
	require.ErrorIs(t, o.err, runbox.ErrStart, "an argument too long")

	// A file with execute permission that is no program.
	o = run(t, s, runbox.ShellCommand("printf 'not a program\\n' > /tmp/garbage && chmod +x /tmp/garbage"))
	require.NoError(t, o.err)
	require.Equal(t, 0, o.res.ExitCode)
	o = run(t, s, argv("/tmp/garbage"))
	require.ErrorIs(t, o.err, runbox.ErrStart, "stdout %q stderr %q", o.stdout, o.stderr)
	assert.Contains(t, o.err.Error(), "exec format error")

	// The session is usable afterwards.
	o = run(t, s, argv("echo", "next"))
	require.NoError(t, o.err)
	assert.Equal(t, "next\n", o.stdout)
}

// TestPlainExecRuntimeLookalikeIsOutput: a program that ran and printed
// something that looks like the runtime's message is still a Result with
// its own output, whenever the message cannot be the runtime's.
func TestPlainExecRuntimeLookalikeIsOutput(t *testing.T) {
	s := open(t, newExecutor(t, docker.WithoutAgent()), baseSpec())
	for name, c := range map[string]struct {
		cmd    runbox.Command
		stdout string
		stderr string
		code   int
	}{
		// Arguments this small cannot be too long for any Linux kernel.
		"E2BIG with small arguments": {cmd: runbox.ShellCommand(`echo "exec /bin/sh: argument list too long" >&2; exit 1`),
			stderr: "exec /bin/sh: argument list too long\n", code: 1},
		"names another program": {cmd: runbox.ShellCommand(`echo "exec /bin/true: exec format error" >&2; exit 1`),
			stderr: "exec /bin/true: exec format error\n", code: 1},
		"more output": {cmd: runbox.ShellCommand(`echo "exec /bin/sh: exec format error" >&2; echo more >&2; exit 1`),
			stderr: "exec /bin/sh: exec format error\nmore\n", code: 1},
		"stdout too": {cmd: runbox.ShellCommand(`echo out; echo "exec /bin/sh: exec format error" >&2; exit 1`),
			stdout: "out\n", stderr: "exec /bin/sh: exec format error\n", code: 1},
		"another exit code": {cmd: runbox.ShellCommand(`echo "exec /bin/sh: exec format error" >&2; exit 2`),
			stderr: "exec /bin/sh: exec format error\n", code: 2},
	} {
		o := run(t, s, c.cmd)
		if !assert.NoError(t, o.err, name) {
			continue
		}
		assert.Equal(t, c.code, o.res.ExitCode, name)
		assert.Equal(t, c.stdout, o.stdout, name)
		assert.Equal(t, c.stderr, o.stderr, name)
	}
}
