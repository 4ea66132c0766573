// Command nonroot drives a session through the library the way a program
// of a user in the docker group does; the integration tests run it as such
// a user. It prints one line per check and exits 1 when one fails.
//
//	nonroot IMAGE LABEL=VALUE
package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/docker"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: nonroot IMAGE LABEL=VALUE")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Println("FAIL:", err)
		os.Exit(1)
	}
}

func run(image, label string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	e, err := docker.New(docker.WithAgent(os.Getenv("RUNBOX_AGENT")), docker.WithAgentRequired())
	if err != nil {
		return err
	}
	defer e.Close()
	k, v, _ := strings.Cut(label, "=")
	s, err := e.OpenSession(ctx, runbox.Spec{Image: image, Process: []string{"sleep", "1000000"}, Labels: map[string]string{k: v}})
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer s.Close(context.Background())
	fmt.Printf("uid %d, agent auth %s (%s)\n", os.Getuid(), s.AgentAuth(), self)
	if s.AgentAuth() != docker.AgentAuthKernel {
		return fmt.Errorf("agent auth %s, want kernel", s.AgentAuth())
	}
	var out bytes.Buffer
	res, err := s.Run(ctx, runbox.Command{Args: []string{"sh", "-c", "echo $SECRET; exit 3"}, Env: []string{"SECRET=s3cr3t"}},
		runbox.Streams{Stdout: &out})
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	if res.ExitCode != 3 || out.String() != "s3cr3t\n" {
		return fmt.Errorf("run: %+v %q", res, out.String())
	}
	fmt.Println("run: exit 3, output as sent")
	// Another process of the same user finds the session again.
	e2, err := docker.New(docker.WithAgent(os.Getenv("RUNBOX_AGENT")), docker.WithAgentRequired())
	if err != nil {
		return err
	}
	defer e2.Close()
	s2, err := e2.Session(ctx, s.ID())
	if err != nil {
		return fmt.Errorf("reattach: %w", err)
	}
	res, err = s2.Run(ctx, runbox.Command{Args: []string{"true"}}, runbox.Streams{})
	if err != nil || res.ExitCode != 0 {
		return fmt.Errorf("reattached run: %+v %v", res, err)
	}
	fmt.Println("reattach: ok")
	return s.Close(context.Background())
}
