package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/docker/go-units"
	"github.com/spf13/cobra"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/host"
)

func newHost() *cobra.Command {
	var xf execFlags
	var limit int64
	var inherit bool
	var hf hostFlags
	cmd := &cobra.Command{
		Use:   "host [flags] -- ARGV...",
		Short: "Run a command on this machine, confined by default",
		Long: `host runs ARGV literally on this machine, confined: it may write only the
working directory (-w, default the current directory) and the --write
paths, it has no network unless --network, and it cannot see or signal
your other processes. Everything else is read-only. It gets a private,
empty HOME and TMPDIR (removed afterwards) and a private /tmp. Everything
it started is torn down when it ends.

On Linux the sandbox is user, mount, PID, IPC and network namespaces,
Landlock, seccomp and no capabilities; on macOS a Seatbelt profile
(sandbox-exec). Where this machine cannot enforce the sandbox, host refuses
to run rather than run unconfined: --unconfined is the explicit choice to
run with your user's full authority (the behaviour of earlier versions).

The command does not inherit your whole environment: it gets PATH, HOME,
TMPDIR, LANG, USER (and TERM with -t) plus -e entries; --inherit-env passes
everything, --clean-env only the -e entries. Stdin is passed through.
--output-limit stops the command once stdout and stderr together exceed
the limit (exit status 125).

--cache go gives a build what it needs and no more: the Go module cache
and toolchain read-only, a build cache of the working directory's own
(under your cache directory, kept between runs, never your own build
cache, which a confined build could otherwise plant results in), and
GOPROXY=off, so modules come from the module cache and never the network.

--memory, --pids and --cpus limit the command's whole tree through the
kernel's cgroups. A host that cannot enforce a limit given here refuses to
run (the cgroup controllers must be delegated to runbox's cgroup, or
available in cgroup v1 hierarchies); nothing runs without a limit it was
given. A tree over its memory limit is killed (exit status 137), and a
fork over the process limit fails.

--json reports what was enforced: after the command ends, runbox writes one
line to stderr, always the last line and always starting a line, holding a
JSON object:

  {"guarantees":{"level":"full","processBoundary":true,"writeBoundary":true,
   "readBoundary":false,"envScrub":true,"networkBoundary":true,
   "resourceLimits":false,"lifetime":"enforced","mechanisms":[...]},
   "access":{"kind":"scoped-write","writePaths":["/src"]},
   "exitCode":0,"signal":""}

level is none, degraded or full; lifetime is unspecified, best-effort or
enforced; kind is read-only, scoped-write or broad-write (none when runbox
failed before it could make the sandbox). exitCode is -1
when the command did not complete (then "error" holds the reason). Keys
are only ever added. stdout stays the command's own.`,
		Example: `  runbox host -- git status
  runbox host --timeout 10m -w ./src -- make test
  runbox host --cache go --timeout 5m -- go test ./...
  runbox host --write ~/.cache/go-build --network -- go test ./...
  runbox host --json -- make
  runbox host --unconfined -- ./deploy.sh
  runbox host --output-limit 1048576 -- ./noisy-tool
  runbox host --memory 512m --pids 256 --cpus 1 -- make test
  runbox host -t -- top`,
		Args: cobra.MinimumNArgs(1),
	}
	run := func(cmd *cobra.Command, args []string, rep *hostReport) error {
		// Descriptors this process inherited (from the shell, say) are
		// not the command's, confined or not: stdin, stdout and stderr
		// are all it gets.
		if err := host.CloseInheritedOnExec(); err != nil {
			return fmt.Errorf("%w: inherited descriptors: %w", runbox.ErrStart, err)
		}
		c, err := xf.command(afterDash(args))
		if err != nil {
			return err
		}
		c.Stdin = os.Stdin
		timeout, err := xf.parseTimeout()
		if err != nil {
			return err
		}
		if limit < 0 {
			return fmt.Errorf("%w: --output-limit must be positive", runbox.ErrInvalidCommand)
		}
		var opts []host.Option
		if inherit {
			opts = append(opts, host.WithInheritEnv())
		}
		caches, err := hf.toolchainCaches(c.Dir)
		if err != nil {
			return err
		}
		for _, tc := range caches {
			// The command's own -e entries come last, and win.
			c.Env = append(slices.Clone(tc.Env), c.Env...)
		}
		if !hf.unconfined {
			p, err := hf.policy(c.Dir)
			if err != nil {
				return err
			}
			for _, tc := range caches {
				p.WritableRoots = append(p.WritableRoots, tc.Writable...)
			}
			// One command: the sandbox New builds to probe the host runs
			// it, and none is prepared after it.
			opts = append(opts, host.WithPolicy(p), host.WithPreparedSandboxes(0))
			if h := sandboxHelper(); h != "" {
				opts = append(opts, host.WithHelper(h))
			}
		} else if len(hf.write) > 0 || hf.network || hf.limited() {
			return fmt.Errorf("%w: --write, --network, --memory, --pids and --cpus shape the sandbox; --unconfined has none", runbox.ErrInvalidCommand)
		}
		e, err := host.New(opts...)
		if err != nil {
			if errors.Is(err, host.ErrLimitsUnavailable) {
				return fmt.Errorf("%w: the cgroup controllers are not delegated to this process; leave out --memory, --pids and --cpus to run without limits", err)
			}
			if errors.Is(err, host.ErrConfinementUnavailable) {
				return fmt.Errorf("%w (pass --unconfined to run with your user's full authority)", err)
			}
			return err
		}
		defer e.Close()
		if rep != nil {
			rep.e = e
		}
		ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		runCtx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		if timeout > 0 {
			var cancelT context.CancelFunc
			runCtx, cancelT = context.WithTimeout(runCtx, timeout)
			defer cancelT()
		}
		if c.TTY {
			res, err := runHostTTY(runCtx, e, c)
			rep.record(res, err)
			return outcome(ctx, timeout, res, err)
		}
		var stderr io.Writer = os.Stderr
		if rep != nil {
			stderr = rep.stderr
		}
		streams := runbox.Streams{Stdout: os.Stdout, Stderr: stderr}
		// The backend's own limit: output past it is a failure however the
		// command ended, even when it exited before it could be stopped.
		c.OutputLimit = runbox.OutputLimit{Combined: limit}
		res, err := e.Run(runCtx, c, streams)
		if errors.Is(err, runbox.ErrOutputLimit) {
			err = fmt.Errorf("%w: more than %d bytes of output; the command was stopped", runbox.ErrOutputLimit, limit)
			rep.record(res, err)
			return err
		}
		rep.record(res, err)
		return outcome(ctx, timeout, res, err)
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if !hf.json {
			return run(cmd, args, nil)
		}
		rep := &hostReport{stderr: &lastByteWriter{w: os.Stderr}}
		return rep.finish(run(cmd, args, rep))
	}
	cmd.Flags().SetInterspersed(false)
	xf.register(cmd.Flags(), true)
	_ = cmd.Flags().MarkHidden("interactive") // stdin is always passed through
	cmd.Flags().Int64Var(&limit, "output-limit", 0, "stop the command after this many bytes of stdout+stderr")
	cmd.Flags().BoolVar(&inherit, "inherit-env", false, "pass this process's whole environment")
	cmd.Flags().StringArrayVar(&hf.write, "write", nil, "let the command write PATH (a directory tree or a file; repeatable)")
	cmd.Flags().BoolVar(&hf.network, "network", false, "give the command network access")
	cmd.Flags().BoolVar(&hf.unconfined, "unconfined", false, "run without a sandbox, with your user's full authority")
	cmd.Flags().BoolVar(&hf.json, "json", false, "write a JSON report of the enforced guarantees as the last line of stderr")
	cmd.Flags().StringArrayVar(&hf.caches, "cache", nil, "give the command a toolchain's caches: read-only shared ones, a writable one of its own, no network for them (presets: "+strings.Join(host.CachePresets, ", ")+"; repeatable)")
	cmd.Flags().StringVar(&hf.memory, "memory", "", "memory limit of the command's tree, in bytes or with a unit: 512m, 2g")
	cmd.Flags().Int64Var(&hf.pids, "pids", 0, "maximum number of processes (and threads) in the command's tree")
	cmd.Flags().Float64Var(&hf.cpus, "cpus", 0, "CPUs the command's tree may use, e.g. 1.5")
	return cmd
}

