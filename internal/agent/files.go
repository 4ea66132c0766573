package agent

import (
	"io/fs"
	"time"
)

// The exit statuses of `agent copy-in` and `agent copy-out`, which the
// caller maps to its errors. FilesUseEngine means that nothing was done
// and the caller should use the Engine's archive endpoint instead (the
// helper lacks root's file privileges in this session, or does not know
// the mode).
const (
	FilesOK        = 0
	FilesFailed    = 1
	FilesUseEngine = 2
	FilesNotFound  = 3
	FilesInvalid   = 4
)

// FileStat is the first line copy-out writes, before the tar stream: the
// copied path as the Engine's archive endpoint would describe it.
type FileStat struct {
	Name       string      `json:"name"`
	Size       int64       `json:"size"`
	Mode       fs.FileMode `json:"mode"`
	ModTime    time.Time   `json:"mtime"`
	LinkTarget string      `json:"linkTarget,omitempty"`
}
