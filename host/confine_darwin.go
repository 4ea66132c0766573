package host

import (
	"fmt"
	"os"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/internal/sandbox/seatbelt"
)

// probeConfinement checks for sandbox-exec. Seatbelt gives write, read and
// network boundaries; it does not hide other processes, and teardown stays
// the process group's (best effort).
func (e *Executor) probeConfinement() (runbox.Guarantees, error) {
	cp := e.conf
	g := runbox.Guarantees{EnvScrub: !e.cfg.inheritEnv, Lifetime: runbox.LifetimeContainmentBestEffort}
	if cp.policy.Unconfined {
		return g, nil
	}
	if fi, err := os.Stat(seatbelt.Launcher); err != nil || fi.Mode()&0o111 == 0 {
		return g, fmt.Errorf("%w: %s is not available", ErrConfinementUnavailable, seatbelt.Launcher)
	}
	g.WriteBoundary = !cp.policy.BroadWrite
	g.ReadBoundary = cp.readable != nil
	g.NetworkBoundary = !cp.policy.Network
	g.Mechanisms = []string{"seatbelt"}
	return g, nil
}
