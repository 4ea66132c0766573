package docker

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/runbox-dev/runbox"
)

// TestSameSessionSpec: only the name may differ between a pool's Spec and
// the Spec an Open asks for; empty lists and maps equal none.
func TestSameSessionSpec(t *testing.T) {
	base := runbox.Spec{Image: "busybox", Network: runbox.NetworkNone, Process: []string{"sleep", "1"},
		Env: []string{"A=1"}, Labels: map[string]string{"k": "v"}}
	same := func(f func(*runbox.Spec)) bool {
		s := base
		s.Env = append([]string(nil), base.Env...)
		s.Labels = map[string]string{"k": "v"}
		f(&s)
		return sameSessionSpec(base, s)
	}
	assert.True(t, same(func(s *runbox.Spec) {}))
	assert.True(t, same(func(s *runbox.Spec) { s.Name = "other" }), "the name is given at hand-out")
	assert.True(t, sameSessionSpec(runbox.Spec{Image: "x"}, runbox.Spec{Image: "x", Env: []string{}, Labels: map[string]string{},
		Mounts: []runbox.Mount{}, Security: runbox.Security{CapAdd: []string{}, CapDrop: []string{}, Tmpfs: []runbox.Tmpfs{}}}))
	for name, f := range map[string]func(*runbox.Spec){
		"image":     func(s *runbox.Spec) { s.Image = "alpine" },
		"env":       func(s *runbox.Spec) { s.Env = []string{"A=2"} },
		"env added": func(s *runbox.Spec) { s.Env = append(s.Env, "B=1") },
		"labels":    func(s *runbox.Spec) { s.Labels["k"] = "w" },
		"no labels": func(s *runbox.Spec) { s.Labels = nil },
		"process":   func(s *runbox.Spec) { s.Process = []string{"sleep", "2"} },
		"network":   func(s *runbox.Spec) { s.Network = runbox.NetworkBridge },
		"mounts":    func(s *runbox.Spec) { s.Mounts = []runbox.Mount{{Source: "/a", Target: "/b"}} },
		"user":      func(s *runbox.Spec) { s.User = "nobody" },
		"init":      func(s *runbox.Spec) { s.Init = true },
		"limits":    func(s *runbox.Spec) { s.Resources.Pids = 10 },
		"security":  func(s *runbox.Spec) { s.Security.ReadOnlyRootfs = true },
		"runtime":   func(s *runbox.Spec) { s.Runtime = "runsc" },
		"dir":       func(s *runbox.Spec) { s.Dir = "/tmp" },
	} {
		assert.False(t, same(f), name)
	}
}
