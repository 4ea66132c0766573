package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/docker"
	"github.com/runbox-dev/runbox/internal/procstart"
)

func TestEveryCommandIsDocumented(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			return
		}
		assert.NotEmpty(t, c.Short, c.CommandPath())
		if c.Runnable() && c.Name() != "version" {
			assert.NotEmpty(t, c.Example, "%s has no example", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRoot())
}

func TestCompletionAndVersion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		root := newRoot()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetArgs([]string{"completion", shell})
		require.NoError(t, root.Execute(), shell)
		assert.Contains(t, out.String(), "runbox", shell)
	}
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"--host", "unix://" + filepath.Join(t.TempDir(), "none.sock"), "version"})
	require.NoError(t, root.Execute(), "an unreachable Engine does not fail version")
	assert.True(t, strings.HasPrefix(out.String(), "runbox "+cliVersion()+" ("), out.String())
	assert.Contains(t, out.String(), "\nEngine:\n", out.String())
	assert.Contains(t, out.String(), "none.sock", "the endpoint is named")

	root = newRoot()
	out.Reset()
	root.SetOut(&out)
	root.SetArgs([]string{"--version"})
	require.NoError(t, root.Execute())
	assert.Equal(t, "runbox version "+cliVersion()+"\n", out.String())
}

func TestParseVolume(t *testing.T) {
	dir := t.TempDir()
	m, err := parseVolume(dir + ":/data:ro")
	require.NoError(t, err)
	assert.Equal(t, runbox.Mount{Source: dir, Target: "/data", ReadOnly: true}, m)
	m, err = parseVolume(dir + ":/data")
	require.NoError(t, err)
	assert.False(t, m.ReadOnly)
	for _, bad := range []string{dir, "rel:/x", dir + ":", dir + ":rel", dir + ":/x:rx", dir + ":/x:ro:extra"} {
		_, err := parseVolume(bad)
		assert.ErrorIs(t, err, runbox.ErrInvalidSpec, bad)
	}
}

func TestOutcome(t *testing.T) {
	bg := context.Background()
	assert.NoError(t, outcome(bg, 0, runbox.Result{}, nil))
	var ec *exitCode
	// The backend's exit code is the status, signal deaths included: the
	// backends report 128+N in the numbering of the system that ran the
	// command, which runbox does not renumber.
	for _, res := range []runbox.Result{
		{ExitCode: 3},
		{ExitCode: 143, Signal: "SIGTERM"},
		{ExitCode: 137, Signal: "SIGKILL"},
		{ExitCode: 158, Signal: "SIGUSR1"}, // SIGUSR1 is 30 on macOS, 10 on Linux
		{ExitCode: 159, Signal: "SIGSYS"},
	} {
		require.ErrorAs(t, outcome(bg, 0, res, nil), &ec, "%+v", res)
		assert.Equal(t, res.ExitCode, ec.code, "%+v", res)
	}

	timedOut := fmt.Errorf("%w: %w", runbox.ErrCancelled, context.DeadlineExceeded)
	require.ErrorAs(t, outcome(bg, time.Second, runbox.Result{ExitCode: -1}, timedOut), &ec)
	assert.Equal(t, exitTimeout, ec.code)

	interrupted, cancel := context.WithCancel(bg)
	cancel()
	require.ErrorAs(t, outcome(interrupted, 0, runbox.Result{ExitCode: -1}, fmt.Errorf("%w: %w", runbox.ErrCancelled, context.Canceled)), &ec)
	assert.Equal(t, 130, ec.code)

	other := errors.New("engine down")
	assert.ErrorIs(t, outcome(bg, 0, runbox.Result{ExitCode: -1}, other), other)
}

func TestExecuteMapsFailuresTo125(t *testing.T) {
	// Bad flags never reach the Engine.
	stderr := os.Stderr
	r, w, _ := os.Pipe()
	os.Stderr = w
	code := execute([]string{"exec", "--timeout", "soon", "s", "--", "true"})
	w.Close()
	os.Stderr = stderr
	msg, _ := io.ReadAll(r)
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, string(msg), "--timeout")
}

func TestOwnerGone(t *testing.T) {
	host, _ := os.Hostname()
	now := time.Now()
	me, err := procstart.Of(os.Getpid())
	require.NoError(t, err)
	alive := docker.Owner{Host: host, PID: os.Getpid(), Start: me.ID}.String()
	assert.False(t, ownerGone(alive, now, host), "the owner itself")
	assert.False(t, ownerGone(host+"/cli", now, host))
	assert.False(t, ownerGone("other-host/1/1", now, host))
	assert.False(t, ownerGone("other-host/1", now, host))
	assert.True(t, ownerGone(host+"/2147483000/1", now, host), "a pid nobody has")
	assert.True(t, ownerGone(host+"/2147483000", now, host), "a pid nobody has, old label")

	// Another process that got the owner's pid later: its start differs.
	reused := docker.Owner{Host: host, PID: os.Getpid(), Start: me.ID + "1"}.String()
	assert.True(t, ownerGone(reused, now, host), "a reused pid")

	// An old label has no start: the pid's process is the owner unless it
	// started after the session was created.
	old := fmt.Sprintf("%s/%d", host, os.Getpid())
	assert.False(t, ownerGone(old, now, host))
	assert.True(t, ownerGone(old, me.Time.Add(-time.Hour), host), "a process younger than the session is not its owner")
}
