package runbox_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/moby/moby/client"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/docker"
	"github.com/runbox-dev/runbox/internal/testimage"
)

// Example opens a Docker session, runs commands in it and closes it. A
// nonzero exit is a Result; a program that cannot start is an error.
//
// It needs a Docker Engine, so it is compiled but not run by go test (the
// integration suite runs the same calls). It prints:
//
//	hello
//	exit code: 3
//	launch failure: true
func Example() {
	ctx := context.Background()
	e, err := docker.New() // honours DOCKER_HOST
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close()

	// A local image made from a static busybox; any local image works.
	const ref = "runbox-example/busybox:latest"
	if _, err := testimage.Import(ctx, e.Client(), ref, nil); err != nil {
		log.Fatal(err)
	}
	defer e.Client().ImageRemove(ctx, ref, client.ImageRemoveOptions{Force: true})

	s, err := e.Open(ctx, runbox.Spec{
		Image:   ref,
		Process: []string{"sleep", "1000000"}, // the session lives as long as this
		Init:    true,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close(ctx)

	res, err := s.Run(ctx, runbox.ShellCommand("echo hello; exit 3"), runbox.Streams{Stdout: os.Stdout})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("exit code:", res.ExitCode)

	_, err = s.Run(ctx, runbox.Command{Args: []string{"/no/such/program"}}, runbox.Streams{})
	fmt.Println("launch failure:", errors.Is(err, runbox.ErrStart))
}
