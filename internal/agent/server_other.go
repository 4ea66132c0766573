//go:build !linux

package agent

import (
	"fmt"
	"os"
)

// Main reports that the agent runs only inside Linux sessions.
func Main(args []string) int {
	fmt.Fprintln(os.Stderr, "runbox agent: the agent runs only on Linux")
	return 2
}
