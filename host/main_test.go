package host

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// helperEnv selects a helper mode when the test binary re-executes itself.
const helperEnv = "RUNBOX_HOST_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "no-init" {
		// A program that forgot runbox.Init: a policy must be refused.
		_, err := New(WithPolicy(Policy{}))
		fmt.Println(err)
		os.Exit(0)
	}
	// First: a re-executed sandbox helper runs here and never returns.
	Init()
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(runHelper(mode))
	}
	goleak.VerifyTestMain(m)
}

// runHelper is the body of a re-executed test binary.
//
// "parent-death": start `sleep 1000` as a host Process, print its pid and
// block; the test then kills this helper to check that the child does not
// outlive its parent.
func runHelper(mode string) int {
	switch mode {
	case "parent-death":
		e, err := New()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		defer e.Close()
		pp, err := e.PrepareProcess(context.Background(), ProcessOptions{Args: []string{"sleep", "1000"}})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		p, err := pp.Start(context.Background())
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		fmt.Printf("%d %s\n", p.PID(), p.LifetimeContainment())
		// Block until the test kills us.
		bufio.NewReader(os.Stdin).ReadString('\n')
		return 0
	}
	fmt.Fprintln(os.Stderr, "unknown helper mode", mode)
	return 2
}

// newExecutor returns an Executor that is closed when the test ends.
func newExecutor(t testing.TB, opts ...Option) *Executor {
	t.Helper()
	e, err := New(opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, e.Close(), "Executor.Close")
	})
	return e
}

// testCtx bounds a test's calls: a hang fails the test instead of the
// whole run. It is never used to assert how long something took.
func testCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
