package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSplitCopyArg(t *testing.T) {
	for arg, want := range map[string][2]string{
		"abc:/work":     {"abc", "/work"},
		"work:rel":      {"work", "rel"},
		"./a:b":         {"", "./a:b"},
		"/tmp/x:y":      {"", "/tmp/x:y"},
		"-":             {"", "-"},
		"plain":         {"", "plain"},
		":nosession":    {"", ":nosession"},
		"abc:/a:b/c.tx": {"abc", "/a:b/c.tx"},
	} {
		s, p := splitCopyArg(arg)
		assert.Equal(t, want, [2]string{s, p}, arg)
	}
}
