// Command selfagent is a library program with no runbox binary around: it
// calls runbox.Init first and so serves as its own agent in the sessions it
// opens. It prints what the session reports and one command's output.
//
//	selfagent IMAGE LABEL=VALUE
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
	runbox.Init()
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Println("FAIL:", err)
		os.Exit(1)
	}
}

func run(image, label string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := docker.New(docker.WithAgentRequired())
	if err != nil {
		return err
	}
	defer e.Close()
	k, v, _ := strings.Cut(label, "=")
	s, err := e.OpenSession(ctx, runbox.Spec{Image: image, Process: []string{"sleep", "1000000"}, Labels: map[string]string{k: v}})
	if err != nil {
		return err
	}
	defer s.Close(context.Background())
	var out bytes.Buffer
	res, err := s.Run(ctx, runbox.Command{Args: []string{"sh", "-c", "tr '\\0' ' ' < /proc/1/cmdline; echo; exit 4"}}, runbox.Streams{Stdout: &out})
	if err != nil {
		return err
	}
	fmt.Printf("agent %s, exit %d, pid 1: %s", s.AgentAuth(), res.ExitCode, out.String())
	return nil
}
