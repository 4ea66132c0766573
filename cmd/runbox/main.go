// Command runbox runs commands in isolated places from the terminal: Docker
// sessions that outlive one invocation, one-shot runs, and commands on the
// host. Run `runbox --help` for the tour.
//
// Exit status: the command's own exit code; 124 when --timeout expired;
// 128+N when it died of signal N (130 after Ctrl-C); 127 when the program
// was not found and 126 when it could not be executed, as docker's; 125
// when runbox itself failed, with one line on stderr saying what failed and
// what to do. docs/exit-codes.md has the table.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/docker"
)

// version is set at build time with -ldflags "-X main.version=..." (make
// build does); empty means: ask the build information.
var version = ""

// Exit statuses of runbox itself, as with docker run and timeout(1).
const (
	exitFailure       = 125
	exitTimeout       = 124
	exitCannotExecute = 126
	exitNotFound      = 127
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

// execute runs the command line and returns the process exit status. It
// is the one place where errors become output and exit statuses.
func execute(args []string) int {
	root := newRoot()
	root.InitDefaultCompletionCmd(args...)
	requireSubcommands(root)
	withUsage(root)
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
	return failureCode(err)
}

// failureCode is the exit status of a runbox failure: docker's 127 when
// the program was not found, 126 when it was found but could not be
// executed, 125 for everything else.
func failureCode(err error) int {
	if errors.Is(err, runbox.ErrStart) {
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return exitNotFound
		case errors.Is(err, fs.ErrPermission):
			return exitCannotExecute
		}
	}
	return exitFailure
}

// printFailure prints err as one line, always: the lines of joined errors
// (prune's, for one) are separated with "; ". The library's errors begin
// with "runbox: " (or "runbox/docker: "), which the line's own prefix
// already says.
func printFailure(w io.Writer, err error) {
	var parts []string
	for _, line := range strings.Split(err.Error(), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			parts = append(parts, trimPrefixes(line))
		}
	}
	fmt.Fprintf(w, "runbox: %s%s\n", strings.Join(parts, "; "), hint(err))
}

// trimPrefixes drops the package prefixes that wrapped errors repeat, at
// the start of the message and after each ": ".
func trimPrefixes(line string) string {
	for _, p := range []string{"runbox: ", "runbox/docker: "} {
		line = strings.ReplaceAll(line, ": "+p, ": ")
		for strings.HasPrefix(line, p) {
			line = strings.TrimPrefix(line, p)
		}
	}
	return line
}

