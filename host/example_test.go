//go:build unix

package host_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"strings"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/host"
)

func Example() {
	e, err := host.New()
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()

	// An argument vector is passed literally: no shell expands $HOME.
	out, code, err := e.RunArgv(ctx, "", []string{"echo", "hello", "$HOME"})
	fmt.Printf("%q %d %v\n", out, code, err)

	// A nonzero exit is a result, not an error.
	out, code, err = e.RunCommand(ctx, "", "echo failing >&2; exit 3")
	fmt.Printf("%q %d %v\n", out, code, err)

	// The runbox.Process interface.
	var stdout strings.Builder
	res, err := e.Run(ctx, runbox.Command{Args: []string{"tr", "a-z", "A-Z"}, Stdin: strings.NewReader("shout\n")},
		runbox.Streams{Stdout: &stdout})
	fmt.Printf("%q %+v %v\n", stdout.String(), res, err)

	// A streaming process.
	pp, err := e.PrepareProcess(ctx, host.ProcessOptions{Args: []string{"cat"}})
	if err != nil {
		log.Fatal(err)
	}
	p, err := pp.Start(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close(ctx)
	io.WriteString(p.Stdin(), "streamed\n")
	p.Stdin().Close()
	b, _ := io.ReadAll(p.Stdout())
	res, err = p.Wait(ctx)
	fmt.Printf("%q %+v %v %v\n", b, res, err, p.StreamMode())

	// Output:
	// "hello $HOME\n" 0 <nil>
	// "failing\n" 3 <nil>
	// "SHOUT\n" {ExitCode:0 Signal:} <nil>
	// "streamed\n" {ExitCode:0 Signal:} <nil> pipes
}
