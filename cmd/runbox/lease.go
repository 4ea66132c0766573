package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
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
			e, err := newEngine()
			if err != nil {
				return err
			}
			defer e.Close()
			var errs []error
			for _, ref := range args {
				s, err := e.Session(cmd.Context(), ref)
				if err == nil {
					err = s.Renew(cmd.Context())
				}
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", ref, err))
				}
			}
			return errors.Join(errs...)
		},
	}
}
