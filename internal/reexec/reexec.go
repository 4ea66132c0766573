// Package reexec is the registry of the helpers that runbox's backends run
// by re-executing a program: the host sandbox's stage 2 (chosen by an
// environment variable) and a Docker session's agent (chosen by the
// program name the session starts it under). runbox.Init dispatches to
// them; the backends register them and ask whether Init ran. It holds no
// helper itself.
package reexec

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
)

// Env is the environment variable that marks a process as a re-executed
// helper; its value names the helper.
const Env = "RUNBOX_HELPER"

var (
	mu          sync.Mutex
	byName      = map[string]func() int{}
	byPath      = map[string]func() int{}
	initialized atomic.Bool
)

// RegisterPath makes main the helper of a process started under the
// absolute program name path (its argv[0]), such as a Docker session's
// agent, which the Engine starts from a reserved path with no say over its
// environment. Backends call it from an init function.
func RegisterPath(path string, main func() int) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := byPath[path]; dup || !strings.HasPrefix(path, "/") {
		panic(fmt.Sprintf("reexec.RegisterPath(%q): invalid or duplicate path", path))
	}
	byPath[path] = main
}

// Register makes main the helper called name, run in a process
// re-executed with Env=name. Backends call it from an init function; name
// must be unique.
func Register(name string, main func() int) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := byName[name]; dup || name == "" || strings.ContainsAny(name, "=\x00") {
		panic(fmt.Sprintf("reexec.Register(%q): invalid or duplicate name", name))
	}
	byName[name] = main
}

// Dispatch runs the helper this process was started as, and exits with its
// status; in any other process it records that the program is ready (see
// Initialized) and returns.
func Dispatch() {
	mu.Lock()
	main := byPath[os.Args[0]]
	mu.Unlock()
	if main != nil {
		os.Exit(main())
	}
	name, ok := os.LookupEnv(Env)
	if !ok {
		initialized.Store(true)
		return
	}
	mu.Lock()
	main = byName[name]
	mu.Unlock()
	if main == nil {
		fmt.Fprintf(os.Stderr, "runbox: unknown helper %q (is its backend linked into this program?)\n", name)
		os.Exit(125)
	}
	os.Exit(main())
}

// Initialized reports whether Dispatch has returned in this process: the
// program called runbox.Init first, so re-executing it reaches the helpers
// before the program's own main.
func Initialized() bool { return initialized.Load() }
