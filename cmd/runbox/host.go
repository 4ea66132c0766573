package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/host"
)

func newHost() *cobra.Command {
	var xf execFlags
	var limit int64
	var inherit bool
	cmd := &cobra.Command{
		Use:   "host [flags] -- ARGV...",
		Short: "Run a command on this machine (not isolated)",
		Long: `host runs ARGV literally on this machine, in its own process group (and its
own cgroup where Linux allows), and tears down everything it started when
it ends. It is NOT a sandbox: the command has your user's full authority.

The command does not inherit your whole environment: it gets PATH, HOME,
TMPDIR, LANG, USER (and TERM with -t) plus -e entries; --inherit-env passes
everything, --clean-env only the -e entries. Stdin is passed through.
--output-limit stops the command once stdout and stderr together exceed
the limit (exit status 125).`,
		Example: `  runbox host -- git status
  runbox host --timeout 10m -w ./src -- make test
  runbox host --output-limit 1048576 -- ./noisy-tool
  runbox host -t -- top`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
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
			e, err := host.New(opts...)
			if err != nil {
				return err
			}
			defer e.Close()
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
				return outcome(ctx, timeout, res, err)
			}
			streams := runbox.Streams{Stdout: os.Stdout, Stderr: os.Stderr}
			if limit > 0 {
				lw := &limitWriter{left: limit, exceeded: func() { cancel(runbox.ErrOutputLimit) }}
				streams = runbox.Streams{Stdout: lw.to(os.Stdout), Stderr: lw.to(os.Stderr)}
			}
			res, err := e.Run(runCtx, c, streams)
			if err != nil && errors.Is(context.Cause(runCtx), runbox.ErrOutputLimit) {
				return fmt.Errorf("%w: more than %d bytes of output; the command was stopped", runbox.ErrOutputLimit, limit)
			}
			return outcome(ctx, timeout, res, err)
		},
	}
	cmd.Flags().SetInterspersed(false)
	xf.register(cmd.Flags(), true)
	_ = cmd.Flags().MarkHidden("interactive") // stdin is always passed through
	cmd.Flags().Int64Var(&limit, "output-limit", 0, "stop the command after this many bytes of stdout+stderr")
	cmd.Flags().BoolVar(&inherit, "inherit-env", false, "pass this process's whole environment")
	return cmd
}

// runHostTTY runs c under a pseudo-terminal wired to this terminal.
func runHostTTY(ctx context.Context, e *host.Executor, c runbox.Command) (runbox.Result, error) {
	size := currentSize()
	pp, err := e.PrepareProcess(ctx, host.ProcessOptions{
		Directory: c.Dir, Argv: c.Args, Env: c.Env, CleanEnv: c.CleanEnv, TTY: true,
		TTYSize: size,
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

// limitWriter passes on at most left bytes in total across the writers it
// hands out, then calls exceeded once.
type limitWriter struct {
	mu       sync.Mutex
	left     int64
	once     sync.Once
	exceeded func()
}

func (l *limitWriter) to(w io.Writer) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		l.mu.Lock()
		n := int64(len(p))
		over := n > l.left
		if over {
			n = l.left
		}
		l.left -= n
		l.mu.Unlock()
		if n > 0 {
			if _, err := w.Write(p[:n]); err != nil {
				return 0, err
			}
		}
		if over {
			l.once.Do(l.exceeded)
		}
		return len(p), nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
