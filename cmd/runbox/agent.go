package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/runbox-dev/runbox/docker"
	"github.com/runbox-dev/runbox/internal/agent"
)

// newAgent is the in-session agent, hidden: runbox copies or binds its own
// binary into sessions and runs it as PID 1 there.
func newAgent() *cobra.Command {
	return &cobra.Command{
		Use:                "agent",
		Short:              "The in-session agent (internal)",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(_ *cobra.Command, args []string) error {
			if code := agent.Main(args); code != 0 {
				return &exitCode{code: code}
			}
			return nil
		},
	}
}

// newEngine connects to the Engine, offering this very binary as the
// in-session agent; the library checks that it is a static executable for
// the session's architecture and falls back to plain exec otherwise.
func newEngine(opts ...docker.Option) (*docker.Executor, error) {
	opts = append(engineOptions(), opts...)
	if self, err := os.Executable(); err == nil && os.Getenv(docker.EnvAgent) == "" {
		opts = append([]docker.Option{docker.WithAgent(self)}, opts...)
	}
	return docker.New(opts...)
}
