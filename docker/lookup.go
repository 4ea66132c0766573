package docker

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/internal/agent"
)

// fullIDPattern matches a complete container ID.
var fullIDPattern = regexp.MustCompile(`^[a-f0-9]{64}$`)

// namePattern is what the Engine accepts as a container name.
var namePattern = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`)

// SessionInfo describes a session container found on the Engine.
type SessionInfo struct {
	// ID is the full container ID.
	ID string `json:"id"`
	// Name is the container name without the leading "/".
	Name string `json:"name"`
	// Image is the image reference the session was opened with.
	Image string `json:"image"`
	// Created is when runbox created the session.
	Created time.Time `json:"created"`
	// State is the Engine's state: "running", "exited", "paused", ...
	State string `json:"state"`
	// Owner is the LabelOwner value: "hostname/pid/start" of the creator
	// (see Owner).
	Owner string `json:"owner"`
	// Labels are all of the container's labels.
	Labels map[string]string `json:"labels,omitempty"`
}

// Sessions lists every runbox session on the Engine, newest first,
// including sessions whose lifetime process has ended.
func (e *Executor) Sessions(ctx context.Context) ([]SessionInfo, error) {
	res, err := e.cli.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: client.Filters{}.Add("label", LabelKind+"="+KindSession),
	})
	if err != nil {
		return nil, e.engineErr(err)
	}
	out := make([]SessionInfo, 0, len(res.Items))
	for _, c := range res.Items {
		out = append(out, sessionInfo(c))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.After(out[j].Created) })
	return out, nil
}

func sessionInfo(c container.Summary) SessionInfo {
	info := SessionInfo{
		ID:     c.ID,
		Image:  c.Image,
		State:  string(c.State),
		Owner:  c.Labels[LabelOwner],
		Labels: c.Labels,
	}
	if len(c.Names) > 0 {
		info.Name = strings.TrimPrefix(c.Names[0], "/")
	}
	if t, err := time.Parse(time.RFC3339, c.Labels[LabelCreated]); err == nil {
		info.Created = t
	} else {
		info.Created = time.Unix(c.Created, 0).UTC()
	}
	return info
}

// Find resolves ref — a full session ID, a unique ID prefix, or a name —
// to one session. No match wraps runbox.ErrSessionNotFound; a prefix that
// matches several sessions wraps runbox.ErrAmbiguous. Only runbox sessions
// are considered, never other containers.
func (e *Executor) Find(ctx context.Context, ref string) (SessionInfo, error) {
	if ref == "" {
		return SessionInfo{}, fmt.Errorf("%w: empty session reference", runbox.ErrSessionNotFound)
	}
	all, err := e.Sessions(ctx)
	if err != nil {
		return SessionInfo{}, err
	}
	var prefixed []SessionInfo
	for _, s := range all {
		if s.ID == ref || s.Name == strings.TrimPrefix(ref, "/") {
			return s, nil
		}
		if strings.HasPrefix(s.ID, ref) {
			prefixed = append(prefixed, s)
		}
	}
	switch len(prefixed) {
	case 0:
		return SessionInfo{}, fmt.Errorf("%w: no session matches %q on the Engine %s", runbox.ErrSessionNotFound, ref, e.endpoint)
	case 1:
		return prefixed[0], nil
	}
	ids := make([]string, len(prefixed))
	for i, s := range prefixed {
		ids[i] = shortID(s.ID)
	}
	return SessionInfo{}, fmt.Errorf("%w: %q matches %d sessions (%s)", runbox.ErrAmbiguous, ref, len(prefixed), strings.Join(ids, ", "))
}

// Session re-attaches to an existing session by ID, unique ID prefix or
// name, for example one opened by another process. The returned session
// serializes its own calls, but not with handles held by other processes.
func (e *Executor) Session(ctx context.Context, ref string) (*Session, error) {
	id := ref
	if !fullIDPattern.MatchString(ref) {
		// Only a full ID can be inspected directly; anything else needs
		// the list to resolve a prefix or a name.
		info, err := e.Find(ctx, ref)
		if err != nil {
			return nil, err
		}
		id = info.ID
	}
	res, err := e.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return nil, fmt.Errorf("%w: no session matches %q on the Engine %s", runbox.ErrSessionNotFound, ref, e.endpoint)
		}
		return nil, e.engineErr(err)
	}
	cfg := res.Container.Config
	if cfg == nil || cfg.Labels[LabelKind] != KindSession {
		return nil, fmt.Errorf("%w: %s is not a runbox session", runbox.ErrSessionNotFound, shortID(id))
	}
	spec := runbox.Spec{
		Image: cfg.Image, Name: strings.TrimPrefix(res.Container.Name, "/"), Labels: cfg.Labels,
		User: cfg.User, Env: cfg.Env, Process: cfg.Entrypoint, Dir: cfg.WorkingDir,
	}
	if hc := res.Container.HostConfig; hc != nil {
		spec.Network = runbox.NetworkPolicy(hc.NetworkMode)
		spec.Runtime = hc.Runtime
		spec.Security = securityOf(hc)
		spec.Resources = runbox.Resources{MemoryBytes: hc.Memory, CPUs: float64(hc.NanoCPUs) / 1e9}
		if hc.PidsLimit != nil {
			spec.Resources.Pids = *hc.PidsLimit
		}
		// The caller's mounts; runbox's own (the agent's) are not part of
		// the spec.
		for _, m := range hc.Mounts {
			if m.Type == mount.TypeBind && m.Target != reservedDir && !strings.HasPrefix(m.Target, reservedDir+"/") {
				spec.Mounts = append(spec.Mounts, runbox.Mount{Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly})
			}
		}
	}
	s := &Session{e: e, id: res.Container.ID, spec: spec}
	if how := cfg.Labels[LabelAgent]; how != "" {
		// A session with an agent: reach it as Open did.
		plan := &agentPlan{local: how == AgentAuthKernel.String()}
		if err := json.Unmarshal([]byte(cfg.Labels[LabelLifetime]), &plan.lifetime); err != nil {
			return nil, fmt.Errorf("%w: session %s has no valid lifetime label", ErrAgentUnavailable, shortID(id))
		}
		if ttl, err := time.ParseDuration(cfg.Labels[LabelLease]); err == nil {
			plan.lease = ttl
		}
		for _, m := range res.Container.Mounts {
			if m.Destination == agentRunDir && m.Type == "bind" {
				plan.runDir = filepath.Dir(m.Source)
			}
		}
		if !plan.local {
			key, err := hex.DecodeString(cfg.Labels[LabelAgentKey])
			if err != nil || len(key) != agent.KeySize {
				return nil, fmt.Errorf("%w: session %s has no valid agent key label", ErrAgentUnavailable, shortID(id))
			}
			plan.key = key
		}
		if plan.local && (!e.localEngine || plan.runDir == "") {
			// A local session seen through a remote connection: its agent
			// serves only callers on its own host.
			return nil, fmt.Errorf("%w: session %s serves callers on the Engine's host only", ErrAgentUnavailable, shortID(id))
		}
		s.spec.Process, s.plan = plan.lifetime, plan
		// The agent is reached at the first call that needs it: closing a
		// session found here needs no agent, not even a live one.
	}
	return s, nil
}

// securityOf reads a container's hardening back into Spec terms.
func securityOf(hc *container.HostConfig) runbox.Security {
	sec := runbox.Security{CapDrop: hc.CapDrop, CapAdd: hc.CapAdd, ReadOnlyRootfs: hc.ReadonlyRootfs}
	for _, o := range hc.SecurityOpt {
		if o == "no-new-privileges" || o == "no-new-privileges:true" || o == "no-new-privileges=true" {
			sec.NoNewPrivileges = true
		}
	}
	for t, o := range hc.Tmpfs {
		sec.Tmpfs = append(sec.Tmpfs, runbox.Tmpfs{Target: t, Options: o})
	}
	sort.Slice(sec.Tmpfs, func(i, j int) bool { return sec.Tmpfs[i].Target < sec.Tmpfs[j].Target })
	return sec
}
