package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"text/template"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/spf13/cobra"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/docker"
	"github.com/runbox-dev/runbox/internal/procstart"
)

// cliOwner marks sessions opened by `runbox open`: they belong to the user,
// not to a process, so `runbox prune` leaves them alone unless --all.
func cliOwner() string {
	h, err := os.Hostname()
	if err != nil {
		h = "unknown-host"
	}
	return h + "/cli"
}

// attach connects to the Engine and finds the session ref names (ID,
// unique prefix or name). done releases the connection.
func attach(ctx context.Context, ref string) (s *docker.Session, done func(), err error) {
	e, err := newEngine()
	if err != nil {
		return nil, nil, err
	}
	s, err = e.Session(ctx, ref)
	if err != nil {
		e.Close()
		return nil, nil, err
	}
	return s, func() { e.Close() }, nil
}

// afterDash drops the "--" that separates runbox's arguments from a
// command's.
func afterDash(args []string) []string {
	if len(args) > 0 && args[0] == "--" {
		return args[1:]
	}
	return args
}

// openJSON is the documented, stable shape of `runbox open --json`.
type openJSON struct {
	ID    string `json:"id"`
	Name  string `json:"name,omitempty"`
	Agent bool   `json:"agent"` // commands run through the runbox agent
}

func newOpen() *cobra.Command {
	var of openFlags
	var lease time.Duration
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "open [flags] IMAGE [-- PROCESS...]",
		Short: "Open a session and print its ID",
		Long: `open creates and starts a session made of exactly IMAGE, the network
(none unless --network says otherwise), the -v mounts, the limits and the
lifetime PROCESS (the image's own command when none is given). It prints the
session ID on stdout and nothing else. The session lives until its lifetime
process exits or ` + "`runbox close`" + ` removes it; with --lease, also until nobody
renewed it (` + "`runbox exec`" + `, ` + "`runbox renew`" + `) for that long.`,
		Example: `  id=$(runbox open busybox:latest -- sleep 1000000)
  runbox open --pull always --platform linux/arm64 alpine:3.20 -- sleep 1000000
  runbox open --name work --network bridge -v "$PWD:/work" --memory 512m --cpus 1 busybox:latest -- sleep 1000000
  runbox open -w /work --read-only --tmpfs /work --pids-limit 128 busybox:latest -- sleep 1000000
  runbox open --json busybox:latest -- sleep 1000000 | jq -r .id`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var process []string
			if rest := afterDash(args[1:]); len(rest) > 0 {
				process = rest
			}
			spec, err := of.spec(args[0], process)
			if err != nil {
				return err
			}
			leaseOpt := docker.WithoutLease() // a terminal user expects the session to stay
			if lease != 0 {
				leaseOpt = docker.WithLease(lease)
			}
			e, err := newEngine(docker.WithOwner(cliOwner()), leaseOpt)
			if err != nil {
				return err
			}
			defer e.Close()
			s, err := openSession(cmd.Context(), e, spec, of, true)
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(openJSON{ID: s.ID(), Name: spec.Name, Agent: s.Agent()})
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), s.ID())
			return err
		},
	}
	cmd.Flags().SetInterspersed(false)
	of.register(cmd.Flags())
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"id","name","agent"} instead of the ID`)
	of.registerWorkdir(cmd.Flags())
	cmd.Flags().DurationVar(&lease, "lease", 0, "end the session (and remove it) when no exec or `runbox renew` renewed it for this long; default: until `runbox close`")
	return cmd
}

func newExec() *cobra.Command {
	var xf execFlags
	cmd := &cobra.Command{
		Use:   "exec [flags] SESSION -- ARGV...",
		Short: "Run a command in a session",
		Long: `exec runs ARGV literally (no shell) in SESSION (an ID, a unique ID prefix or
a name) and exits with the command's exit status. Stdout and stderr stay
separate. Without -i the command's stdin is empty. A program that is not
there exits 127, one that cannot be executed 126, as with docker. -e K
passes this shell's value of K; -w must be absolute; -t sets TERM (this
shell's, else xterm) unless -e sets it.

