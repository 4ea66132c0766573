package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
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
	"github.com/runbox-dev/runbox/agent"
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
	agentSockPath = agentRunDir + "/agent.sock"
)

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
// then runbox on PATH.
func (e *Executor) agentCandidates() []string {
	if e.agentPath != "" {
		return []string{e.agentPath}
	}
	if p := os.Getenv(EnvAgent); p != "" {
		return []string{p}
	}
	if p, err := exec.LookPath("runbox"); err == nil {
		return []string{p}
	}
	return nil
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
	binary   string   // host path of the agent
	lifetime []string // the lifetime process the agent starts
	local    bool     // bind mounts and a host socket, rather than a copy and an exec
	runDir   string   // host directory bound at agentRunDir (local only)
}

// planAgent decides whether spec's session gets an agent. It returns nil
// (no error) for a plain-exec session.
func (e *Executor) planAgent(ctx context.Context, spec runbox.Spec) (*agentPlan, error) {
	if e.agentMode == agentOff {
		return nil, nil
	}
	candidates := e.agentCandidates()
	if len(candidates) == 0 {
		if e.agentMode == agentRequired {
			return nil, fmt.Errorf("%w: no agent binary (WithAgent, $%s, or runbox on PATH)", ErrAgentUnavailable, EnvAgent)
		}
		return nil, nil // plain exec, without an extra round trip
	}
	img, err := e.cli.ImageInspect(ctx, spec.Image)
	if err != nil {
		return nil, classifyImageErr(spec.Image, err)
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
			return nil, fmt.Errorf("%w: %s", ErrAgentUnavailable, strings.Join(reasons, "; "))
		}
		return nil, nil
	}
	plan := &agentPlan{binary: binary, lifetime: spec.Process, local: e.localEngine}
	if plan.lifetime == nil && img.Config != nil {
		plan.lifetime = append(append([]string{}, img.Config.Entrypoint...), img.Config.Cmd...)
	}
	if len(plan.lifetime) == 0 {
		return nil, fmt.Errorf("%w: no lifetime process: the spec has none and the image %s has no command", runbox.ErrInvalidSpec, spec.Image)
	}
	return plan, nil
}

// apply wraps the lifetime process in the agent and adds the reserved
// path's mounts.
func (p *agentPlan) apply(cfg *container.Config, hc *container.HostConfig) error {
	cfg.Entrypoint = append([]string{agentInPath, "agent", "init", "--socket", agentSockPath, "--"}, p.lifetime...)
	cfg.Cmd = nil
	if !p.local {
		// An anonymous volume: filled by CopyToContainer before start,
		// removed with the container, never committed.
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeVolume, Target: reservedDir})
		return nil
	}
	dir, err := os.MkdirTemp("", "runbox-agent-")
	if err != nil {
		return err
	}
	// The parent stays owner-only on the host; the bound directory is open
	// so that an agent running as any user in the session can listen.
	run := filepath.Join(dir, "run")
	if err := os.Mkdir(run, 0o777); err == nil {
		err = os.Chmod(run, 0o777)
	}
	if err != nil {
		os.RemoveAll(dir)
		return err
	}
	p.runDir = dir
	hc.Mounts = append(hc.Mounts,
		mount.Mount{Type: mount.TypeBind, Source: p.binary, Target: agentInPath, ReadOnly: true},
		mount.Mount{Type: mount.TypeBind, Source: run, Target: agentRunDir},
	)
	return nil
}

// deliver copies the agent into a remote Engine's volume before start.
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
	hdrs := []*tar.Header{
		{Typeflag: tar.TypeDir, Name: "bin/", Mode: 0o755},
		{Typeflag: tar.TypeDir, Name: "run/", Mode: 0o777},
		{Typeflag: tar.TypeReg, Name: "bin/runbox", Mode: 0o755, Size: int64(len(bin))},
	}
	for _, h := range hdrs {
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
	}
	if _, err := tw.Write(bin); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	_, err = e.cli.CopyToContainer(ctx, id, client.CopyToContainerOptions{DestinationPath: reservedDir, Content: &buf})
	if err != nil {
		return fmt.Errorf("runbox/docker: delivering the agent: %w", engineErr(err))
	}
	return nil
}

// connectAgent reaches the started agent: through its socket in the host
// directory for a local Engine, or through an exec of `runbox agent
// connect` otherwise. It retries while the agent is starting.
func (e *Executor) connectAgent(ctx context.Context, s *Session, p *agentPlan) (*agent.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, e.agentTimeout)
	defer cancel()
	// A local attempt is one failed dial and costs nothing, so poll often:
	// the agent listens a few milliseconds after the container starts.
	// A remote attempt is an exec through the Engine, so back off.
	delay, maxDelay := 2*time.Millisecond, 2*time.Millisecond
	if !p.local {
		delay, maxDelay = 10*time.Millisecond, 200*time.Millisecond
	}
	var last error
	lastCheck := time.Now()
	for {
		var rw io.ReadWriteCloser
		var err error
		if p.local {
			rw, err = net.Dial("unix", filepath.Join(p.runDir, "run", "agent.sock"))
		} else {
			rw, err = e.execBridge(ctx, s.id)
		}
		if err == nil {
			var c *agent.Client
			c, err = agent.NewClient(rw, e.agentTimeout)
			if err == nil {
				return c, nil
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
	req := agent.StartRequest{Args: cmd.Args, Env: cmd.Env, CleanEnv: cmd.CleanEnv, Dir: cmd.Dir, TTY: cmd.TTY,
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
	ex, err := s.agent.Run(ctx, req, opts)
	if err == nil {
		return runbox.Result{ExitCode: ex.Code, Signal: ex.Signal}, nil
	}
	var se *agent.StartError
	switch {
	case errors.As(err, &se):
		return runbox.Result{}, fmt.Errorf("%w: %s", runbox.ErrStart, se.Message)
	case ctx.Err() != nil:
		return runbox.Result{}, cancelled(ctx, "the command's process group was killed")
	case errors.Is(err, agent.ErrConnectionLost):
		if rerr := s.endedAfterLoss(ctx); rerr != nil && errors.Is(rerr, runbox.ErrSessionEnded) {
			return runbox.Result{}, fmt.Errorf("%w (%w)", rerr, err)
		}
		return runbox.Result{}, fmt.Errorf("%w: %w", runbox.ErrTransport, err)
	}
	return runbox.Result{}, err
}
