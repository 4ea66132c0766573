package host

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestGrantStoreAndLevels(t *testing.T) {
	var s grantStore
	g, err := s.issue([]string{"a"}, "/d", 1<<40)
	assert.NoError(t, err)
	assert.Len(t, g.String(), 64)
	assert.ErrorIs(t, s.consume(g, []string{"a"}, "/e"), ErrGrantMismatch)
	assert.NoError(t, s.consume(g, []string{"a"}, "/d"))
	assert.ErrorIs(t, s.consume(g, []string{"a"}, "/d"), ErrGrantUsed)
	assert.ErrorIs(t, s.consume(Grant{}, []string{"a"}, "/d"), ErrGrantInvalid)
}
