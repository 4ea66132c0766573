//go:build linux

package integration

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
)

// reservedTargets are mount targets on the agent's reserved path
// (/dev/.runbox), inside it, or above it, in spellings that clean to them.
var reservedTargets = []string{
	"/dev/.runbox", "/dev/.runbox/", "/dev//.runbox", "/dev/./.runbox/run", "/dev/.runbox/bin/runbox",
	"/dev/.runbox/../.runbox", "/tmp/../dev/.runbox", "/dev", "/dev/",
}

// TestReservedMountTargetRefused: a mount on the reserved path would put
// the agent's files into the caller's directory (and shadow them); the spec
// is refused before anything is created, with or without an agent.
func TestReservedMountTargetRefused(t *testing.T) {
	dir := t.TempDir()
	cli := newExecutor(t).Client()
	for name, e := range map[string]func() runbox.Executor{
		"agent": func() runbox.Executor { return agentExecutor(t) },
		"plain": func() runbox.Executor { return newExecutor(t) },
	} {
		for _, target := range reservedTargets {
			spec := baseSpec()
			spec.Mounts = []runbox.Mount{{Source: dir, Target: target}}
			before := containersOfRun(t, cli)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			s, err := e().Open(ctx, spec)
			cancel()
			if s != nil {
				_ = s.Close(context.Background())
			}
			assert.ErrorIs(t, err, runbox.ErrInvalidSpec, "%s: target %q", name, target)
			assert.Equal(t, before, containersOfRun(t, cli), "%s: target %q: nothing is created", name, target)
		}
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries, "nothing was written into the caller's directory")

	// Positive control: a neighbour of the reserved path is an ordinary
	// target, and the agent still works beside it.
	spec := baseSpec()
	spec.Mounts = []runbox.Mount{{Source: dir, Target: "/dev/.runbox-not"}}
	s := open(t, agentExecutor(t), spec)
	o := run(t, s, runbox.ShellCommand("echo hi > /dev/.runbox-not/f && cat /dev/.runbox-not/f"))
	require.NoError(t, o.err)
	assert.Equal(t, "hi\n", o.stdout)
}

func TestCLIReservedMountTargetRefused(t *testing.T) {
	dir := t.TempDir()
	cli := newExecutor(t).Client()
	before := containersOfRun(t, cli)
	for _, target := range []string{"/dev/.runbox", "/dev/.runbox/run", "/dev"} {
		for _, verb := range []string{"open", "run"} {
			r := cliIn(t, "", nil, verb, runLabelFlag(), "-v", dir+":"+target, fixtureRef, "--", "sleep", "1000000")
			assert.Equal(t, 125, r.code, "%s -v %s", verb, target)
			assert.Empty(t, r.stdout)
			assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
			assert.Contains(t, r.stderr, "reserved")
		}
	}
	assert.Equal(t, before, containersOfRun(t, cli), "nothing is created")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries)
}
