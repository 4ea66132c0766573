package docker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path"
	"sync"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/internal/agent"
)

// Session is one running container. Its methods are safe for concurrent use
// and serialize with each other, except Close, which interrupts a Run in
// progress.
type Session struct {
	e    *Executor
	id   string
	spec runbox.Spec

	mu     callLock    // serializes Run, Snapshot and streaming processes
	closed atomic.Bool // set first thing in Close

	plan    *agentPlan    // nil: plain Engine exec
	noAgent string        // why plan is nil although an agent was wanted
	agentMu sync.Mutex    // guards agent, which a lost connection replaces
	agent   *agent.Client // the connection to the agent; nil until one is made

	hbStop, hbDone chan struct{} // the lease's renewer, when this program holds it
	hbOnce         sync.Once

	closeMu sync.Mutex
	removed bool
}

var _ runbox.Session = (*Session)(nil)

// ID returns the container ID.
func (s *Session) ID() string { return s.id }

// Spec returns the Spec the session was opened with.
func (s *Session) Spec() runbox.Spec { return s.spec }

// Open creates and starts a container made of exactly spec. The default
// network is none. When anything fails after the container was created,
// the container is removed before Open returns.
func (e *Executor) Open(ctx context.Context, spec runbox.Spec) (runbox.Session, error) {
	s, err := e.open(ctx, spec)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// OpenSession is Open for callers that hold the Docker backend itself: it
// returns the *Session, whose Docker-only reports (Agent, AgentAuth,
// LifetimeContainment) and Detach need no type assertion.
func (e *Executor) OpenSession(ctx context.Context, spec runbox.Spec) (*Session, error) {
	return e.open(ctx, spec)
}

func (e *Executor) open(ctx context.Context, spec runbox.Spec) (*Session, error) {
	spec, err := e.checkSpec(spec)
	if err != nil {
		return nil, err
	}
	if p := e.poolFor(spec); p != nil {
		if s, err := p.handOut(ctx, spec.Name); s != nil || err != nil {
			return s, err
		}
		// The pool is empty for now (it is refilling): open as without one.
	}
	return e.create(ctx, spec)
}

// checkSpec runs the checks that need no Engine and returns spec with
// the default network filled in.
func (e *Executor) checkSpec(spec runbox.Spec) (runbox.Spec, error) {
	if err := spec.Validate(); err != nil {
		return spec, err
	}
	if err := validateImageRef(spec.Image); err != nil {
		return spec, err
	}
	if err := checkReservedMounts(spec.Mounts); err != nil {
		return spec, err
	}
	if err := e.checkMountSources(spec.Mounts); err != nil {
		return spec, err
	}
	if spec.Name != "" && !namePattern.MatchString(spec.Name) {
		return spec, fmt.Errorf("%w: session name %q must match %s", runbox.ErrInvalidSpec, spec.Name, namePattern)
	}
	if spec.Network == "" {
		spec.Network = runbox.NetworkNone
	}
	return spec, nil
}

// create creates and starts a session of spec, which checkSpec passed.
func (e *Executor) create(ctx context.Context, spec runbox.Spec) (*Session, error) {
	if err := e.checkNetwork(ctx, spec.Network); err != nil {
		return nil, err
	}
	rt, err := e.runtime(ctx, spec.Runtime)
	if err != nil {
		return nil, err
	}
	plan, noAgent, err := e.planAgent(ctx, spec, rt)
	if err != nil {
		return nil, err
	}
	// Sessions that died with their program and that no lease ends are
	// swept once per Executor, before it adds its own.
	e.reapOnce.Do(func() { _, _ = e.Reap(ctx) })
	cfg, hostCfg := containerConfig(spec, e.owner, time.Now())
	cfg.Labels[LabelLease] = leaseLabel(e.lease)
	if plan != nil {
		if err := plan.apply(cfg, hostCfg); err != nil {
			return nil, err
		}
	}
	created, err := e.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: cfg, HostConfig: hostCfg, Name: spec.Name})
	if err != nil {
		if plan != nil && plan.runDir != "" {
			os.RemoveAll(plan.runDir)
		}
		if cerrdefs.IsConflict(err) {
			return nil, fmt.Errorf("%w: %w", runbox.ErrInvalidSpec, e.engineErr(err))
		}
		if cerrdefs.IsInvalidArgument(err) {
			return nil, fmt.Errorf("%w: %w%s", runbox.ErrInvalidSpec, e.engineErr(err), e.remoteNote(spec.Mounts))
		}
		return nil, e.classifyImageErr(spec.Image, err)
	}
	s := &Session{e: e, id: created.ID, spec: spec, plan: plan, noAgent: noAgent}
	if err := e.start(ctx, s); err != nil {
		if rmErr := s.remove(ctx); rmErr != nil {
			err = errors.Join(err, rmErr)
		}
		return nil, err
	}
	return s, nil
}

