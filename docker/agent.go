package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/internal/agent"
)

// EnvAgent names the runbox binary to use as the in-session agent.
const EnvAgent = "RUNBOX_AGENT"

// ErrAgentUnavailable reports that a required agent could not be used.
var ErrAgentUnavailable = errors.New("runbox/docker: agent unavailable")

// The reserved path inside every session with an agent. It lies under the
// session's /dev, a tmpfs the runtime creates at start, and is made of
// bind mounts or a volume: nothing of it is in the writable layer, so
// snapshots never hold the agent.
const (
	reservedDir   = "/dev/.runbox"
	agentInPath   = reservedDir + "/bin/runbox"
	agentRunDir   = reservedDir + "/run"
	agentSockPath = agent.DefaultSocket
	agentKeyPath  = agentRunDir + "/key"
)

// LabelAgentKey holds the session key of a session reached through a
// remote Engine (hex), so that another process of the caller's can
// authenticate the agent too. Only those who can inspect the container
// read it, and they can exec into the session as root anyway; nothing in
// the session can read a label. Snapshots blank it.
const LabelAgentKey = "dev.runbox.agent-key"

// LabelAgent records how a session's agent is reached: "kernel" (a local
// Engine, a session on the host's kernel) or "key" (a remote Engine, or a
// session on another kernel such as gVisor's; see AgentAuth). Sessions
// without an agent have no such label.
const LabelAgent = "dev.runbox.agent"

// LabelLifetime records the lifetime process the agent runs, as a JSON
// array, so that a caller that finds the session again knows it.
const LabelLifetime = "dev.runbox.lifetime"

// agentMode says whether and how sessions get an agent.
type agentMode int

const (
	agentAuto     agentMode = iota // use one when found, else plain exec
	agentOff                       // never
	agentRequired                  // Open fails without one
)

// WithAgent uses the runbox binary at path as the in-session agent. It
// must be a static Linux executable for the session's architecture (build
// it with CGO_ENABLED=0).
func WithAgent(path string) Option {
	return func(c *config) error {
		c.agentPath = path
		return nil
	}
}

// WithAgentRequired makes Open fail with ErrAgentUnavailable instead of
// falling back to plain Engine exec when no usable agent is found.
func WithAgentRequired() Option {
	return func(c *config) error {
		c.agentMode = agentRequired
		return nil
	}
}

// WithoutAgent makes every session use plain Engine exec.
func WithoutAgent() Option {
	return func(c *config) error {
		c.agentMode = agentOff
		return nil
	}
}

// agentCandidates lists where an agent may be: the option, $RUNBOX_AGENT,
// this very program when it called runbox.Init (its agent speaks its own
// protocol version), then runbox on PATH.
func (e *Executor) agentCandidates() []string {
	if e.agentPath != "" {
		return []string{e.agentPath}
	}
	if p := os.Getenv(EnvAgent); p != "" {
		return []string{p}
	}
	var out []string
	if p := selfAgent(); p != "" {
		out = append(out, p)
	}
	if p, err := exec.LookPath("runbox"); err == nil {
		out = append(out, p)
	}
	return out
}

var elfMachines = map[string]elf.Machine{
	"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "386": elf.EM_386, "arm": elf.EM_ARM,
	"riscv64": elf.EM_RISCV, "ppc64le": elf.EM_PPC64, "s390x": elf.EM_S390,
}

// checkAgentBinary accepts a static Linux ELF executable for arch.
func checkAgentBinary(path, arch string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if want, ok := elfMachines[arch]; !ok || f.Machine != want {
		return fmt.Errorf("%s is built for %s, the session is %s", path, f.Machine, arch)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked (build it with CGO_ENABLED=0)", path)
		}
	}
	return nil
}

// agentPlan is how one session gets its agent.
type agentPlan struct {
	binary   string        // host path of the agent
	lifetime []string      // the lifetime process the agent starts
	local    bool          // bind mounts and a host socket, rather than a copy and an exec
	runDir   string        // host directory whose run/ is bound at agentRunDir (local only)
	key      []byte        // the session key (remote only)
	lease    time.Duration // the lease's time to live; 0: persistent
	engine   string        // the Engine's address, recorded in runDir for Reap
}

