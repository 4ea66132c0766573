//go:build linux

package integration

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/host"
	"github.com/runbox-dev/runbox/runboxtest"
)

// TestConformanceDockerSession runs the conformance suite against a Docker
// session. The control is the unconfined host executor: the session mounts
// the suite's directories at their host paths, so both see the same files,
// and every refusal in the session is paired with a success on the host.
func TestConformanceDockerSession(t *testing.T) {
	e := agentExecutor(t)
	work, outside := t.TempDir(), t.TempDir()
	secret := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(secret, []byte("conformance-secret\n"), 0o600))

	spec := baseSpec()
	spec.Mounts = []runbox.Mount{
		{Source: work, Target: work},
		{Source: outside, Target: outside, ReadOnly: true},
	}
	s := open(t, e, spec)
	control, err := host.New()
	require.NoError(t, err)
	t.Cleanup(func() { _ = control.Close() })

	runboxtest.Run(t, runboxtest.Backend{
		Name:    "docker session",
		Process: s,
		Claims: runbox.Guarantees{
			ProcessBoundary: true, // its own PID namespace
			WriteBoundary:   true, // host paths only through writable mounts
			ReadBoundary:    true, // host paths only through mounts
			NetworkBoundary: true, // network none
			EnvScrub:        true, // the caller's environment never enters
		},
		Control:     control,
		WritableDir: work,
		OutsideDir:  outside,
		SecretFile:  secret,
	})
}
