package docker

import (
	"context"
	"sync"
)

// callLock serializes a session's calls (Run, Snapshot, and a streaming
// process for its whole life). Unlike a sync.Mutex, waiting for it honours
// the caller's context, and it may be released by another goroutine than
// the one that took it (a streaming process's pump). Its zero value is
// unlocked.
type callLock struct {
	once sync.Once
	ch   chan struct{} // holds a token while locked
}

func (l *callLock) init() { l.once.Do(func() { l.ch = make(chan struct{}, 1) }) }

// lock waits for the lock until ctx ends; then it returns an error wrapping
// runbox.ErrCancelled and the lock is not held.
func (l *callLock) lock(ctx context.Context) error {
	l.init()
	select {
	case l.ch <- struct{}{}:
		return nil
	default:
	}
	select {
	case l.ch <- struct{}{}:
		return nil
	case <-ctx.Done():
		return cancelled(ctx, "waiting for the session's previous call to end")
	}
}

// unlock releases the lock, which must be held.
func (l *callLock) unlock() {
	l.init()
	select {
	case <-l.ch:
	default:
		panic("runbox/docker: unlock of an unlocked session")
	}
}
