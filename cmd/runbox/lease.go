package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/runbox-dev/runbox/docker"
)

func newRenew() *cobra.Command {
	return &cobra.Command{
		Use:   "renew SESSION...",
		Short: "Renew the lease of sessions opened with --lease",
		Long: `renew starts the time to live of each session's lease again, as any
` + "`runbox exec`" + ` does. A session opened with ` + "`runbox open --lease TTL`" + ` ends, and
its container is removed, when nobody renewed it for TTL. Sessions opened
without --lease are persistent; renewing them changes nothing.`,
		Example: "  runbox renew $id",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return eachSession(cmd.Context(), args, func(s *docker.Session) error { return s.Renew(cmd.Context()) })
		},
	}
}

// eachSession finds every session of refs and calls fn on it, going on
// after a failure; the failures are joined, each naming its ref.
func eachSession(ctx context.Context, refs []string, fn func(*docker.Session) error) error {
	e, err := newEngine()
	if err != nil {
		return err
	}
	defer e.Close()
	var errs []error
	for _, ref := range refs {
		s, err := e.Session(ctx, ref)
		if err == nil {
			err = fn(s)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", ref, err))
		}
	}
	return errors.Join(errs...)
}