// planAgent decides whether spec's session gets an agent. It returns nil
// (no error) for a plain-exec session, with the reason when the Executor
// wanted an agent and found none that would do. The agent dials the
// caller's socket only where the session runs on the host's kernel: a
// user-space kernel (gVisor) or a virtual machine has its own sockets, so
// the agent listens inside and is reached over an exec, as with a remote
// Engine.
func (e *Executor) planAgent(ctx context.Context, spec runbox.Spec, rt runtimeInfo) (*agentPlan, string, error) {
	if e.agentMode == agentOff {
		return nil, "", nil
	}
	candidates := e.agentCandidates()
	if len(candidates) == 0 {
		why := fmt.Sprintf("no agent binary (WithAgent, $%s, or runbox on PATH)", EnvAgent)
		if e.agentMode == agentRequired {
			return nil, "", fmt.Errorf("%w: %s", ErrAgentUnavailable, why)
		}
		return nil, why, nil // plain exec, without an extra round trip
	}
	img, err := e.cli.ImageInspect(ctx, spec.Image)
	if err != nil {
		return nil, "", e.classifyImageErr(spec.Image, err)
	}
	var reasons []string
	var binary string
	for _, p := range candidates {
		if err := checkAgentBinary(p, img.Architecture); err != nil {
			reasons = append(reasons, err.Error())
			continue
		}
		binary = p
		break
	}
	if binary == "" {
		if e.agentMode == agentRequired {
			return nil, "", fmt.Errorf("%w: %s", ErrAgentUnavailable, strings.Join(reasons, "; "))
		}
		return nil, strings.Join(reasons, "; "), nil
	}
	local := e.localEngine && rt.kernel == runbox.KernelHost
	plan := &agentPlan{binary: binary, lifetime: spec.Process, local: local, lease: e.lease, engine: e.cli.DaemonHost()}
	if plan.lifetime == nil && img.Config != nil {
		plan.lifetime = append(append([]string{}, img.Config.Entrypoint...), img.Config.Cmd...)
	}
	if len(plan.lifetime) == 0 {
		return nil, "", fmt.Errorf("%w: no lifetime process: the spec has none and the image %s has no command", runbox.ErrInvalidSpec, spec.Image)
	}
	return plan, "", nil
}

// apply wraps the lifetime process in the agent and adds the reserved
// path's mounts. The agent is the session's init, so the Engine's own init
// is not added.
func (p *agentPlan) apply(cfg *container.Config, hc *container.HostConfig) error {
	hc.Init = nil
	cfg.Labels[LabelLease] = leaseLabel(p.lease)
	lifetime, err := json.Marshal(p.lifetime)
	if err != nil {
		return err
	}
	cfg.Labels[LabelLifetime] = string(lifetime)
	cfg.Labels[LabelAgent] = AgentAuthKey.String()
	if p.local {
		cfg.Labels[LabelAgent] = AgentAuthKernel.String()
	}
	// A leased session's container goes with its agent, which exits when
	// the lease expires.
	hc.AutoRemove = p.lease > 0
	if !p.local {
		// The agent listens inside the session and serves only callers that
		// prove the key, which it takes from an anonymous volume filled by
		// CopyToContainer before start (removed with the container, never
		// committed).
		p.key = agent.NewKey()
		cfg.Entrypoint = append(append([]string{agentInPath, "agent", "init", "--socket", agentSockPath, "--key-file", agentKeyPath}, p.leaseArgs()...), append([]string{"--"}, p.lifetime...)...)
		cfg.Cmd = nil
		cfg.Labels[LabelAgentKey] = hex.EncodeToString(p.key)
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeVolume, Target: reservedDir})
		return nil
	}
	cfg.Entrypoint = append(append([]string{agentInPath, "agent", "init", "--dial", agentRunDir}, p.leaseArgs()...), append([]string{"--"}, p.lifetime...)...)
	cfg.Cmd = nil
	dir, err := os.MkdirTemp("", runDirPrefix)
	if err != nil {
		return err
	}
	// Callers put their listening sockets in run/. The session sees it
	// read-only, so nothing there can create, rename or replace a socket;
	// it must still read the directory and connect, whatever its user.
	run := filepath.Join(dir, "run")
	if err := os.Mkdir(run, 0o755); err == nil {
		err = os.Chmod(run, 0o755)
	}
	if err != nil {
		os.RemoveAll(dir)
		return err
	}
	// Reap removes the directory once no container of this Engine mounts
	// it; another Engine's sessions are not its to judge.
	if err := os.WriteFile(filepath.Join(dir, "engine"), []byte(p.engine), 0o600); err != nil {
		os.RemoveAll(dir)
		return err
	}
	p.runDir = dir
	hc.Mounts = append(hc.Mounts,
		mount.Mount{Type: mount.TypeBind, Source: p.binary, Target: agentInPath, ReadOnly: true},
		mount.Mount{Type: mount.TypeBind, Source: run, Target: agentRunDir, ReadOnly: true},
	)
	return nil
}

