package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/docker"
)

// splitCopyArg splits "SESSION:PATH"; a path of this machine (including
// one that starts with "/" or ".", or a Windows drive letter, and so
// cannot name a session) has no session.
func splitCopyArg(arg string) (session, p string) {
	if arg == "-" || strings.HasPrefix(arg, "/") || strings.HasPrefix(arg, ".") || filepath.IsAbs(arg) {
		return "", arg
	}
	if i := strings.Index(arg, ":"); i > 0 {
		return arg[:i], arg[i+1:]
	}
	return "", arg
}

func newCp() *cobra.Command {
	var archive bool
	cmd := &cobra.Command{
		Use:   "cp [flags] SRC SESSION:DEST | SESSION:SRC DEST",
		Short: "Copy files and directories between this machine and a session",
		Long: `cp copies a file or directory tree into or out of SESSION, as docker cp does:
modes, modification times, symbolic links (copied as links) and empty
directories are kept. An existing directory DEST receives SRC under its own
name; otherwise SRC is copied to DEST itself. SRC ending in "/." copies
what the directory holds. "-" as SRC reads a tar archive from stdin and
extracts it into the directory DEST; "-" as DEST writes a tar archive to
stdout.

Copying out never writes outside DEST: an archive entry that would (an
absolute name, "..", a path through a symbolic link) fails the copy, files
are replaced rather than written through, device nodes and FIFOs are
skipped, and set-user-ID bits are dropped. Copied files belong to you
unless -a is given; copied in, they belong to root unless -a is given.`,
		Example: `  runbox cp ./task $id:/work
  runbox cp $id:/work/results ./results
  tar -C src -c . | runbox cp - $id:/work
  runbox cp $id:/var/log - | tar -t`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			srcSession, src := splitCopyArg(args[0])
			dstSession, dst := splitCopyArg(args[1])
			switch {
			case srcSession != "" && dstSession != "":
				return usageError(fmt.Errorf("%w: copying between two sessions is not supported", runbox.ErrInvalidCommand))
			case srcSession == "" && dstSession == "":
				return usageError(fmt.Errorf("%w: one of SRC and DEST must be SESSION:PATH", runbox.ErrInvalidCommand))
			case src == "" || dst == "":
				return usageError(fmt.Errorf("%w: empty path", runbox.ErrInvalidCommand))
			}
			ref := srcSession + dstSession
			s, done, err := attach(cmd.Context(), ref)
			if err != nil {
				return err
			}
			defer done()
			if dstSession != "" {
				opts := docker.CopyInOptions{Dest: dst, PreserveOwnership: archive}
				if src == "-" {
					opts.Archive = os.Stdin
				} else {
					opts.Source = src
				}
				_, err = s.CopyIn(cmd.Context(), opts)
				return err
			}
			opts := docker.CopyOutOptions{Source: src, PreserveOwnership: archive}
			if dst == "-" {
				opts.Archive = cmd.OutOrStdout()
			} else {
				opts.Dest = dst
			}
			res, err := s.CopyOut(cmd.Context(), opts)
			if err != nil {
				return err
			}
			for _, name := range res.Skipped {
				fmt.Fprintf(cmd.ErrOrStderr(), "runbox: cp: skipped %s (device node, FIFO or other special file)\n", name)
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&archive, "archive", "a", false, "keep numeric owners (copying out needs privilege)")
	return cmd
}
