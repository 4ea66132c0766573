package integration

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
)

// TestEngineRefusalsNameTheEngine: whatever the Engine refuses, the error
// says which Engine refused, for users who drive several.
func TestEngineRefusalsNameTheEngine(t *testing.T) {
	e := newExecutor(t)
	where := e.Endpoint().String()
	require.NotEmpty(t, where)

	spec := baseSpec()
	spec.Name = "runbox-dup-" + runID
	open(t, e, spec)
	_, err := e.Open(context.Background(), spec)
	require.ErrorIs(t, err, runbox.ErrInvalidSpec, "the name is taken")
	assert.ErrorContains(t, err, where)

	s := open(t, e, baseSpec())
	_, err = s.Snapshot(context.Background(), runbox.SnapshotOptions{Reference: "UPPER/case:" + runID})
	require.Error(t, err, "a reference the Engine refuses")
	assert.ErrorContains(t, err, where, "a refused snapshot")
	// and the refused snapshot left no untagged image: the run's leak
	// check (TestMain) fails otherwise.
}