With --timeout, runbox stops waiting and exits 124. With --output-limit,
runbox passes on that many bytes of stdout and stderr together, then stops
the command and exits 125. The Engine cannot kill an exec, so without the
session's agent a stopped command may keep running in the session until it
ends or the session is closed.`,
		Example: `  runbox exec $id -- ls -l /
  echo hello | runbox exec -i $id -- cat
  runbox exec -t $id -- top
  runbox exec --timeout 30s -e DEBUG=1 -w /work $id -- make test
  runbox exec --output-limit 1048576 $id -- ./noisy-tool
  runbox exec -u nobody $id -- id
  runbox exec -e HOME --env-file ./.env $id -- env`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := xf.sessionCommand(afterDash(args[1:]))
			if err != nil {
				return err
			}
			if err := checkTTY(xf); err != nil {
				return err
			}
			timeout, err := xf.parseTimeout()
			if err != nil {
				return err
			}
			limit, err := xf.limit()
			if err != nil {
				return err
			}
			s, done, err := attach(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			defer done()
			return explainEnded(cmd.Context(), s.ID(), runInSession(cmd.Context(), s, c, timeout, limit, xf.interactive))
		},
	}
	cmd.Flags().SetInterspersed(false)
	xf.register(cmd.Flags(), true)
	xf.registerOutputLimit(cmd.Flags())
	xf.registerUser(cmd.Flags())
	return cmd
}

func newShell() *cobra.Command {
	var dir, user string
	var env []string
	cmd := &cobra.Command{
		Use:   "shell [flags] SESSION [-- ARGV...]",
		Short: "Open an interactive terminal in a session (default /bin/sh)",
		Long: `shell runs ARGV (default /bin/sh) in SESSION under a pseudo-terminal with
