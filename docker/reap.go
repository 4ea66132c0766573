package docker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/runbox-dev/runbox/internal/procstart"
)

// Reap removes the leased sessions of this host whose program has died and
// that no agent will end: sessions without an agent (plain exec), and
// sessions that never started (their program died between creating and
// starting the container). A session with a running agent is left to its
// lease. Persistent sessions (WithoutLease, `runbox open`) are never
// reaped. Every Executor reaps once, at its first Open; Reap returns the
// IDs it removed.
func (e *Executor) Reap(ctx context.Context) ([]string, error) {
	res, err := e.cli.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: client.Filters{}.Add("label", LabelKind+"="+KindSession),
	})
	if err != nil {
		return nil, e.engineErr(err)
	}
	host, _ := os.Hostname()
	var removed []string
	var errs []error
	inUse := map[string]bool{}
	for _, c := range res.Items {
		for _, m := range c.Mounts {
			if m.Destination == agentRunDir {
				inUse[filepath.Dir(m.Source)] = true
			}
		}
	}
	if e.localEngine {
		removeStaleRunDirs(e.cli.DaemonHost(), inUse)
	}
	for _, c := range res.Items {
		lease := c.Labels[LabelLease]
		if lease == "" || lease == leaseLabel(0) {
			continue
		}
		if c.Labels[LabelAgent] != "" && c.State == "running" {
			continue // its lease ends it
		}
		created := time.Unix(c.Created, 0)
		if !ownerGone(c.Labels[LabelOwner], created, host) {
			continue
		}
		_, err := e.cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		if err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
			errs = append(errs, e.engineErr(err))
			continue
		}
		removed = append(removed, c.ID)
	}
	return removed, errors.Join(errs...)
}

// ownerGone reports whether owner names a process of this host that no
// longer exists, or whose pid now belongs to a process started later. An
// owner that cannot be judged (another host, a platform that does not
// tell start times) is taken as alive: reaping is never a guess.
func ownerGone(label string, created time.Time, host string) bool {
	o, ok := ParseOwner(label)
	if !ok || o.Host != host {
		return false
	}
	st, err := procstart.Of(o.PID)
	if errors.Is(err, procstart.ErrUnknown) {
		return false
	}
	if err != nil {
		return true // no such process
	}
	if o.Start != "" {
		return st.ID != o.Start
	}
	return !created.IsZero() && !st.Time.IsZero() && st.Time.After(created.Add(2*time.Second))
}

// staleAfter is how old a run directory must be before Reap takes it for
// a leftover: an Open creates it a moment before its container.
const staleAfter = time.Minute

// removeStaleRunDirs removes the host directories of local agent sessions
// (see agentPlan.apply) that no session's container mounts any more: those
// of programs that died, whose leased sessions the Engine removed.
func removeStaleRunDirs(engine string, inUse map[string]bool) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), runDirPattern))
	for _, d := range dirs {
		fi, err := os.Lstat(d)
		if err != nil || !fi.IsDir() || inUse[d] || time.Since(fi.ModTime()) < staleAfter {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(d, "engine")); err != nil || string(b) != engine {
			continue
		}
		_ = os.RemoveAll(d)
	}
}