// hostFlags shape the sandbox of `runbox host`.
type hostFlags struct {
	write      []string
	network    bool
	unconfined bool
	json       bool
	memory     string
	pids       int64
	cpus       float64
	caches     []string
}

// toolchainCaches resolves the --cache presets for a command run in dir
// ("" for the current directory).
func (f *hostFlags) toolchainCaches(dir string) ([]host.Cache, error) {
	if dir == "" {
		dir = "."
	}
	var out []host.Cache
	for _, name := range f.caches {
		c, err := host.ToolchainCache(name, dir)
		if err != nil {
			return nil, fmt.Errorf("%w: --cache: %w", runbox.ErrInvalidCommand, err)
		}
		out = append(out, c)
	}
	return out, nil
}

// limited reports whether a resource limit was asked for.
func (f *hostFlags) limited() bool { return f.memory != "" || f.pids != 0 || f.cpus != 0 }

// policy is the sandbox for a command run in dir ("" for the current
// directory): dir and the --write paths are writable. Limits given on the
// command line are required: a host that cannot enforce them refuses to
// run rather than run without.
func (f *hostFlags) policy(dir string) (host.Policy, error) {
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return host.Policy{}, err
		}
		dir = wd
	}
	p := host.Policy{WritableRoots: append([]string{dir}, f.write...), Network: f.network}
	if f.memory != "" {
		n, err := units.RAMInBytes(f.memory)
		if err != nil || n <= 0 {
			return p, fmt.Errorf("%w: --memory %q is not a size like 512m", runbox.ErrInvalidCommand, f.memory)
		}
		p.Resources.MemoryBytes = n
	}
	if f.pids < 0 || f.cpus < 0 {
		return p, fmt.Errorf("%w: --pids and --cpus must be positive", runbox.ErrInvalidCommand)
	}
	p.Resources.Pids, p.Resources.CPUs = f.pids, f.cpus
	p.Require.ResourceLimits = f.limited()
	return p, nil
}

