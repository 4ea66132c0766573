package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/moby/moby/client"
	"github.com/spf13/cobra"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/internal/testimage"
)

func newDemo() *cobra.Command {
	var keep bool
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Walk through a Docker session: open, run, snapshot, reopen, close",
		Long: `demo builds a tiny image from the machine's static busybox (Debian's
busybox-static) through the Engine API, opens a session on it, runs a few
commands, snapshots the session, runs a command in a session opened from
the snapshot, and closes everything, printing each step. It needs a running
Docker Engine (DOCKER_HOST is honoured) and no registry.`,
		Example: "  runbox demo\n  DOCKER_HOST=tcp://127.0.0.1:2375 runbox demo",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
			defer stop()
			return demo(ctx, cmd.OutOrStdout(), keep)
		},
	}
	cmd.Flags().BoolVar(&keep, "keep-images", false, "keep the demo and snapshot images")
	return cmd
}

func demo(ctx context.Context, out io.Writer, keep bool) (err error) {
	step := func(format string, a ...any) { fmt.Fprintf(out, "==> "+format+"\n", a...) }
	e, err := newEngine()
	if err != nil {
		return err
	}
	defer e.Close()
	cli := e.Client()

	base := "runbox-demo/busybox:latest"
	step("building %s from a static busybox through the Engine API", base)
	id, err := testimage.Import(ctx, cli, base, map[string]string{"dev.runbox.demo": "1"})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "    image %s\n", id)
	if !keep {
		defer removeImage(cli, base, &err)
	}

	spec := runbox.Spec{Image: base, Process: []string{"sleep", "1000000"}, Init: true}
	step("opening a session (network: none, lifetime process: %s)", strings.Join(spec.Process, " "))
	s, err := e.OpenSession(ctx, spec)
	if err != nil {
		return err
	}
	defer closeSession(s, &err)
	mode := "plain Engine exec (this runbox binary is not static, so it cannot be the agent)"
	if s.Agent() {
		mode = "the runbox agent (PID 1 of the session)"
	}
	fmt.Fprintf(out, "    session %s; commands run through %s\n", s.ID()[:12], mode)

	streams := runbox.Streams{Stdout: indent(out), Stderr: indent(out)}
	runs := []runbox.Command{
		{Args: []string{"uname", "-srm"}},
		{Args: []string{"echo", "literal $HOME; no shell here"}},
		runbox.ShellCommand("echo 'written before the snapshot' > /greeting && ls /sys/class/net"),
		runbox.ShellCommand("echo 'to stderr' >&2; exit 3"),
	}
	for _, c := range runs {
		step("run %q", c.Args)
		res, err := s.Run(ctx, c, streams)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "    exit code %d\n", res.ExitCode)
	}

	step("run env with a clean environment (only GREETING=hello)")
	if _, err := s.Run(ctx, runbox.Command{Args: []string{"env"}, CleanEnv: true, Env: []string{"GREETING=hello"}}, streams); err != nil {
		fmt.Fprintf(out, "    error: %v\n", err) // plain exec cannot clear the environment, and says so
	}

	step("run a program that does not exist: a launch error, not an exit code")
	_, runErr := s.Run(ctx, runbox.Command{Args: []string{"/no/such/program"}}, streams)
	fmt.Fprintf(out, "    error: %v (errors.Is ErrStart: %v)\n", runErr, errors.Is(runErr, runbox.ErrStart))

	step("run untrusted commands the managed way: runbox.Collect (default 10 s, 1 MiB per stream)")
	o, err := runbox.Collect(ctx, s, runbox.ShellCommand(`printf '\033]0;a title\007\033[1;31mred\033[0m\n50%%\r100%%\n'; exit 4`), runbox.CollectOptions{})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "    exit code %d; stdout sanitised %q, raw %q\n", o.ExitCode, o.Stdout, o.RawStdout)
	stopped := "its process group was killed"
	if !s.Agent() {
		stopped = "plain exec cannot stop it: it ends with the session"
	}
	step("Collect `sleep 60` with a 1 s timeout")
	_, err = runbox.Collect(ctx, s, runbox.Command{Args: []string{"sleep", "60"}}, runbox.CollectOptions{Timeout: time.Second})
	reportCollect(out, err, stopped)
	step("Collect a command writing 1 GiB with a 64 KiB limit")
	_, err = runbox.Collect(ctx, s, runbox.Command{Args: []string{"head", "-c", "1073741824", "/dev/zero"}}, runbox.CollectOptions{StreamLimit: 64 << 10})
	reportCollect(out, err, stopped)
	if errors.Is(err, runbox.ErrCancelled) && !errors.Is(err, runbox.ErrOutputLimit) {
		return err // Ctrl-C
	}

	snapRef := "runbox-demo/snapshot:latest"
	step("snapshot the session's writable layer as %s", snapRef)
	img, err := s.Snapshot(ctx, runbox.SnapshotOptions{Reference: snapRef})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "    image %s (%s/%s)\n", img.ID, img.OS, img.Architecture)
	if !keep {
		defer removeImage(cli, snapRef, &err)
	}

	step("open a second session from the snapshot")
	s2, err := e.Open(ctx, runbox.Spec{Image: snapRef, Process: spec.Process, Init: true})
	if err != nil {
		return err
	}
	defer closeSession(s2, &err)
	fmt.Fprintf(out, "    session %s\n", s2.ID()[:12])
	step("run %q", []string{"cat", "/greeting"})
	if _, err := s2.Run(ctx, runbox.Command{Args: []string{"cat", "/greeting"}}, streams); err != nil {
		return err
	}
	step("closing both sessions and removing the demo images")
	return nil
}

// reportCollect prints a Collect failure: its kind, what it kept and the
// sentinels it wraps. There is no exit code to print.
func reportCollect(out io.Writer, err error, stopped string) {
	var ce *runbox.CommandError
	if !errors.As(err, &ce) {
		fmt.Fprintf(out, "    unexpected: %v\n", err)
		return
	}
	fmt.Fprintf(out, "    %s (%s); kept %d+%d bytes, no exit code; ErrCancelled %v, ErrOutputLimit %v\n",
		ce.Kind, stopped, len(ce.RawStdout), len(ce.RawStderr), errors.Is(err, runbox.ErrCancelled), errors.Is(err, runbox.ErrOutputLimit))
	fmt.Fprintf(out, "    error: %v\n", err)
}

func closeSession(s runbox.Session, errp *error) {
	if err := s.Close(context.Background()); err != nil && *errp == nil {
		*errp = err
	}
}

func removeImage(cli *client.Client, ref string, errp *error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cli.ImageRemove(ctx, ref, client.ImageRemoveOptions{Force: true, PruneChildren: true}); err != nil && *errp == nil {
		*errp = err
	}
}

// indent prefixes every line a command writes, so that output stands apart
// from the demo's own narration.
func indent(w io.Writer) io.Writer { return &prefixWriter{w: w, prefix: "    | ", atStart: true} }

type prefixWriter struct {
	w       io.Writer
	prefix  string
	atStart bool
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	var sb strings.Builder
	for _, c := range string(b) {
		if p.atStart {
			sb.WriteString(p.prefix)
		}
		sb.WriteRune(c)
		p.atStart = c == '\n'
	}
	if _, err := io.WriteString(p.w, sb.String()); err != nil {
		return 0, err
	}
	return len(b), nil
}