this terminal in raw mode, forwards window-size changes, and restores the
terminal however the command ends. It needs a terminal on stdin.`,
		Example: "  runbox shell $id\n  runbox shell work -- /bin/bash -l",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			argv := afterDash(args[1:])
			if len(argv) == 0 {
				argv = []string{"/bin/sh"}
			}
			env, err := resolveEnv(env, nil)
			if err != nil {
				return err
			}
			c := runbox.Command{Args: argv, Dir: dir, Env: env, TTY: true, Stdin: os.Stdin, User: user}
			if err := forSession(&c); err != nil {
				return err
			}
			if !isTerminal(os.Stdin) {
				return fmt.Errorf("%w: shell needs a terminal on stdin (use `runbox exec -i` for pipes)", runbox.ErrProcessTTYUnsupported)
			}
			if err := c.Validate(); err != nil {
				return err
			}
			s, done, err := attach(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			defer done()
			return explainEnded(cmd.Context(), s.ID(), runInSession(cmd.Context(), s, c, 0, 0, true))
		},
	}
	cmd.Flags().SetInterspersed(false)
	cmd.Flags().StringVarP(&dir, "workdir", "w", "", "working directory")
	cmd.Flags().StringArrayVarP(&env, "env", "e", nil, "environment entry K=V, or K for this shell's value (repeatable)")
	cmd.Flags().StringVarP(&user, "user", "u", "", "run as USER[:GROUP] (names or numbers known to the session)")
	return cmd
}

// errSessionRemoved reports a session that was closed or removed (by
// `runbox close` in another shell, for one) while a command used it.
var errSessionRemoved = errors.New("the session was closed or removed while the command ran")

// explainEnded tells a session that ended because it was closed elsewhere
// from one whose lifetime process exited: closing it again is no advice.
func explainEnded(ctx context.Context, id string, err error) error {
	if !errors.Is(err, runbox.ErrSessionEnded) && !errors.Is(err, runbox.ErrTransport) {
		return err
	}
	e, eerr := newEngine()
	if eerr != nil {
		return err
	}
	defer e.Close()
	ctx = context.WithoutCancel(ctx)
	removed := fmt.Errorf("%w: %s", errSessionRemoved, shortID(id))
	// Inspect, not the list: the list may still show a container that is
	// being killed as running. id is the session's full ID.
	gone := func() (bool, *container.State) {
		res, ierr := e.Client().ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		if cerrdefs.IsNotFound(ierr) {
			return true, nil
		}
		if ierr != nil {
			return false, nil
		}
		return false, res.Container.State
	}
	isGone, st := gone()
	if isGone {
		return removed
	}
	if st == nil || st.Running {
		return err
	}
	// Close kills the session, then removes it: a session being closed
	// is gone in a moment; one whose process ended by itself stays.
	wctx, cancel := context.WithTimeout(ctx, closeSettle)
	defer cancel()
	wait := e.Client().ContainerWait(wctx, id, client.ContainerWaitOptions{Condition: container.WaitConditionRemoved})
	select {
	case <-wait.Result:
		return removed
	case <-wait.Error:
		// Not found, or a wait the Engine cut short: ask once more.
		if isGone, _ := gone(); isGone {
			return removed
		}
	}
	return err
}

// closeSettle bounds how long a failed command waits to learn whether its
// session is being removed.
const closeSettle = 3 * time.Second

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// openSession pulls the image as --pull says, opens the session, says once
// on stderr when it has no agent, and confirms that its lifetime process
// is still running: a session whose process ended at once is removed and
// reported, not left behind as an ID that cannot run anything.
func openSession(ctx context.Context, e *docker.Executor, spec runbox.Spec, of openFlags, settle bool) (*docker.Session, error) {
	if err := ensureImage(ctx, e, spec.Image, of.pull, of.platform, os.Stderr); err != nil {
		return nil, err
	}
	s, err := e.OpenSession(ctx, spec)
	if errors.Is(err, runbox.ErrSessionEnded) {
		// Open removed what it had created.
		return nil, fmt.Errorf("%w: %w; the session was removed", errEndedAtOpen, err)
	}
	if err != nil {
		return nil, err
	}
	if why := s.AgentMissing(); why != "" {
		fmt.Fprintf(os.Stderr, "runbox: warning: session %s has no agent (%s): commands run with plain Engine exec, so --timeout and Ctrl-C cannot stop them and --clean-env is refused\n", shortID(s.ID()), trimPrefixes(why))
	}
	if !settle {
		return s, nil
	}
	if err := checkRunning(ctx, e, s); err != nil {
		if cerr := s.Close(context.WithoutCancel(ctx)); cerr != nil {
			err = errors.Join(err, cerr)
		}
		return nil, err
	}
	return s, nil
}

// errEndedAtOpen marks a session removed because its lifetime process
// ended as it opened.
var errEndedAtOpen = errors.New("open failed")

// openSettle is how long `runbox open` watches a new session's lifetime
// process before it prints the ID: a process that ends within it (a
// command that exits at once, a missing program) ended at open. The
// library's own check catches most such processes; this closes the window
// between its check and the process's end.
const openSettle = 300 * time.Millisecond

// checkRunning fails with runbox.ErrSessionEnded when the session's
// lifetime process stops within openSettle.
func checkRunning(ctx context.Context, e *docker.Executor, s *docker.Session) error {
	wctx, cancel := context.WithTimeout(ctx, openSettle)
	defer cancel()
	wait := e.Client().ContainerWait(wctx, s.ID(), client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	select {
	case res := <-wait.Result:
		// An Engine whose wait was cut short by our deadline may answer
		// with -1 and an error instead of an exit; only the container's
		// state says whether the process really ended.
		if res.Error != nil || res.StatusCode < 0 {
			if running, ierr := stillRunning(context.WithoutCancel(ctx), e, s); ierr == nil && running {
				return nil
			}
		}
		return fmt.Errorf("%w: %w: the lifetime process %q exited with code %d as the session opened; the session was removed", errEndedAtOpen, runbox.ErrSessionEnded, strings.Join(s.Spec().Process, " "), res.StatusCode)
	case err := <-wait.Error:
		if wctx.Err() != nil {
			return nil // still running
		}
		return err
	}
}

// stillRunning reports whether the session's lifetime process runs now.
func stillRunning(ctx context.Context, e *docker.Executor, s *docker.Session) (bool, error) {
	res, err := e.Client().ContainerInspect(ctx, s.ID(), client.ContainerInspectOptions{})
	if err != nil {
		return false, err
	}
	return res.Container.State != nil && res.Container.State.Running, nil
}

// checkTTY refuses -it when stdin is not a terminal, as docker does,
// instead of waiting on a terminal that is not there.
func checkTTY(xf execFlags) error {
	if xf.tty && xf.interactive && !isTerminal(os.Stdin) {
		return &exitCode{code: 1, msg: "the input device is not a TTY"}
	}
	return nil
}

// runInSession runs c with this process's stdio and turns the outcome into
// an exit status. Ctrl-C and SIGTERM cancel the command. Interactive and
// terminal commands use the session's streaming process when it has an
// agent; otherwise Run carries stdin, the terminal and its resizes.
func runInSession(parent context.Context, s runbox.Session, c runbox.Command, timeout time.Duration, limit int64, interactive bool) error {
	ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	defer stop()
	runCtx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	streams := runbox.Streams{Stdout: os.Stdout, Stderr: os.Stderr}
	var lim *runbox.Limiter
	if limit > 0 {
		var cancel context.CancelCauseFunc
		runCtx, cancel = context.WithCancelCause(runCtx)
		defer cancel(nil)
		lim = runbox.NewLimiter(runbox.OutputLimit{Combined: limit}, streams, func() { cancel(runbox.ErrOutputLimit) })
		streams = lim.Streams()
	}
	// Output past the limit is a runbox failure, however the command ended.
	finish := func(res runbox.Result, err error) error {
		if lim != nil && lim.Err() != nil && ctx.Err() == nil {
			return lim.Err()
		}
		return outcome(ctx, timeout, res, err)
	}
	if c.TTY {
		c.TermSize = currentSize()
	}
	if c.TTY || interactive {
		// driveProcess wires this process's stdin and terminal to the
		// process's own Stdin and Resize.
		sc := c
		sc.Stdin, sc.Resize = nil, nil
		p, err := s.Start(runCtx, sc)
		if err == nil {
			res, err := driveProcess(runCtx, p, streams, c.TTY, interactive)
			return finish(res, err)
		}
		if !errors.Is(err, runbox.ErrUnsupported) {
			return finish(runbox.Result{ExitCode: -1}, err)
		}
		// A session without streaming (plain exec): Run carries stdin,
		// the terminal and its resizes.
	}
	if c.TTY {
		restore, resize := setupTerminal(ctx, interactive)
		defer restore()
		c.Resize = resize
	}
	res, err := s.Run(runCtx, c, streams)
	return finish(res, err)
}

// driveProcess wires this process's terminal or pipes to p and waits for
// it; when ctx ends, p is killed. It is the one code path for streaming
// processes of either backend.
func driveProcess(ctx context.Context, p runbox.StreamingProcess, streams runbox.Streams, tty, interactive bool) (runbox.Result, error) {
	defer p.Close(context.Background())
	if tty {
		restore, resize := setupTerminal(ctx, interactive)
		defer restore()
		go func() {
			for sz := range resize {
				_ = p.Resize(sz)
			}
		}()
	}
	if interactive {
		go func() {
			_, _ = io.Copy(p.Stdin(), os.Stdin)
			if !tty {
				_ = p.Stdin().Close() // a terminal has no end of file
			}
		}()
	} else {
		_ = p.Stdin().Close()
	}
	var copies sync.WaitGroup
	copies.Add(2)
	go func() { defer copies.Done(); _, _ = io.Copy(streams.Stdout, p.Stdout()) }()
	go func() { defer copies.Done(); _, _ = io.Copy(streams.Stderr, p.Stderr()) }()
	res, err := p.Wait(ctx)
	if err != nil {
		_ = p.Signal(runbox.ProcessSignalKill)
		return runbox.Result{ExitCode: -1}, err
	}
	copies.Wait()
	return res, nil
}

// outcome maps a Run's result to the CLI's exit status: the command's
// own status as the backend reports it (128+N for a death by signal N, in
// the numbering of the system that ran it), 124 when --timeout ends it,
// 130 when runbox is interrupted, and an error (125) for runbox's own
// failures.
func outcome(sigCtx context.Context, timeout time.Duration, res runbox.Result, err error) error {
	if err == nil {
		if res.ExitCode == 0 {
			return nil
		}
		return &exitCode{code: res.ExitCode}
	}
	if errors.Is(err, runbox.ErrCancelled) {
		if sigCtx.Err() != nil {
			return &exitCode{code: 130, msg: "interrupted"}
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return &exitCode{code: exitTimeout, msg: fmt.Sprintf("timed out after %s", timeout)}
		}
	}
	return err
}

func newSnapshot() *cobra.Command {
	var tag string
	var pause, asJSON bool
	cmd := &cobra.Command{
		Use:   "snapshot [flags] SESSION",
		Short: "Save a session's writable layer as an image and print its ID",
		Long: `snapshot commits SESSION's writable layer as a new image and prints the
