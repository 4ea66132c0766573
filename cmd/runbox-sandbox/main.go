// Command runbox-sandbox is a small stage-2 helper for the host backend's
// Linux sandbox. A program that confines commands can name it with
// host.WithHelper instead of re-executing itself: being small, it starts
// faster than most programs. It is never run by hand.
package main

import (
	"fmt"
	"os"

	"github.com/runbox-dev/runbox"
	_ "github.com/runbox-dev/runbox/host" // registers the sandbox helper
)

func main() {
	runbox.Init() // runs the helper and exits when started by the backend
	fmt.Fprintln(os.Stderr, "runbox-sandbox: this program is started by runbox's host backend (see host.WithHelper)")
	os.Exit(2)
}
