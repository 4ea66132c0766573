//go:build linux

package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
		t.Fatal("runbox exec -it with a pipe on stdin hangs")
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
