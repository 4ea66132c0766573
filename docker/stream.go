package docker

import (
	"io"
	"sync"
)

// streamBuffer is one output stream of a streaming process: the pump
// writes into it without ever waiting for the other stream's reader, and
// the caller reads from it. It holds up to max bytes; a write that does not
// fit fails, and the writer waits on space.
type streamBuffer struct {
	mu      sync.Mutex
	buf     []byte
	off     int // buf[off:] is unread
	max     int
	ended   bool  // finish was called: the end follows the data
	err     error // the end's error; nil is io.EOF
	rclosed bool  // closeRead was called: data is dropped, reads fail

	readable chan struct{} // 1-buffered: data arrived
	space    chan struct{} // 1-buffered: a read made room
	gone     chan struct{} // closed at the end or closeRead: wakes every reader
}

func newStreamBuffer(max int) *streamBuffer {
	return &streamBuffer{max: max, readable: make(chan struct{}, 1), space: make(chan struct{}, 1), gone: make(chan struct{})}
}

func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// write appends p unless the window is full; it reports false then. Data
// for a closed reader, or after the end, is dropped (reported true). A
// write larger than the window is accepted into an empty buffer.
func (b *streamBuffer) write(p []byte) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rclosed || b.ended || len(p) == 0 {
		return true
	}
	n := len(b.buf) - b.off
	if n > 0 && n+len(p) > b.max {
		return false
	}
	if b.off > 0 && len(b.buf)+len(p) > cap(b.buf) {
		// Reuse the space already read before growing.
		copy(b.buf, b.buf[b.off:])
		b.buf, b.off = b.buf[:n], 0
	}
	b.buf = append(b.buf, p...)
	notify(b.readable)
	return true
}

// Read reads what has arrived, waiting for more until the end.
func (b *streamBuffer) Read(p []byte) (int, error) {
	for {
		b.mu.Lock()
		if b.rclosed {
			b.mu.Unlock()
			return 0, io.ErrClosedPipe
		}
		if b.off < len(b.buf) {
			if len(p) == 0 {
				b.mu.Unlock()
				return 0, nil
			}
			n := copy(p, b.buf[b.off:])
			b.off += n
			if b.off == len(b.buf) {
				b.buf, b.off = b.buf[:0], 0
			} else {
				notify(b.readable) // for another reader
			}
			notify(b.space)
			b.mu.Unlock()
			return n, nil
		}
		if b.ended {
			err := b.err
			b.mu.Unlock()
			if err == nil {
				err = io.EOF
			}
			return 0, err
		}
		b.mu.Unlock()
		select {
		case <-b.readable:
		case <-b.gone:
		}
	}
}

// finish marks the end: readers get what is buffered, then err (io.EOF
// when nil).
func (b *streamBuffer) finish(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ended || b.rclosed {
		return
	}
	b.ended, b.err = true, err
	close(b.gone)
}

// closeRead drops what is buffered; reads fail from now on, and a writer
// waiting for space is released.
func (b *streamBuffer) closeRead() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rclosed {
		return
	}
	b.rclosed = true
	b.buf, b.off = nil, 0
	if !b.ended {
		close(b.gone)
	}
	notify(b.space)
}
