// Command owner opens a leased session and holds it, so that the lease
// tests can kill it (SIGKILL) while it opens the session, runs a command
// in it, or idles, and watch the session go.
//
//	owner IMAGE TTL LABEL=VALUE MODE
//
// MODE is "run" (run `sleep` commands one after another), "idle", or
// "pool" (keep a warm pool of two sessions of the same Spec, take one of
// them once the pool is full, and idle). It prints "opened ID" once the
// session is open. With RUNBOX_OWNER_PLAIN set the session has no agent.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/docker"
)

func main() {
	if len(os.Args) != 5 {
		fmt.Fprintln(os.Stderr, "usage: owner IMAGE TTL LABEL=VALUE run|idle|pool")
		os.Exit(2)
	}
	ttl, err := time.ParseDuration(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	k, v, _ := strings.Cut(os.Args[3], "=")
	opts := []docker.Option{docker.WithAgent(os.Getenv(docker.EnvAgent)), docker.WithAgentRequired(), docker.WithLease(ttl)}
	if os.Getenv("RUNBOX_OWNER_PLAIN") != "" {
		opts = []docker.Option{docker.WithoutAgent(), docker.WithLease(ttl)}
	}
	e, err := docker.New(opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx := context.Background()
	spec := runbox.Spec{Image: os.Args[1], Process: []string{"sleep", "1000000"}, Labels: map[string]string{k: v}}
	if os.Args[4] == "pool" {
		p, err := e.NewPool(spec, docker.PoolOptions{Size: 2})
		if err == nil {
			err = p.WaitReady(ctx)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	s, err := e.Open(ctx, spec)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("opened", s.ID())
	for os.Args[4] == "run" {
		_, _ = s.Run(ctx, runbox.Command{Args: []string{"sleep", "1000"}}, runbox.Streams{})
	}
	select {}
}
