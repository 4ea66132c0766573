package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/runbox-dev/runbox/docker"
)

func newLogs() *cobra.Command {
	var opts docker.LogsOptions
	cmd := &cobra.Command{
		Use:   "logs [flags] SESSION",
		Short: "Print what a session's lifetime process wrote, or why it ended",
		Long: `logs copies the output of SESSION's lifetime process (kept by the Engine) to
stdout and stderr as it was written; commands run with exec are not in it.
When the lifetime process has ended, a last line on stderr says how: its
exit code, an out-of-memory kill, or the Engine's reason for not running
it. With -f, logs keeps copying until the process ends or Ctrl-C.`,
		Example: `  runbox logs $id
  runbox logs -f --tail 20 work`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, done, err := attach(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			defer done()
			opts.Stdout, opts.Stderr = os.Stdout, os.Stderr
			res, err := s.Logs(cmd.Context(), opts)
			if err != nil {
				return err
			}
			if !res.Running {
				msg := fmt.Sprintf("runbox: the lifetime process exited with code %d", res.ExitCode)
				if res.OOMKilled {
					msg += " (killed for lack of memory)"
				}
				if res.Error != "" {
					msg += ": " + res.Error
				}
				fmt.Fprintln(os.Stderr, msg)
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&opts.Follow, "follow", "f", false, "keep copying until the lifetime process ends")
	cmd.Flags().IntVarP(&opts.Tail, "tail", "n", 0, "only the last N lines of each stream")
	return cmd
}