// runDirPrefix names the host directories of local agent sessions, in
// os.TempDir(); runDirPattern matches them.
const (
	runDirPrefix  = "runbox-agent-"
	runDirPattern = runDirPrefix + "*"
)

// leaseArgs are the agent's flags for the lease.
func (p *agentPlan) leaseArgs() []string {
	if p.lease <= 0 {
		return nil
	}
	return []string{"--lease", p.lease.String()}
}

// deliver copies the agent and the session key into a remote Engine's
// volume before start.
func (e *Executor) deliver(ctx context.Context, id string, p *agentPlan) error {
	if p.local {
		return nil
	}
	bin, err := os.ReadFile(p.binary)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	files := []struct {
		hdr  tar.Header
		body []byte
	}{
		{tar.Header{Typeflag: tar.TypeDir, Name: "bin/", Mode: 0o755}, nil},
		{tar.Header{Typeflag: tar.TypeDir, Name: "run/", Mode: 0o777}, nil},
		{tar.Header{Typeflag: tar.TypeReg, Name: "bin/runbox", Mode: 0o755, Size: int64(len(bin))}, bin},
		// Readable by the agent whatever the session's user; the agent
		// removes it before any other process of the session starts.
		{tar.Header{Typeflag: tar.TypeReg, Name: "run/key", Mode: 0o444, Size: int64(len(p.key))}, p.key},
	}
	for _, f := range files {
		if err := tw.WriteHeader(&f.hdr); err != nil {
			return err
		}
		if _, err := tw.Write(f.body); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	_, err = e.cli.CopyToContainer(ctx, id, client.CopyToContainerOptions{DestinationPath: reservedDir, Content: &buf})
	if err != nil {
		return fmt.Errorf("runbox/docker: delivering the agent: %w", e.engineErr(err))
	}
	return nil
}

// connectAgent reaches the started agent. With a local Engine the caller
// listens on a socket in the agent's read-only directory and the agent
// dials it; the kernel then vouches for both ends (see acceptAgent). With
// a remote Engine it execs `runbox agent connect` and both ends prove the
// session key. It retries while the agent is starting.
func (e *Executor) connectAgent(ctx context.Context, s *Session, p *agentPlan) (*agent.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, e.agentTimeout)
	defer cancel()
	if p.local {
		rw, err := e.acceptAgent(ctx, s, p)
		if err != nil {
			return nil, err
		}
		c, err := agent.NewClient(rw, agent.ClientOptions{Timeout: e.agentTimeout})
		if err != nil {
			return nil, s.handshakeErr(ctx, err)
		}
		return c, nil
	}
	// A remote attempt is an exec through the Engine, so back off.
	delay, maxDelay := 10*time.Millisecond, 200*time.Millisecond
	var last error
	lastCheck := time.Now()
	for {
		rw, err := e.execBridge(ctx, s.id)
		if err == nil {
			var c *agent.Client
			c, err = agent.NewClient(rw, agent.ClientOptions{Timeout: e.agentTimeout, Key: p.key})
			if err == nil {
				return c, nil
			}
			if errors.Is(err, agent.ErrSessionOver) {
				return nil, s.handshakeErr(ctx, err)
			}
			if errors.Is(err, agent.ErrAuth) {
				// Something in the session answers in the agent's place.
				// Retrying would only hand it more chances.
				return nil, fmt.Errorf("%w: %w", ErrAgentUnavailable, err)
			}
		}
		last = err
		// Asking the Engine whether the lifetime process already ended is a
		// round trip; do it now and then, not on every attempt.
		if time.Since(lastCheck) > 50*time.Millisecond || ctx.Err() != nil {
			lastCheck = time.Now()
			if rerr := s.checkRunning(context.WithoutCancel(ctx)); rerr != nil {
				return nil, rerr
			}
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: the agent did not answer: %w", ErrAgentUnavailable, last)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		delay = min(delay*2, maxDelay)
	}
}

// handshakeErr classifies a failed handshake: the agent's word that the
// session is over, or a session that stopped meanwhile, is ErrSessionEnded
// (with the lifetime process's status); anything else is ErrAgentUnavailable.
func (s *Session) handshakeErr(ctx context.Context, err error) error {
	if errors.Is(err, agent.ErrSessionOver) {
		return fmt.Errorf("%w: %w", runbox.ErrSessionEnded, err)
	}
	// Not endedAfterLoss: the caller (agentConn) holds agentMu.
	if rerr := s.waitEnded(ctx); errors.Is(rerr, runbox.ErrSessionEnded) {
		return fmt.Errorf("%w (%w)", rerr, err)
	}
	return fmt.Errorf("%w: %w", ErrAgentUnavailable, err)
}

// acceptAgent offers the agent a fresh socket and returns the connection
// of the session's init process. The kernel reports the pid of whoever
// connects; the Engine reports the pid of the session's init. Anything
// else in the session may connect too, and is dropped.
func (e *Executor) acceptAgent(ctx context.Context, s *Session, p *agentPlan) (net.Conn, error) {
	ln, cleanup, err := offerSocket(filepath.Join(p.runDir, "run"))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrAgentUnavailable, err)
	}
	defer cleanup()
	initPid := 0
	var refused []int
	for {
		// Short slices, so that a session whose lifetime process ended is
		// noticed and ctx is honoured.
		_ = ln.SetDeadline(time.Now().Add(50 * time.Millisecond))
		c, err := ln.AcceptUnix()
		if err == nil {
			pid, cerr := peerPid(c)
			if cerr == nil && initPid == 0 {
				initPid, cerr = s.initPid(context.WithoutCancel(ctx))
			}
			if cerr != nil {
				c.Close()
				return nil, cerr
			}
			if pid == initPid {
				return c, nil
			}
			refused = append(refused, pid)
			c.Close()
			continue
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, fmt.Errorf("%w: %w", ErrAgentUnavailable, err)
		}
		if rerr := s.checkRunning(context.WithoutCancel(ctx)); rerr != nil {
			return nil, rerr
		}
		if ctx.Err() != nil {
			msg := "the agent did not connect"
			if len(refused) > 0 {
				msg += fmt.Sprintf(" (refused pids %v: not the session's init %d; is this process in the Engine's pid namespace?)", refused, initPid)
			}
			return nil, fmt.Errorf("%w: %s", ErrAgentUnavailable, msg)
		}
	}
}