image ID. Mounted contents are not included. The session keeps running and
is not paused unless --pause is given.`,
		Example: "  runbox snapshot --tag work:after-build $id",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, done, err := attach(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			defer done()
			img, err := s.Snapshot(cmd.Context(), runbox.SnapshotOptions{Reference: tag, Pause: pause})
			if err != nil {
				return err
			}
			if asJSON {
				return printImage(cmd, img, true)
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), img.ID)
			return err
		},
	}
	cmd.Flags().StringVar(&tag, "tag", "", "tag the image as NAME[:TAG]")
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"id","os","architecture","variant"} instead of the ID`)
	cmd.Flags().BoolVar(&pause, "pause", false, "pause the session's processes while the layer is saved")
	return cmd
}

func newClose() *cobra.Command {
	return &cobra.Command{
		Use:     "close SESSION...",
		Short:   "Close sessions: kill their processes and remove their containers",
		Example: "  runbox close $id\n  runbox close work other",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return eachSession(cmd.Context(), args, func(s *docker.Session) error { return s.Close(cmd.Context()) })
		},
	}
}

// sessionJSON is the documented, stable shape of one `runbox ls --json`
// entry.
type sessionJSON struct {
	ID      string    `json:"id"`
	Name    string    `json:"name"`
	Image   string    `json:"image"`
	Created time.Time `json:"created"`
	State   string    `json:"state"`
	Owner   string    `json:"owner"`
	Context string    `json:"context,omitempty"` // with --all-contexts
}

