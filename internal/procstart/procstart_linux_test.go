package procstart

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStartTicks(t *testing.T) {
	stat := "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10 18446744073709551615"
	ticks, err := startTicks([]byte(stat))
	require.NoError(t, err)
	assert.Equal(t, uint64(987654), ticks)
	_, err = startTicks([]byte("4242 (x) S 1"))
	assert.Error(t, err)
}