// hostReport is the --json line.
type hostReport struct {
	e      *host.Executor
	stderr *lastByteWriter
	res    runbox.Result
	err    error
}

func (r *hostReport) record(res runbox.Result, err error) {
	if r != nil {
		r.res, r.err = res, err
	}
}

// finish ends a --json run whatever its outcome: it writes what would
// otherwise follow (runbox's own message about err), then the report, so
// that the report is always the last line, and returns the exit status
// alone.
func (r *hostReport) finish(err error) error {
	code := 0
	var ec *exitCode
	switch {
	case err == nil:
	case errors.As(err, &ec):
		if ec.msg != "" {
			fmt.Fprintln(r.stderr, "runbox:", ec.msg)
		}
		code = ec.code
	default:
		if r.err == nil {
			r.res, r.err = runbox.Result{ExitCode: -1}, err
		}
		printFailure(r.stderr, err)
		code = failureCode(err)
	}
	r.print()
	if code == 0 {
		return nil
	}
	return &exitCode{code: code}
}

// print writes the report as the last line of stderr, starting a new line
// if the command's output did not end with one. Without an executor (it
// could not be made) nothing is enforced.
func (r *hostReport) print() {
	type access struct {
		Kind       string   `json:"kind"`
		WritePaths []string `json:"writePaths"`
	}
	out := struct {
		Guarantees runbox.Guarantees `json:"guarantees"`
		Access     access            `json:"access"`
		ExitCode   int               `json:"exitCode"`
		Signal     string            `json:"signal"`
		Error      string            `json:"error,omitempty"`
	}{ExitCode: r.res.ExitCode, Signal: r.res.Signal, Access: access{Kind: "none"}}
	if r.e != nil {
		out.Guarantees = r.e.Guarantees()
		a := r.e.EffectiveAccess()
		out.Access = access{Kind: a.Kind().String(), WritePaths: a.WritePaths()}
	}
	if out.Access.WritePaths == nil {
		out.Access.WritePaths = []string{}
	}
	if r.err != nil {
		out.ExitCode, out.Error = -1, r.err.Error()
	}
	b, err := json.Marshal(out)
	if err != nil {
		return
	}
	if r.stderr.last != 0 && r.stderr.last != '\n' {
		os.Stderr.Write([]byte{'\n'})
	}
	os.Stderr.Write(append(b, '\n'))
}

// lastByteWriter remembers the last byte written through it.
type lastByteWriter struct {
	mu   sync.Mutex
	w    io.Writer
	last byte
}

func (l *lastByteWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(p) > 0 {
		l.last = p[len(p)-1]
	}
	return l.w.Write(p)
}

// runHostTTY runs c under a pseudo-terminal wired to this terminal.
func runHostTTY(ctx context.Context, e *host.Executor, c runbox.Command) (runbox.Result, error) {
	size := currentSize()
	pp, err := e.PrepareProcess(ctx, host.ProcessOptions{
		Directory: c.Dir, Args: c.Args, Env: c.Env, CleanEnv: c.CleanEnv, TTY: true,
		TermSize: size,
	})
	if err != nil {
		return runbox.Result{ExitCode: -1}, err
	}
	defer pp.Close()
	restore, resize := setupTerminal(ctx, true)
	defer restore()
	p, err := pp.Start(ctx)
	if err != nil {
		return runbox.Result{ExitCode: -1}, err
	}
	defer p.Close(context.Background())
	go func() { _, _ = io.Copy(p.Stdin(), os.Stdin) }()
	go func() {
		for sz := range resize {
			_ = p.Resize(sz)
		}
	}()
	copied := make(chan struct{})
	go func() { _, _ = io.Copy(os.Stdout, p.Stdout()); close(copied) }()
	res, err := p.Wait(ctx)
	if err != nil {
		_ = p.Signal(runbox.ProcessSignalKill)
		return res, fmt.Errorf("%w: %w", runbox.ErrCancelled, err)
	}
	<-copied
	return res, nil
}

// sandboxHelper returns the small stage-2 helper installed beside this
// program (make build puts bin/runbox-sandbox next to bin/runbox), which
// starts faster than this program re-executed; "" re-executes this one.
func sandboxHelper() string {
	if runtime.GOOS != "linux" {
		return "" // the helper is the Linux sandbox's
	}
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	h := filepath.Join(filepath.Dir(exe), "runbox-sandbox")
	if fi, err := os.Stat(h); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return h
	}
	return ""
}
