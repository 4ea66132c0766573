package runbox_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/host"
)

// ExampleCollect runs untrusted commands through the managed call. Any
// backend works: a host executor (here, unconfined), a Docker session, or
// a Docker executor with a default Spec. A completed command is an
// Output, nonzero exit included; everything else is a *CommandError.
func ExampleCollect() {
	ctx := context.Background()
	h, err := host.New()
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()

	// The zero options: 10 s, 1 MiB per stream. Output comes back
	// sanitised; out.RawStdout keeps the bytes.
	out, err := runbox.Collect(ctx, h, runbox.ShellCommand(`printf '\033[1mhello\033[0m\r\n'; exit 3`), runbox.CollectOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%q, exit code %d\n", out.Stdout, out.ExitCode)

	// A command that never stops writing is stopped at the limit.
	_, err = runbox.Collect(ctx, h, runbox.ShellCommand("while :; do echo y; done"), runbox.CollectOptions{StreamLimit: 1024})
	var ce *runbox.CommandError
	if errors.As(err, &ce) {
		fmt.Println(ce.Kind, ce.Stream, len(ce.RawStdout), errors.Is(err, runbox.ErrOutputLimit))
	}

	// One that never ends is stopped at the timeout.
	_, err = runbox.Collect(ctx, h, runbox.Command{Args: []string{"sleep", "60"}}, runbox.CollectOptions{Timeout: 100 * time.Millisecond})
	if errors.As(err, &ce) {
		fmt.Println(ce.Kind, ce.Timeout(), errors.Is(err, runbox.ErrCancelled))
	}

	// No sandbox at all is a failure of its own.
	var none runbox.Process
	_, err = runbox.Collect(ctx, none, runbox.Command{Args: []string{"true"}}, runbox.CollectOptions{})
	fmt.Println(errors.Is(err, runbox.ErrUnavailable))
	// Output:
	// "hello\n", exit code 3
	// output limit stdout 1024 true
	// timeout true true
	// true
}