// hint says what to do about a failure, where there is something to say.
// The more specific conditions come first: a failed pull is also an
// unavailable image, and a session closed elsewhere is also an ended one.
func hint(err error) string {
	var pe *docker.PullError
	switch {
	case errors.As(err, &pe):
		return " (check the reference, the registry's address and your login)"
	case errors.Is(err, errPullFailed):
		return " (check the reference and the registry)"
	case errors.Is(err, runbox.ErrSessionNotFound):
		return " (see `runbox ls` for the sessions there are)"
	case errors.Is(err, runbox.ErrAmbiguous):
		return " (give more characters of the ID, or the name)"
	case errors.Is(err, runbox.ErrImageUnavailable):
		return " (pull it with `runbox image pull`, or use --pull missing)"
	case errors.Is(err, docker.ErrEngineTLS):
		return " (check the Engine's certificates: DOCKER_CERT_PATH, or the context's TLS material)"
	case errors.Is(err, runbox.ErrTransport):
		return " (is the Docker Engine running? --host, --context, DOCKER_HOST and DOCKER_CONTEXT select which one)"
	case errors.Is(err, errSessionRemoved), errors.Is(err, errEndedAtOpen):
		return ""
	case errors.Is(err, runbox.ErrSessionEnded):
		return " (the session's lifetime process has exited; close it with `runbox close`)"
	case errors.Is(err, runbox.ErrOutputLimit):
		return " (raise --output-limit to keep more)"
	}
	return ""
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Version: cliVersion(),
		Use:     "runbox",
		Short:   "Run commands in isolated places and report truthfully what happened",
		Long: `runbox runs commands in Docker Engine sessions or on this machine.

A session is a labelled container made of exactly the image, network
(none unless asked), mounts, limits and lifetime process you give. It
outlives one invocation: open it, exec in it as often as you like, snapshot
it, close it. The Engine is the one docker would use: --host, --context,
DOCKER_HOST, DOCKER_CONTEXT, then "docker context use".

Exit status: the command's own; 124 on --timeout; 128+N after signal N;
127 when the program was not found, 126 when it could not be executed;
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
		newSnapshot(), newClose(), newLs(), newInspect(), newLogs(), newPrune(), newRun(), newHost(), newAgent(), newRenew(), newCp())
	addCompletions(root)
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

// withUsage makes every command's argument errors show its usage line,
// on the one line a failure gets.
func withUsage(c *cobra.Command) {
	for _, sub := range c.Commands() {
		withUsage(sub)
	}
	if c.Args == nil {
		return
	}
	args := c.Args
	c.Args = func(cmd *cobra.Command, a []string) error {
		if err := args(cmd, a); err != nil {
			return fmt.Errorf("%w (usage: %s; see --help)", err, cmd.UseLine())
		}
		return nil
	}
}

func newVersion() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the versions of runbox and of the Docker Engine",
		Long: `version prints runbox's version (set by ` + "`make build`" + ` from git, or the
module version and revision Go recorded in the binary), then the Engine in
use: where it is, how it was chosen, its version and the API version
runbox speaks with it. An Engine that cannot be reached is reported in the
output; runbox's own version is still printed.`,
		Example: `  runbox version
  runbox version --json | jq -r .engine.version
  runbox --version`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client := clientVersionJSON{Version: cliVersion(), Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
			out := cmd.OutOrStdout()
			if !asJSON {
				fmt.Fprintf(out, "runbox %s (%s, %s)\n", client.Version, client.Go, client.Platform)
				printEngine(cmd.Context(), out)
				return nil
			}
			return json.NewEncoder(out).Encode(versionJSON{Client: client, Engine: engineVersion(cmd.Context())})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, `print JSON: {"client":{"version","go","platform"},"engine":{"version","api_version","platform","host","context","local","error"}}`)
	return cmd
}

// versionJSON is the documented, stable shape of `runbox version --json`.
type versionJSON struct {
	Client clientVersionJSON `json:"client"`
	Engine engineVersionJSON `json:"engine"`
}

type clientVersionJSON struct {
	Version  string `json:"version"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

type engineVersionJSON struct {
	Version    string `json:"version,omitempty"`
	APIVersion string `json:"api_version,omitempty"` // the version runbox speaks
	Platform   string `json:"platform,omitempty"`
	Host       string `json:"host,omitempty"`
	Context    string `json:"context,omitempty"`
	Local      bool   `json:"local"`
	Error      string `json:"error,omitempty"` // why the Engine could not be asked
}

// engineVersion asks the Engine in use about itself.
func engineVersion(ctx context.Context) engineVersionJSON {
	e, err := docker.New(engineOptions()...)
	if err != nil {
		return engineVersionJSON{Error: trimPrefixes(err.Error())}
	}
	defer e.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	info, err := e.Engine(ctx)
	v := engineVersionJSON{Host: info.Endpoint.Host, Context: info.Endpoint.Context, Local: info.Local,
		Version: info.ServerVersion, APIVersion: info.APIVersion}
	if info.OS != "" {
		v.Platform = info.OS + "/" + info.Arch
	}
	if err != nil {
		v.Error = trimPrefixes(err.Error())
	}
	return v
}

// cliVersion is the version set with -ldflags (make build), else the
// module version and VCS revision Go recorded in the binary.
func cliVersion() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if (v == "" || v == "(devel)") && rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		return rev + dirty
	}
	if v == "" {
		return "(devel)"
	}
	return v
}
