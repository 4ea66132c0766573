//go:build linux

package integration

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/docker"
	"github.com/runbox-dev/runbox/host"
	"github.com/runbox-dev/runbox/runboxtest"
)

// TestConformanceDockerSession runs the conformance suite against Docker
// sessions on runc and on gVisor, each with the Engine's defaults and
// hardened. The claims are what each session reports (Guarantees, read
// from the Engine's inspect), so the suite proves the report. The control
// is the unconfined host executor: the sessions mount the suite's
// directories at their host paths, so both see the same files, and every
// refusal in a session is paired with a success on the host, or, for the
// hardening, in the session with the Engine's defaults (the peer).
func TestConformanceDockerSession(t *testing.T) {
	for _, rt := range []string{"runc", gvisor} {
		t.Run(rt, func(t *testing.T) {
			e := agentExecutor(t)
			if rt == gvisor {
				needRuntime(t, e, gvisor)
			}
			work, outside := t.TempDir(), t.TempDir()
			secret := filepath.Join(t.TempDir(), "secret")
			require.NoError(t, os.WriteFile(secret, []byte("conformance-secret\n"), 0o600))
			control, err := host.New()
			require.NoError(t, err)
			t.Cleanup(func() { _ = control.Close() })

			spec := baseSpec()
			spec.Init = false // the agent is PID 1
			spec.Runtime = rt
			spec.Mounts = []runbox.Mount{
				{Source: work, Target: work},
				{Source: outside, Target: outside, ReadOnly: true},
			}
			peer := open(t, e, spec)
			hardened := spec
			hardened.Security = runbox.Security{
				CapDrop: []string{"ALL"}, CapAdd: []string{"CHOWN"}, NoNewPrivileges: true, ReadOnlyRootfs: true,
				Tmpfs: []runbox.Tmpfs{{Target: "/tmp"}},
			}
			hard := open(t, e, hardened)

			kernel := runbox.KernelHost
			if rt == gvisor {
				kernel = runbox.KernelGVisor
			}
			for _, c := range []struct {
				name string
				s    *docker.Session
				want func(t *testing.T, g runbox.Guarantees)
			}{
				{"defaults", peer, func(t *testing.T, g runbox.Guarantees) {
					assert.False(t, g.ReadOnlyRoot || g.NoNewPrivileges)
					assert.Contains(t, g.Capabilities, "CHOWN")
					assert.Contains(t, g.Capabilities, "SYS_CHROOT")
				}},
				{"hardened", hard, func(t *testing.T, g runbox.Guarantees) {
					assert.True(t, g.ReadOnlyRoot)
					assert.Equal(t, []string{"CHOWN"}, g.Capabilities)
					// gVisor does not show the flag, so it is not claimed.
					assert.Equal(t, rt != gvisor, g.NoNewPrivileges)
				}},
			} {
				t.Run(c.name, func(t *testing.T) {
					g, err := c.s.Guarantees(context.Background())
					require.NoError(t, err)
					t.Logf("%s %s: %+v", rt, c.name, g)
					assert.Equal(t, kernel, g.Kernel)
					assert.True(t, g.ProcessBoundary && g.WriteBoundary && g.ReadBoundary && g.NetworkBoundary && g.EnvScrub)
					assert.Equal(t, "0", g.User)
					c.want(t, g)
					runboxtest.Run(t, runboxtest.Backend{
						Name:        rt + " session, " + c.name,
						Process:     c.s,
						Claims:      g,
						Control:     control,
						Peer:        peer,
						WritableDir: work,
						OutsideDir:  outside,
						SecretFile:  secret,
					})
				})
			}
		})
	}
}
