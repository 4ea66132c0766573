package docker

import (
	"os"

	"github.com/runbox-dev/runbox/internal/agent"
	"github.com/runbox-dev/runbox/internal/reexec"
)

// A program that links this package and calls runbox.Init first can be
// its own in-session agent: the session starts it as agentInPath, where
// runbox.Init hands it to the agent before the program's own main runs.
// So a static Linux program needs no separate runbox binary to get fast,
// killable sessions.
func init() {
	reexec.RegisterPath(agentInPath, func() int {
		if len(os.Args) < 2 || os.Args[1] != "agent" {
			return 2
		}
		return agent.Main(os.Args[2:])
	})
}

// selfAgent returns this program's executable when it can serve as the
// agent: it called runbox.Init, so the agent's start reaches agent.Main.
// Whether it is a static executable for the session's architecture is
// checked with every other candidate.
func selfAgent() string {
	if !reexec.Initialized() {
		return ""
	}
	p, err := os.Executable()
	if err != nil {
		return ""
	}
	return p
}