// start starts the container and confirms that its lifetime process is
// still running, so that a process that exits at once is reported here.
func (e *Executor) start(ctx context.Context, s *Session) error {
	if s.plan != nil {
		if err := e.deliver(ctx, s.id, s.plan); err != nil {
			return err
		}
	}
	if _, err := e.cli.ContainerStart(ctx, s.id, client.ContainerStartOptions{}); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("runbox/docker: open: %w: %w", runbox.ErrCancelled, ctx.Err())
		}
		return fmt.Errorf("runbox/docker: open: starting the lifetime process: %w: %w", runbox.ErrStart, e.engineErr(err))
	}
	if s.plan != nil {
		c, err := e.connectAgent(ctx, s, s.plan)
		if err != nil {
			return err
		}
		s.agent = c
		s.startHeartbeat()
		return nil
	}
	return s.checkRunning(ctx)
}

// checkRunning returns an error wrapping runbox.ErrSessionEnded when the
// lifetime process is no longer running.
func (s *Session) checkRunning(ctx context.Context) error {
	res, err := s.e.cli.ContainerInspect(ctx, s.id, client.ContainerInspectOptions{})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return fmt.Errorf("%w: container %s no longer exists", runbox.ErrSessionEnded, shortID(s.id))
		}
		return s.e.engineErr(err)
	}
	st := res.Container.State
	if st == nil || st.Running {
		return nil
	}
	msg := fmt.Sprintf("lifetime process exited with code %d", st.ExitCode)
	if st.OOMKilled {
		msg += " (out of memory)"
	}
	if st.Error != "" {
		msg += ": " + st.Error
	}
	return fmt.Errorf("%w: %s", runbox.ErrSessionEnded, msg)
}

// endedAfterLoss tells a lost agent connection caused by the session
// ending (the agent is PID 1, so its death stops the container a moment
// later) from a transport failure, waiting at most a few seconds.
func (s *Session) endedAfterLoss(ctx context.Context) error {
	s.agentMu.Lock()
	c := s.agent
	s.agentMu.Unlock()
	if c != nil {
		if err := c.Err(); errors.Is(err, agent.ErrSessionOver) {
			// The agent said so before it went: no need to ask the Engine,
			// which may already have removed a leased session.
			return fmt.Errorf("%w: %w", runbox.ErrSessionEnded, err)
		}
	}
	return s.waitEnded(ctx)
}