// offerSocket listens on a new socket in dir. The socket gets its final
// name (*.sock, which the agent watches for) only once it listens, so the
// agent never dials a socket that is not ready.
func offerSocket(dir string) (*net.UnixListener, func(), error) {
	name := hex.EncodeToString(agent.NewKey()[:12])
	tmp := filepath.Join(dir, "."+name)
	final := filepath.Join(dir, name+".sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, nil, err
	}
	ln.SetUnlinkOnClose(false)
	cleanup := func() {
		ln.Close()
		os.Remove(tmp)
		os.Remove(final)
	}
	// Connecting needs write permission on the socket, and the agent runs
	// as the session's user, whoever that is.
	if err := os.Chmod(tmp, 0o777); err != nil {
		cleanup()
		return nil, nil, err
	}
	if err := os.Rename(tmp, final); err != nil {
		cleanup()
		return nil, nil, err
	}
	return ln, cleanup, nil
}

// initPid asks the Engine for the host pid of the session's init process:
// the agent.
func (s *Session) initPid(ctx context.Context) (int, error) {
	res, err := s.e.cli.ContainerInspect(ctx, s.id, client.ContainerInspectOptions{})
	if err != nil {
		return 0, s.e.engineErr(err)
	}
	st := res.Container.State
	if st == nil || !st.Running || st.Pid == 0 {
		return 0, s.checkRunning(ctx)
	}
	return st.Pid, nil
}

// execBridge opens a connection to the agent through the Engine: an exec
// of the agent's connect mode, whose stdio carries the protocol.
func (e *Executor) execBridge(ctx context.Context, id string) (io.ReadWriteCloser, error) {
	ex, err := e.cli.ExecCreate(ctx, id, client.ExecCreateOptions{
		Cmd:          []string{agentInPath, "agent", "connect", "--socket", agentSockPath},
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
	})
	if err != nil {
		return nil, err
	}
	att, err := e.cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	go func() {
		// Frames arrive on the exec's stdout; its stderr explains failures.
		var stderr bytes.Buffer
		_, err := stdcopy.StdCopy(pw, &stderr, att.Reader)
		if err == nil {
			err = fmt.Errorf("agent bridge ended: %s", strings.TrimSpace(stderr.String()))
		}
		pw.CloseWithError(err)
	}()
	return &bridge{r: pr, att: att.HijackedResponse}, nil
}

// bridge is the exec's stream seen as one connection.
type bridge struct {
	r   *io.PipeReader
	att client.HijackedResponse
}

func (b *bridge) Read(p []byte) (int, error)  { return b.r.Read(p) }
func (b *bridge) Write(p []byte) (int, error) { return b.att.Conn.Write(p) }
func (b *bridge) Close() error {
	b.att.Close()
	return b.r.Close()
}

