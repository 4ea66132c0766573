//go:build !linux

package agent

import (
	"fmt"
	"os"
)

// DefaultSocket is where the agent listens inside a session.
const DefaultSocket = "/dev/.runbox/run/agent.sock"

// Main reports that the agent runs only inside Linux sessions.
func Main(args []string) int {
	fmt.Fprintln(os.Stderr, "runbox agent: the agent runs only on Linux")
	return 2
}