// waitEnded waits a few seconds for the lifetime process to stop and
// reports whether it did (ErrSessionEnded) or not (nil).
func (s *Session) waitEnded(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	wait := s.e.cli.ContainerWait(ctx, s.id, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	select {
	case <-wait.Result:
	case <-wait.Error:
	case <-ctx.Done():
	}
	return s.checkRunning(context.WithoutCancel(ctx))
}

// checkNetwork rejects a named network the Engine does not know. The
// built-in modes need no round trip.
func (e *Executor) checkNetwork(ctx context.Context, n runbox.NetworkPolicy) error {
	switch n {
	case runbox.NetworkNone, runbox.NetworkBridge, "host", "default":
		return nil
	}
	if _, err := e.cli.NetworkInspect(ctx, string(n), client.NetworkInspectOptions{}); err != nil {
		if cerrdefs.IsNotFound(err) {
			return fmt.Errorf("%w: unknown network %q", runbox.ErrInvalidSpec, n)
		}
		return e.engineErr(err)
	}
	return nil
}

// containerConfig translates a validated Spec. Nothing is added that the
// Spec does not say, apart from runbox's labels.
func containerConfig(spec runbox.Spec, owner string, now time.Time) (*container.Config, *container.HostConfig) {
	cfg := &container.Config{
		Image:      spec.Image,
		Env:        spec.Env,
		User:       spec.User,
		WorkingDir: spec.Dir,
		Labels:     sessionLabels(spec.Labels, owner, now),
	}
	if spec.Process != nil {
		// A non-empty Entrypoint stops the Engine from merging the image's
		// entrypoint and command: the lifetime process is exactly this.
		cfg.Entrypoint = spec.Process
	}
	sec := spec.Security
	hostCfg := &container.HostConfig{
		NetworkMode:    container.NetworkMode(spec.Network),
		Init:           &spec.Init,
		Runtime:        spec.Runtime,
		CapDrop:        sec.CapDrop,
		CapAdd:         sec.CapAdd,
		ReadonlyRootfs: sec.ReadOnlyRootfs,
	}
	if sec.NoNewPrivileges {
		hostCfg.SecurityOpt = []string{"no-new-privileges"}
	}
	for _, t := range sec.Tmpfs {
		if hostCfg.Tmpfs == nil {
			hostCfg.Tmpfs = map[string]string{}
		}
		hostCfg.Tmpfs[path.Clean(t.Target)] = t.Options
	}
	for _, m := range spec.Mounts {
		hostCfg.Mounts = append(hostCfg.Mounts, mount.Mount{
			Type:     mount.TypeBind,
			Source:   m.Source,
			Target:   path.Clean(m.Target),
			ReadOnly: m.ReadOnly,
		})
	}
	r := spec.Resources
	hostCfg.Memory = r.MemoryBytes
	if r.MemoryBytes > 0 {
		hostCfg.MemorySwap = r.MemoryBytes // no swap beyond the limit
	}
	hostCfg.NanoCPUs = int64(math.Round(r.CPUs * 1e9))
	if r.Pids > 0 {
		pids := r.Pids
		hostCfg.PidsLimit = &pids
	}
	return cfg, hostCfg
}

// Run executes cmd in the session and waits for it. A process that ran to
// completion yields its Result, whatever its exit code. Any error means it
// did not complete normally; the Result's ExitCode is then -1. See
// docs/docker.md for what cancellation does to the started process.
func (s *Session) Run(ctx context.Context, cmd runbox.Command, streams runbox.Streams) (runbox.Result, error) {
	res, err := runbox.RunLimited(ctx, cmd, streams, func(ctx context.Context, streams runbox.Streams) (runbox.Result, error) {
		return s.run(ctx, cmd, streams)
	})
	if err != nil {
		return runbox.Result{ExitCode: -1}, err
	}
	return res, nil
}

func (s *Session) run(ctx context.Context, cmd runbox.Command, streams runbox.Streams) (runbox.Result, error) {
	if err := cmd.Validate(); err != nil {
		return runbox.Result{}, err
	}
	if cmd.CleanEnv && s.plan == nil {
		return runbox.Result{}, fmt.Errorf("%w: CleanEnv: the Engine's exec always adds the container's environment; a session needs the runbox agent to clear it", runbox.ErrUnsupported)
	}
	if ctx.Err() != nil {
		return runbox.Result{}, cancelled(ctx, "")
	}
	if err := s.mu.lock(ctx); err != nil {
		return runbox.Result{}, err
	}
	defer s.mu.unlock()
	if s.closed.Load() {
		return runbox.Result{}, runbox.ErrSessionClosed
	}
	var res runbox.Result
	var err error
	if s.plan != nil {
		res, err = s.runAgent(ctx, cmd, streams)
	} else {
		res, err = s.exec(ctx, cmd, streams)
	}
	if s.closed.Load() && !errors.Is(err, runbox.ErrCancelled) {
		// Close overlapped this Run and killed the command: whatever the
		// Engine reported afterwards is not the command's own outcome.
		return runbox.Result{}, fmt.Errorf("%w: Close interrupted the command (%v)", runbox.ErrSessionClosed, err)
	}
	return res, err
}

// Snapshot commits the session's writable layer as a new image. Bind
// mounts are not part of it. The container is paused only when opts.Pause
// is set. runbox's session labels are blanked so that a sweep never takes
// a snapshot for a leaked session.
func (s *Session) Snapshot(ctx context.Context, opts runbox.SnapshotOptions) (runbox.Image, error) {
	if opts.Reference != "" {
		if err := validateTagRef(opts.Reference); err != nil {
			return runbox.Image{}, err
		}
	}
	for k := range opts.Labels {
		if k == "" {
			return runbox.Image{}, fmt.Errorf("%w: empty label name", runbox.ErrInvalidSpec)
		}
	}
	if err := s.mu.lock(ctx); err != nil {
		return runbox.Image{}, err
	}
	defer s.mu.unlock()
	if s.closed.Load() {
		return runbox.Image{}, runbox.ErrSessionClosed
	}
	// The image is committed untagged and tagged afterwards: an Engine
	// that refuses the reference only after committing (a repository name
	// it finds invalid) would otherwise leave the image behind, untagged.
	res, err := s.e.cli.ContainerCommit(ctx, s.id, client.ContainerCommitOptions{
		Comment: opts.Comment,
		Author:  opts.Author,
		NoPause: !opts.Pause,
		Config:  s.snapshotConfig(opts.Labels),
	})
	if err != nil {
		if s.closed.Load() {
			return runbox.Image{}, fmt.Errorf("%w: %w", runbox.ErrSessionClosed, err)
		}
		return runbox.Image{}, fmt.Errorf("runbox/docker: snapshot: %w", s.e.engineErr(err))
	}
	if opts.Reference != "" {
		if _, err := s.e.cli.ImageTag(ctx, client.ImageTagOptions{Source: res.ID, Target: opts.Reference}); err != nil {
			err = fmt.Errorf("runbox/docker: snapshot: tagging %s: %w", opts.Reference, s.e.engineErr(err))
			if cerrdefs.IsInvalidArgument(err) {
				err = fmt.Errorf("%w: %w", runbox.ErrInvalidSpec, err)
			}
			if _, rmErr := s.e.cli.ImageRemove(context.WithoutCancel(ctx), res.ID, client.ImageRemoveOptions{}); rmErr != nil && !cerrdefs.IsNotFound(rmErr) {
				err = errors.Join(err, fmt.Errorf("%w: removing the untagged snapshot %s: %w", runbox.ErrCleanup, shortID(res.ID), s.e.engineErr(rmErr)))
			}
			return runbox.Image{}, err
		}
	}
	return s.e.InspectImage(ctx, res.ID)
}

// snapshotConfig is the image config a snapshot gets over the container's.
// With an agent, the container's entrypoint is the agent, which lives
// outside the snapshot; the snapshot gets the lifetime process instead.
func (s *Session) snapshotConfig(labels map[string]string) *container.Config {
	cfg := &container.Config{Labels: snapshotLabels(labels)}
	if s.plan != nil {
		cfg.Entrypoint = s.plan.lifetime
		cfg.Labels[LabelLease] = ""
		cfg.Labels[LabelAgent] = ""
		cfg.Labels[LabelLifetime] = ""
		if !s.plan.local {
			cfg.Labels[LabelAgentKey] = ""
		}
	}
	return cfg
}

// Agent reports whether the session runs commands through the runbox
// agent (fast, killable) rather than plain Engine exec.
func (s *Session) Agent() bool { return s.plan != nil }

// AgentMissing says why a session opened by this Executor runs commands
// with plain Engine exec although the Executor would have used an agent
// (none was found, or none fits the image's architecture). It is "" when
// the session has its agent, when WithoutAgent asked for none, and for a
// session found with Executor.Session.
func (s *Session) AgentMissing() string { return s.noAgent }

// LifetimeContainment reports what cancelling a command achieves: with the
// agent, its process group is killed (best effort: a process that leaves
// the group survives until Close); with plain Engine exec nothing is
// killed until Close. Close itself always removes every process.
func (s *Session) LifetimeContainment() runbox.LifetimeContainment {
	if s.plan != nil {
		return runbox.LifetimeContainmentBestEffort
	}
	return runbox.LifetimeContainmentUnspecified
}

// Close removes the container, killing every process in it, together with
// its anonymous volumes. It runs on a context detached from ctx (bounded by
// WithCloseTimeout), so it works after ctx was cancelled. Close is
// idempotent; a Close that failed may be retried.
func (s *Session) Close(ctx context.Context) error {
	s.closed.Store(true)
	return s.remove(ctx)
}

func (s *Session) remove(ctx context.Context) error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.removed {
		return nil
	}
	s.stopHeartbeat()
	s.agentMu.Lock()
	if s.agent != nil {
		s.agent.Close()
	}
	s.agentMu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.e.closeTimeout)
	defer cancel()
	_, err := s.e.cli.ContainerRemove(ctx, s.id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && cerrdefs.IsConflict(err) && s.plan != nil && s.plan.lease > 0 {
		// The Engine is already removing a leased session (AutoRemove):
		// wait until it is gone.
		err = s.waitRemoved(ctx)
	}
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("%w: removing container %s: %w", runbox.ErrCleanup, shortID(s.id), s.e.engineErr(err))
	}
	s.removed = true
	if s.plan != nil && s.plan.runDir != "" {
		if err := os.RemoveAll(s.plan.runDir); err != nil {
			return fmt.Errorf("%w: removing the agent's directory: %w", runbox.ErrCleanup, err)
		}
	}
	return nil
}

// validateTagRef accepts "name[:tag]" without a digest.
func validateTagRef(ref string) error {
	if err := validateImageRef(ref); err != nil {
		return err
	}
	if imageIDPattern.MatchString(ref) {
		return fmt.Errorf("%w: snapshot reference %q looks like an image ID", runbox.ErrInvalidSpec, ref)
	}
	return nil
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