func newLs() *cobra.Command {
	var asJSON, all, quiet, noTrunc, allContexts bool
	var filters []string
	var format string
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"ps"},
		Short:   "List sessions",
		Long: `ls (or ps) lists the running runbox sessions on the Engine, newest first: ID,
name, image, age and state; -a lists the ended ones too. --filter selects
as prune's does (label=K[=V], name=, id=, status=, ancestor=, until=).

--format prints each session through a Go template, as docker's does, with
the fields .ID .Name .Image .Created .State .Owner .Labels, the method
.Label "K", and the functions json, join, upper and lower; --format json
prints one JSON object per line. --json prints an array of objects with
the fields id, name, image, created (RFC 3339), state and owner
("hostname/pid/start" of the creating process, or "hostname/cli" for
sessions opened with runbox open).

--all-contexts lists the sessions of every Engine the docker CLI knows: the
default one (DOCKER_HOST or the local socket) and each context of
` + "`docker context ls`" + `, with a CONTEXT column (.Context, and "context" in
JSON). An Engine that cannot be listed is named on stderr, the others are
still listed, and the command then fails.`,
		Example: `  runbox ls
  runbox ps -a --filter label=project=demo
  runbox ls -q | xargs runbox close
  runbox ls --format '{{.Name}} {{.Image}} {{.Label "project"}}'
  runbox ls --json | jq -r '.[].id'
  runbox ls --all-contexts`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := parseFilters(filters)
			if err != nil {
				return err
			}
			var tmpl *template.Template
			if format != "" && format != "json" {
				if tmpl, err = template.New("format").Funcs(formatFuncs).Parse(format); err != nil {
					return fmt.Errorf("%w: --format: %w", runbox.ErrInvalidCommand, err)
				}
			}
			lists, listErr := listSessions(cmd, allContexts)
			if lists == nil {
				return listErr
			}
			now := time.Now()
			var rows []sessionRow
			for _, l := range lists {
				for _, s := range l.sessions {
					if (all || s.State == "running") && f.match(s, now) {
						rows = append(rows, sessionRow{s, l.context})
					}
				}
			}
			out := cmd.OutOrStdout()
			short := func(id string) string {
				if noTrunc {
					return id
				}
				return shortID(id)
			}
			switch {
			case asJSON:
				list := make([]sessionJSON, 0, len(rows))
				for _, s := range rows {
					list = append(list, sessionJSON{s.ID, s.Name, s.Image, s.Created, s.State, s.Owner, s.Context})
				}
				if err := json.NewEncoder(out).Encode(list); err != nil {
					return err
				}
				return listErr
			case quiet:
				for _, s := range rows {
					fmt.Fprintln(out, short(s.ID))
				}
				return listErr
			case format == "json":
				enc := json.NewEncoder(out)
				for _, s := range rows {
					if err := enc.Encode(sessionJSON{s.ID, s.Name, s.Image, s.Created, s.State, s.Owner, s.Context}); err != nil {
						return err
					}
				}
				return listErr
			case tmpl != nil:
				for _, s := range rows {
					if err := tmpl.Execute(out, s); err != nil {
						return fmt.Errorf("%w: --format: %w", runbox.ErrInvalidCommand, err)
					}
					fmt.Fprintln(out)
				}
				return listErr
			}
			w := tabwriter.NewWriter(out, 0, 0, 3, ' ', 0)
			if allContexts {
				fmt.Fprint(w, "CONTEXT\t")
			}
			fmt.Fprintln(w, "ID\tNAME\tIMAGE\tAGE\tSTATE")
			for _, s := range rows {
				if allContexts {
					fmt.Fprintf(w, "%s\t", s.Context)
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", short(s.ID), s.Name, s.Image, age(s.Created), s.State)
			}
			if err := w.Flush(); err != nil {
				return err
			}
			return listErr
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&asJSON, "json", false, "print a JSON array (see the description for the fields)")
	fl.BoolVarP(&all, "all", "a", false, "list ended sessions too")
	fl.BoolVarP(&quiet, "quiet", "q", false, "print the IDs only")
	fl.BoolVar(&noTrunc, "no-trunc", false, "print full IDs")
	fl.StringArrayVar(&filters, "filter", nil, "only sessions matching KEY=VALUE (label, name, id, status, ancestor, until; repeatable)")
	fl.StringVar(&format, "format", "", "print each session through a Go template, or json")
	fl.BoolVar(&allContexts, "all-contexts", false, "list the sessions of every docker context's Engine, with a CONTEXT column")
	return cmd
}