// runAgent runs cmd through the session's agent. The caller holds s.mu.
func (s *Session) runAgent(ctx context.Context, cmd runbox.Command, streams runbox.Streams) (runbox.Result, error) {
	req := agent.StartRequest{Args: cmd.Args, Env: cmd.Env, CleanEnv: cmd.CleanEnv, Dir: cmd.Dir, User: cmd.User, TTY: cmd.TTY,
		Rows: cmd.TermSize.Rows, Cols: cmd.TermSize.Cols}
	opts := agent.RunOptions{Stdin: cmd.Stdin, Stdout: streams.Stdout, Stderr: streams.Stderr}
	if cmd.Resize != nil {
		sizes := make(chan agent.Resize)
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			for {
				select {
				case sz, ok := <-cmd.Resize:
					if !ok {
						return
					}
					select {
					case sizes <- agent.Resize{Rows: sz.Rows, Cols: sz.Cols}:
					case <-stop:
						return
					}
				case <-stop:
					return
				}
			}
		}()
		opts.Resize = sizes
	}
	conn, err := s.agentConn(ctx)
	if err != nil {
		return runbox.Result{}, err
	}
	if err := cmd.Starting(); err != nil {
		return runbox.Result{}, err
	}
	ex, err := conn.Run(ctx, req, opts)
	if err == nil {
		return runbox.Result{ExitCode: ex.Code, Signal: ex.Signal}, nil
	}
	var se *agent.StartError
	switch {
	case errors.Is(err, agent.ErrTooLarge):
		return runbox.Result{}, fmt.Errorf("%w: %w", runbox.ErrInvalidCommand, err)
	case errors.As(err, &se):
		return runbox.Result{}, startErr(se.Message, se.Reason)
	case ctx.Err() != nil:
		return runbox.Result{}, cancelled(ctx, "the command's process group was killed")
	case errors.Is(err, agent.ErrConnectionLost):
		return runbox.Result{}, s.lostOrTransport(ctx, err)
	}
	return runbox.Result{}, err
}

// agentConn returns the connection to the session's agent. When the last
// one was lost (a proxy dropped it, the Engine restarted) while the
// session still runs, it connects again; the agent has already killed the
// commands of the lost connection.
func (s *Session) agentConn(ctx context.Context) (*agent.Client, error) {
	s.agentMu.Lock()
	defer s.agentMu.Unlock()
	if c := s.agent; c != nil {
		select {
		case <-c.Done():
		default:
			return c, nil
		}
		if err := c.Err(); errors.Is(err, agent.ErrSessionOver) {
			// The agent's last word: no connection will do better.
			return nil, fmt.Errorf("%w: %w", runbox.ErrSessionEnded, err)
		}
	}
	if err := s.checkRunning(ctx); err != nil {
		return nil, err
	}
	c, err := s.e.connectAgent(ctx, s, s.plan)
	if err != nil {
		if errors.Is(err, runbox.ErrSessionEnded) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: connecting to the agent: %w", runbox.ErrTransport, err)
	}
	s.agent = c
	return c, nil
}

// AgentAuth says how a session's caller and its agent know each other, and
// so what the code under test, running as root beside the agent, can do
// to the commands the caller runs. docs/docker.md has the threat model.
type AgentAuth int

const (
	// AgentAuthNone: no agent; commands go through plain Engine exec.
	AgentAuthNone AgentAuth = iota
	// AgentAuthKernel: a local Engine. The kernel names both ends of the
	// connection and nothing in the session can reach or replace the
	// socket or read the agent, so no process in the session can issue a
	// command, forge a result or see a command's environment.
	AgentAuthKernel
	// AgentAuthKey: a remote Engine, or a session whose kernel is not the
	// host's (gVisor), where a host socket cannot be reached from inside.
	// Both ends prove the session key
	// before any command is sent, so a process in the session cannot issue
	// commands or pass for the agent on a new connection. The connection
	// itself runs through `runbox agent connect` inside the session, whose
	// binary root there can replace: root in the session can read and
	// alter the traffic of connections made after it did so.
	AgentAuthKey
)

// String returns "none", "kernel" or "key".
func (a AgentAuth) String() string {
	switch a {
	case AgentAuthKernel:
		return "kernel"
	case AgentAuthKey:
		return "key"
	}
	return "none"
}

// AgentAuth reports how this session's caller and agent authenticate each
// other.
func (s *Session) AgentAuth() AgentAuth {
	switch {
	case s.plan == nil:
		return AgentAuthNone
	case s.plan.local:
		return AgentAuthKernel
	}
	return AgentAuthKey
}
