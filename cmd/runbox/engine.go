package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/runbox-dev/runbox/docker"
)

// engineFlags choose the Engine as docker's global flags do; unset, the
// environment and the docker config decide (see docker.New).
var engineFlags struct {
	host    string
	context string
}

// addEngineFlags registers --host/-H and --context/-c on every command.
func addEngineFlags(root *cobra.Command) {
	fs := root.PersistentFlags()
	fs.StringVarP(&engineFlags.host, "host", "H", "", "Engine to connect to (unix://, tcp://, ssh://user@host[:port]); overrides DOCKER_HOST")
	fs.StringVarP(&engineFlags.context, "context", "c", "", "docker context to use; overrides DOCKER_HOST, DOCKER_CONTEXT and `docker context use`")
}

// engineOptions turns the flags into library options.
func engineOptions() []docker.Option {
	var opts []docker.Option
	if engineFlags.host != "" {
		opts = append(opts, docker.WithHost(engineFlags.host))
	}
	if engineFlags.context != "" {
		opts = append(opts, docker.WithContext(engineFlags.context))
	}
	return opts
}

// printEngine reports the Engine in use: where it is, how it was chosen,
// and what it says about itself. An unreachable Engine is reported, not
// an error: the version of runbox is still worth printing.
func printEngine(ctx context.Context, w io.Writer) {
	e, err := docker.New(engineOptions()...)
	if err != nil {
		fmt.Fprintf(w, "Engine:\n Error:       %v\n", err)
		return
	}
	defer e.Close()
	ep := e.Endpoint()
	fmt.Fprintf(w, "Engine:\n Endpoint:    %s\n Context:     %s (from %s)\n", ep.Host, ep.Context, ep.Source)
	switch {
	case ep.SkipTLSVerify:
		fmt.Fprintln(w, " TLS:         yes, without verifying the Engine's certificate")
	case ep.TLS:
		fmt.Fprintln(w, " TLS:         yes, verified")
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	info, err := e.Engine(ctx)
	if err != nil {
		fmt.Fprintf(w, " Error:       %v\n", err)
		return
	}
	where := "remote (sessions get a copy of the agent; mount sources are the Engine host's)"
	if info.Local {
		where = "local (shares this machine's filesystem)"
	}
	fmt.Fprintf(w, " Server:      %s (%s/%s)\n API version: %s\n Reach:       %s\n", info.ServerVersion, info.OS, info.Arch, info.APIVersion, where)
}