// contextSessions are the sessions of one Engine; context is empty unless
// every context is listed.
type contextSessions struct {
	context  string
	sessions []docker.SessionInfo
}

// listSessions lists the sessions of the Engine in use or, with all, of
// every docker context's Engine. An Engine that cannot be listed is named
// on stderr and the others are still listed; the returned error then says
// which failed. Without any list the error is the only result.
func listSessions(cmd *cobra.Command, all bool) ([]contextSessions, error) {
	if !all {
		e, err := newEngine()
		if err != nil {
			return nil, err
		}
		defer e.Close()
		sessions, err := e.Sessions(cmd.Context())
		if err != nil {
			return nil, err
		}
		return []contextSessions{{sessions: sessions}}, nil
	}
	if engineFlags.host != "" || engineFlags.context != "" {
		return nil, fmt.Errorf("%w: --all-contexts lists every Engine: it cannot be combined with --host or --context", runbox.ErrInvalidCommand)
	}
	names, err := docker.Contexts()
	if err != nil {
		return nil, err
	}
	lists := []contextSessions{}
	var failed []string
	for _, name := range names {
		sessions, err := func() ([]docker.SessionInfo, error) {
			e, err := newEngine(docker.WithContext(name))
			if err != nil {
				return nil, err
			}
			defer e.Close()
			return e.Sessions(cmd.Context())
		}()
		if err != nil {
			printFailure(cmd.ErrOrStderr(), fmt.Errorf("context %s: %w", name, err))
			failed = append(failed, name)
			continue
		}
		lists = append(lists, contextSessions{name, sessions})
	}
	if failed != nil {
		return lists, fmt.Errorf("the sessions of %d of %d contexts could not be listed (%s)",
			len(failed), len(names), strings.Join(failed, ", "))
	}
	return lists, nil
}

