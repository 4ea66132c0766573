// Command runbox runs commands in isolated places from the terminal: Docker
// sessions that outlive one invocation, one-shot runs, and commands on the
// host. Run `runbox --help` for the tour.
//
// Exit status: the command's own exit code; 124 when --timeout expired;
// 128+N when it died of signal N (130 after Ctrl-C); 125 when runbox itself
// failed, with one line on stderr saying what failed and what to do.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/docker"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// Exit statuses of runbox itself, as with docker run and timeout(1).
const (
	exitFailure = 125
	exitTimeout = 124
)

// exitCode carries a status that is not a failure of runbox: the command's
// own exit code, a timeout, or an interrupt.
type exitCode struct {
	code int
	msg  string // printed to stderr when not empty
}

func (e *exitCode) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func main() {
	runbox.Init() // a re-executed sandbox helper runs here, before anything else
	os.Exit(execute(os.Args[1:]))
}

// execute runs the command line and returns the process exit status.
func execute(args []string) int {
	root := newRoot()
	root.InitDefaultCompletionCmd(args...)
	requireSubcommands(root)
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return 0
	}
	var ec *exitCode
	if errors.As(err, &ec) {
		if ec.msg != "" {
			fmt.Fprintln(os.Stderr, "runbox:", ec.msg)
		}
		return ec.code
	}
	printFailure(os.Stderr, err)
	return exitFailure
}

// printFailure prints err as one line, always: the lines of joined errors
// (prune's, for one) are separated with "; ".
func printFailure(w io.Writer, err error) {
	var parts []string
	for _, line := range strings.Split(err.Error(), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			parts = append(parts, line)
		}
	}
	fmt.Fprintf(w, "runbox: %s%s\n", strings.Join(parts, "; "), hint(err))
}

// hint says what to do about a failure, where there is something to say.
func hint(err error) string {
	switch {
	case errors.Is(err, runbox.ErrSessionNotFound):
		return " (see `runbox ls` for the sessions there are)"
	case errors.Is(err, runbox.ErrAmbiguous):
		return " (give more characters of the ID, or the name)"
	case errors.Is(err, runbox.ErrImageUnavailable):
		return " (pull it with `runbox image pull`, or check the reference)"
	case errors.Is(err, docker.ErrEngineTLS):
		return " (check the Engine's certificates: DOCKER_CERT_PATH, or the context's TLS material)"
	case errors.Is(err, runbox.ErrTransport):
		return " (is the Docker Engine running? --host, --context, DOCKER_HOST and DOCKER_CONTEXT select which one)"
	case errors.Is(err, runbox.ErrSessionEnded):
		return " (the session's lifetime process has exited; close it with `runbox close`)"
	case errors.Is(err, runbox.ErrOutputLimit):
		return " (raise --output-limit to keep more)"
	}
	return ""
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "runbox",
		Short: "Run commands in isolated places and report truthfully what happened",
		Long: `runbox runs commands in Docker Engine sessions or on this machine.

A session is a labelled container made of exactly the image, network
(none unless asked), mounts, limits and lifetime process you give. It
outlives one invocation: open it, exec in it as often as you like, snapshot
it, close it. The Engine is the one docker would use: --host, --context,
DOCKER_HOST, DOCKER_CONTEXT, then "docker context use".

Exit status: the command's own; 124 on --timeout; 128+N after signal N;
125 when runbox itself failed (one line on stderr says why).`,
		Example: `  id=$(runbox open busybox:latest -- sleep 1000000)
  runbox exec $id -- sh -c 'echo hello > /greeting'
  runbox snapshot --tag greeting:1 $id
  runbox run greeting:1 -- cat /greeting
  runbox close $id
  runbox host -- git status`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(err) })
	addEngineFlags(root)
	root.AddCommand(newVersion(), newDemo(), newImage(), newOpen(), newExec(), newShell(),
		newSnapshot(), newClose(), newLs(), newPrune(), newRun(), newHost(), newAgent(), newRenew(), newCp())
	return root
}

// requireSubcommands makes every command that only groups others (image,
// completion) fail on a missing or unknown subcommand instead of printing
// its help with status 0.
func requireSubcommands(c *cobra.Command) {
	for _, sub := range c.Commands() {
		requireSubcommands(sub)
	}
	if c == c.Root() || !c.HasSubCommands() || c.Runnable() {
		return
	}
	c.Args = cobra.ArbitraryArgs
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return usageError(fmt.Errorf("%s needs a subcommand", cmd.CommandPath()))
		}
		return usageError(fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath()))
	}
}

func usageError(err error) error { return fmt.Errorf("%w (see --help)", err) }

func newVersion() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the runbox version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), version)
			printEngine(cmd.Context(), cmd.OutOrStdout())
		},
	}
}
