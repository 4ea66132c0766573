// Command runbox runs commands in isolated places from the terminal.
//
// This first version carries the demo of the Docker backend; the full
// command set (images, sessions, exec, host commands) grows from here.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// exitFailure is the status for a runbox failure, as with docker run.
const exitFailure = 125

func main() {
	if err := newRoot().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "runbox:", err)
		os.Exit(exitFailure)
	}
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "runbox",
		Short:         "Run commands in isolated places and report truthfully what happened",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newVersion(), newDemo())
	return root
}

func newVersion() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the runbox version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), version)
		},
	}
}