// sessionRow is what ls --format templates see: the session's fields,
// and .Context with --all-contexts.
type sessionRow struct {
	docker.SessionInfo
	Context string
}

// Label returns the session's label k ("" when it has none).
func (r sessionRow) Label(k string) string { return r.Labels[k] }

// formatFuncs are the template functions of --format, as docker's.
var formatFuncs = template.FuncMap{
	"json": func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	},
	"join":  strings.Join,
	"upper": strings.ToUpper,
	"lower": strings.ToLower,
}

func age(t time.Time) string {
	d := time.Since(t).Round(time.Second)
	switch {
	case d < time.Minute:
		return d.String()
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func newPrune() *cobra.Command {
	var all, force bool
	var filters []string
	cmd := &cobra.Command{
		Use:   "prune",
		Short: "Remove ended sessions and sessions whose owning process is gone",
		Long: `prune removes the sessions nobody can use any more: sessions whose lifetime
process has exited (opened with ` + "`runbox open`" + ` or by a program), and sessions
of programs that ended without closing them (whose owner label names a
process on this host that no longer exists; a process that got the owner's
pid later is told apart by its start time). Running sessions opened with
` + "`runbox open`" + `, and running sessions of other hosts, stay.

--all removes every runbox session on the Engine, running ones and other
users' included; it asks first unless -f is given. --filter narrows either
selection (label=K[=V], name=, id=, status=, ancestor=IMAGE, until=10m).
Prints the removed IDs.`,
		Example: `  runbox prune
  runbox prune --filter label=project=demo
  runbox prune --all --filter until=24h
  runbox prune --all -f --filter label=ci-run=42`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := parseFilters(filters)
			if err != nil {
				return err
			}
			if all && !force {
				if !confirm(cmd.InOrStdin(), cmd.ErrOrStderr(), "This removes every runbox session on the Engine that the filters select, running sessions and other users' included. Continue? [y/N] ") {
					return &exitCode{code: 1, msg: "prune --all not confirmed: nothing removed"}
				}
			}
			e, err := newEngine()
			if err != nil {
				return err
			}
			defer e.Close()
			sessions, err := e.Sessions(cmd.Context())
			if err != nil {
				return err
			}
			host, _ := os.Hostname()
			now := time.Now()
			var errs []error
			for _, info := range sessions {
				if !f.match(info, now) {
					continue
				}
				if !all && !ended(info.State) && !ownerGone(info.Owner, info.Created, host) {
					continue
				}
				s, err := e.Session(cmd.Context(), info.ID)
				if err == nil {
					err = s.Close(cmd.Context())
				}
				if err != nil {
					errs = append(errs, err)
					continue
				}
				fmt.Fprintln(cmd.OutOrStdout(), info.ID)
			}
			return errors.Join(errs...)
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "remove every runbox session the filters select, running ones included (asks first)")
	cmd.Flags().BoolVarP(&force, "force", "f", false, "do not ask before --all")
	cmd.Flags().StringArrayVar(&filters, "filter", nil, "only sessions matching KEY=VALUE (label, name, id, status, ancestor, until; repeatable)")
	return cmd
}

// ended reports whether a container state means the lifetime process is
// over for good. A "created" container may be a session being opened.
func ended(state string) bool {
	return state == "exited" || state == "dead"
}

// confirm asks question on w and reads one answer from r: only y or yes
// (any case) agrees; end of input refuses.
func confirm(r io.Reader, w io.Writer, question string) bool {
	fmt.Fprint(w, question)
	line, _ := bufio.NewReader(r).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true
	}
	fmt.Fprintln(w)
	return false
}

// ownerGone reports whether the session's owner label names a process of
// this host that no longer exists. A process that has the owner's pid but
// not its start time is another process that got the pid later. A label
// without a start time (written before runbox recorded it) is judged by the
// pid, unless that pid's process started after the session was created:
// then it cannot be the owner.
func ownerGone(owner string, created time.Time, host string) bool {
	o, ok := docker.ParseOwner(owner)
	if !ok || o.Host != host {
		return false
	}
	if !processAlive(o.PID) {
		return true
	}
	st, err := procstart.Of(o.PID)
	if err != nil {
		// The process exists and cannot be told apart: keep its session.
		return false
	}
	if o.Start != "" {
		return st.ID != o.Start
	}
	// Both times are to about a second: allow for that.
	return !created.IsZero() && !st.Time.IsZero() && st.Time.After(created.Add(2*time.Second))
}

// runJSON is the documented, stable shape of the last stderr line of
// `runbox run --json`.
type runJSON struct {
	Session  string `json:"session"`
	ExitCode int    `json:"exitCode"` // the process's exit status; -1 with error
	Error    string `json:"error,omitempty"`
}

// reportRun writes run's --json line after what runbox would print about
// err, and returns the exit status alone.
func reportRun(id string, err error) error {
	rep := runJSON{Session: id}
	var ec *exitCode
	switch {
	case err == nil:
	case errors.As(err, &ec):
		if ec.msg != "" {
			fmt.Fprintln(os.Stderr, "runbox:", ec.msg)
		}
		rep.ExitCode = ec.code
	default:
		printFailure(os.Stderr, err)
		rep.ExitCode, rep.Error = -1, trimPrefixes(err.Error())
		ec = &exitCode{code: failureCode(err)}
	}
	b, jerr := json.Marshal(rep)
	if jerr != nil {
		return jerr
	}
	fmt.Fprintf(os.Stderr, "%s\n", b)
	if ec == nil {
		return nil
	}
	return &exitCode{code: ec.code}
}

func newRun() *cobra.Command {
	var of openFlags
	var xf execFlags
	var asJSON bool
	var process []string
	cmd := &cobra.Command{
		Use:   "run [flags] IMAGE -- ARGV...",
		Short: "One-shot: open a session, run a command in it, close it",
		Long: `run opens a session on IMAGE (with the flags of open), runs ARGV in it (with
the flags of exec) and closes the session however the command ends, Ctrl-C
included. The session's lifetime process is --process (default: sleep), so
the image needs a sleep program unless --process names another.`,
		Example: `  runbox run busybox:latest -- uname -a
  runbox run --pull never --clean-env -e K=V busybox:latest -- env
  runbox run -v "$PWD:/src:ro" -w /src --timeout 5m golang:1.26 -- go test ./...`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			spec, err := of.spec(args[0], process)
			if err != nil {
				return err
			}
			c, err := xf.sessionCommand(afterDash(args[1:]))
			if err != nil {
				return err
			}
			// -e shapes the session and reaches the command, as docker
			// run's does, --clean-env or not.
			c.Env = append(c.Env, spec.Env...)
			if err := checkTTY(xf); err != nil {
				return err
			}
			timeout, err := xf.parseTimeout()
			if err != nil {
				return err
			}
			limit, err := xf.limit()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			e, err := newEngine()
			if err != nil {
				return err
			}
			defer e.Close()
			s, err := openSession(ctx, e, spec, of, false)
			if err != nil {
				if ctx.Err() != nil {
					return &exitCode{code: 130, msg: "interrupted"}
				}
				return err
			}
			runErr := runInSession(ctx, s, c, timeout, limit, xf.interactive)
			if err := s.Close(context.Background()); err != nil {
				runErr = errors.Join(runErr, err)
			} else if ctx.Err() != nil {
				runErr = &exitCode{code: 130, msg: "interrupted"}
			}
			if asJSON {
				return reportRun(s.ID(), runErr)
			}
			return runErr
		},
	}
	cmd.Flags().SetInterspersed(false)
	of.register(cmd.Flags())
	xf.register(cmd.Flags(), false)
	xf.registerOutputLimit(cmd.Flags())
	cmd.Flags().BoolVar(&asJSON, "json", false, `write {"session","exitCode","error"} as the last line of stderr`)
	cmd.Flags().StringArrayVar(&process, "process", []string{"sleep", "2147483647"}, "lifetime process argument (repeat for each argument)")
	return cmd
}
