//go:build linux

package integration

import (
	"testing"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/docker"
	"github.com/runbox-dev/runbox/runboxtest"
)

// TestCollect runs the outcome table of runbox.Collect (the one the host
// executor passes in runboxtest) against a session with the agent, a
// plain-exec session and the executor's one-shot Run.
func TestCollect(t *testing.T) {
	t.Run("agent session", func(t *testing.T) {
		spec := baseSpec()
		spec.Init = false // the agent is PID 1
		s := open(t, agentExecutor(t), spec)
		if !s.(*docker.Session).Agent() {
			t.Fatal("the session has no agent")
		}
		runboxtest.RunCollect(t, runboxtest.CollectBackend{Name: "agent session", Runner: s, ScratchDir: "/tmp"})
	})
	t.Run("plain exec session", func(t *testing.T) {
		s := open(t, newExecutor(t, docker.WithoutAgent()), baseSpec())
		runboxtest.RunCollect(t, runboxtest.CollectBackend{Name: "plain exec session", Runner: s, ScratchDir: "/tmp"})
	})
	t.Run("one-shot Run", func(t *testing.T) {
		// Every command gets a new session: the scratch directory is a
		// host directory mounted into each.
		spec := baseSpec()
		spec.Init = false
		spec.Mounts = []runbox.Mount{{Source: t.TempDir(), Target: "/scratch"}}
		e := agentExecutor(t, docker.WithDefaultSpec(spec))
		runboxtest.RunCollect(t, runboxtest.CollectBackend{Name: "one-shot Run", Runner: e, ScratchDir: "/scratch"})
	})
}
