package docker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/runbox-dev/runbox"
)

// A warm pool keeps sessions of one Spec created, started and connected to
// their agents, so that Open of a matching Spec only takes one (the
// Engine's create and start cost hundreds of milliseconds; taking a ready
// session costs none of them). The Engine can change one thing about a
// container after it was created, its name, so a Spec matches a pool's
// when everything but Name is equal; labels, environment, mounts, limits
// and the rest are fixed at create and must be the pool's.

// ErrPoolClosed reports a call on a closed Pool.
var ErrPoolClosed = errors.New("runbox/docker: pool closed")

// DefaultPoolMaxBackoff bounds the wait between failed refills when
// PoolOptions.MaxBackoff is zero.
const DefaultPoolMaxBackoff = 30 * time.Second

// poolMinBackoff is the wait after the first failed refill; it doubles
// with every failure in a row, up to the pool's MaxBackoff.
const poolMinBackoff = 100 * time.Millisecond

// poolCreateTimeout bounds one refill: an Engine that hangs must not hold
// the pool's Close for ever.
const poolCreateTimeout = 2 * time.Minute

// PoolOptions configures NewPool.
type PoolOptions struct {
	// Size is how many sessions the pool keeps ready; at least 1.
	Size int
	// MaxBackoff bounds the wait between refills that the Engine refused
	// (DefaultPoolMaxBackoff when zero). The wait starts at 100 ms and
	// doubles with every failure in a row.
	MaxBackoff time.Duration
}

// PoolStats is a snapshot of a pool's state.
type PoolStats struct {
	// Ready is the number of sessions waiting to be handed out.
	Ready int
	// Created counts the sessions the pool opened; HandedOut those Open
	// took from it.
	Created, HandedOut int
	// Failures counts refills that failed; LastErr is the error of the
	// last refill, nil once one succeeded.
	Failures int
	LastErr  error
}

// Pool keeps sessions of one Spec ready for the Executor's Open, which
// takes one whenever it is asked for a matching Spec (see NewPool). A
// pooled session is handed out at most once; until then it is the pool's,
// leased to this program like any session it opens, so a program that
// dies leaves nothing behind once the lease's time to live has passed.
// Its methods are safe for concurrent use.
type Pool struct {
	e          *Executor
	spec       runbox.Spec // checked, with the default network filled in
	size       int
	maxBackoff time.Duration

	mu        sync.Mutex
	ready     []*Session    // oldest first
	dead      []*Session    // found ended at hand-out; the refiller removes them
	changed   chan struct{} // closed and replaced whenever the state changes
	closed    bool
	created   int
	handedOut int
	failures  int
	lastErr   error

	wake      chan struct{} // a hand-out asks the refiller to look again
	stop      chan struct{} // closed by Close
	done      chan struct{} // closed when the refiller has returned
	closeOnce sync.Once
}

// NewPool starts keeping opts.Size sessions of spec ready. It returns at
// once; the pool fills in the background, one session at a time, and
// refills after each hand-out. While the Engine refuses (an image gone, a
// daemon down) it retries with exponential backoff, and Open of a
// matching Spec opens sessions as it would without a pool.
//
// spec has no Name (each Open may give one; the session is renamed when
// handed out). The Executor must lease its sessions (the default; not
// WithoutLease): a pool's unused sessions must go with its program. At
// most one pool per Spec. Executor.Close closes the Executor's pools.
func (e *Executor) NewPool(spec runbox.Spec, opts PoolOptions) (*Pool, error) {
	if opts.Size < 1 {
		return nil, fmt.Errorf("%w: pool size %d is below 1", runbox.ErrInvalidSpec, opts.Size)
	}
	if opts.MaxBackoff < 0 {
		return nil, fmt.Errorf("%w: negative pool backoff %v", runbox.ErrInvalidSpec, opts.MaxBackoff)
	}
	if opts.MaxBackoff == 0 {
		opts.MaxBackoff = DefaultPoolMaxBackoff
	}
	if spec.Name != "" {
		return nil, fmt.Errorf("%w: a pool's spec has no name (Open names the session it takes)", runbox.ErrInvalidSpec)
	}
	if e.lease <= 0 {
		return nil, fmt.Errorf("%w: a pool needs leased sessions (the Executor was made WithoutLease): a dead program would leave its unused sessions behind", runbox.ErrInvalidSpec)
	}
	spec, err := e.checkSpec(cloneSpec(spec))
	if err != nil {
		return nil, err
	}
	p := &Pool{
		e: e, spec: spec, size: opts.Size, maxBackoff: opts.MaxBackoff,
		changed: make(chan struct{}),
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	e.poolMu.Lock()
	defer e.poolMu.Unlock()
	for _, other := range e.pools {
		if sameSessionSpec(other.spec, spec) {
			return nil, fmt.Errorf("%w: the Executor already has a pool for this spec", runbox.ErrInvalidSpec)
		}
	}
	e.pools = append(e.pools, p)
	go p.refill()
	return p, nil
}

// Spec returns the Spec the pool's sessions are made of.
func (p *Pool) Spec() runbox.Spec { return cloneSpec(p.spec) }

// Stats reports the pool's state.
func (p *Pool) Stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return PoolStats{Ready: len(p.ready), Created: p.created, HandedOut: p.handedOut, Failures: p.failures, LastErr: p.lastErr}
}

// WaitReady waits until the pool holds its full size of ready sessions.
// When ctx ends first, the error wraps runbox.ErrCancelled and the last
// refill's error, if any; a closed pool returns ErrPoolClosed.
func (p *Pool) WaitReady(ctx context.Context) error {
	for {
		p.mu.Lock()
		n, closed, changed, last := len(p.ready), p.closed, p.changed, p.lastErr
		p.mu.Unlock()
		switch {
		case closed:
			return ErrPoolClosed
		case n >= p.size:
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("%w (the last refill failed: %w)", cancelled(ctx, "waiting for the pool"), last)
			}
			return cancelled(ctx, "waiting for the pool")
		}
	}
}

// Close stops refilling and removes every session the pool still holds;
// sessions already handed out are their holders' to close. It waits for a
// refill in progress to end. Close is idempotent; a Close that failed to
// remove a session may be retried.
func (p *Pool) Close(ctx context.Context) error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		p.notify()
		p.mu.Unlock()
		close(p.stop)
		p.e.poolMu.Lock()
		for i, q := range p.e.pools {
			if q == p {
				p.e.pools = append(p.e.pools[:i:i], p.e.pools[i+1:]...)
				break
			}
		}
		p.e.poolMu.Unlock()
	})
	<-p.done
	p.mu.Lock()
	left := append(p.ready, p.dead...)
	p.ready, p.dead = nil, nil
	p.mu.Unlock()
	errs := make([]error, len(left))
	var wg sync.WaitGroup
	for i, s := range left {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Close(ctx)
		}()
	}
	wg.Wait()
	var failed []*Session
	for i, err := range errs {
		if err != nil {
			failed = append(failed, left[i])
		}
	}
	if len(failed) > 0 {
		p.mu.Lock()
		p.dead = append(p.dead, failed...)
		p.mu.Unlock()
	}
	return errors.Join(errs...)
}

// notify wakes WaitReady callers; the caller holds p.mu.
func (p *Pool) notify() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// handOut takes a ready session, named name when name is not empty. It
// returns nil and no error when the pool has none ready. A session whose
// lifetime process ended while it waited is never handed out.
func (p *Pool) handOut(ctx context.Context, name string) (*Session, error) {
	for {
		p.mu.Lock()
		if p.closed || len(p.ready) == 0 {
			p.mu.Unlock()
			return nil, nil
		}
		s := p.ready[0]
		p.ready[0] = nil
		p.ready = p.ready[1:]
		p.notify()
		p.mu.Unlock()
		select {
		case p.wake <- struct{}{}:
		default: // a wake-up is already pending
		}
		if !s.idleAlive(ctx) {
			p.discard(s)
			continue
		}
		if name != "" {
			if _, err := p.e.cli.ContainerRename(ctx, s.id, client.ContainerRenameOptions{NewName: name}); err != nil {
				// Still unused: back to the front of the queue.
				p.putBack(s)
				if cerrdefs.IsConflict(err) {
					return nil, fmt.Errorf("%w: %w", runbox.ErrInvalidSpec, err)
				}
				if ctx.Err() != nil {
					return nil, cancelled(ctx, "naming a pooled session")
				}
				return nil, fmt.Errorf("runbox/docker: naming a pooled session: %w", p.e.engineErr(err))
			}
			s.spec.Name = name
		}
		p.mu.Lock()
		p.handedOut++
		p.mu.Unlock()
		return s, nil
	}
}

// putBack returns an unused session to the front of the queue, or closes
// it when the pool was closed meanwhile (Close may already have emptied
// the queue).
func (p *Pool) putBack(s *Session) {
	p.mu.Lock()
	if !p.closed {
		p.ready = append([]*Session{s}, p.ready...)
		p.notify()
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	_ = s.Close(context.Background())
}

// discard gives the refiller a session that ended while it waited, to
// remove; once the pool is closed, nobody else will.
func (p *Pool) discard(s *Session) {
	p.mu.Lock()
	if !p.closed {
		p.dead = append(p.dead, s)
		p.mu.Unlock()
		select {
		case p.wake <- struct{}{}:
		default:
		}
		return
	}
	p.mu.Unlock()
	_ = s.Close(context.Background())
}

// idleAlive reports whether a session that waited in a pool still runs:
// its agent connection is up (the agent is PID 1 and says when the
// session ends), or, without an agent, the Engine says it runs.
func (s *Session) idleAlive(ctx context.Context) bool {
	if s.plan != nil {
		s.agentMu.Lock()
		c := s.agent
		s.agentMu.Unlock()
		if c == nil {
			return false
		}
		select {
		case <-c.Done():
			return false
		default:
			return true
		}
	}
	return s.checkRunning(ctx) == nil
}

// refill keeps the pool full, one session at a time, until Close.
func (p *Pool) refill() {
	defer close(p.done)
	var backoff time.Duration
	for {
		p.mu.Lock()
		dead := p.dead
		p.dead = nil
		n := len(p.ready)
		p.mu.Unlock()
		for _, s := range dead {
			_ = s.Close(context.Background())
		}
		if n >= p.size {
			select {
			case <-p.wake:
				continue
			case <-p.stop:
				return
			}
		}
		select {
		case <-p.stop:
			return
		default:
		}
		// Not cancelled by Close: an Engine call cut short could leave a
		// container behind. Close waits for this one instead.
		ctx, cancel := context.WithTimeout(context.Background(), poolCreateTimeout)
		s, err := p.e.create(ctx, p.spec)
		cancel()
		p.mu.Lock()
		if err != nil {
			p.failures++
			p.lastErr = err
			p.notify()
			p.mu.Unlock()
			backoff = min(max(2*backoff, poolMinBackoff), p.maxBackoff)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-p.stop:
				t.Stop()
				return
			}
			continue
		}
		backoff = 0
		p.created++
		p.lastErr = nil
		p.ready = append(p.ready, s) // Close removes it if it came too late
		p.notify()
		p.mu.Unlock()
	}
}

// cloneSpec copies spec's lists and maps, so that a caller that changes
// its own afterwards changes neither the pool's sessions nor what they
// match.
func cloneSpec(s runbox.Spec) runbox.Spec {
	s.Process = slices.Clone(s.Process)
	s.Mounts = slices.Clone(s.Mounts)
	s.Env = slices.Clone(s.Env)
	s.Labels = maps.Clone(s.Labels)
	s.Security.CapDrop = slices.Clone(s.Security.CapDrop)
	s.Security.CapAdd = slices.Clone(s.Security.CapAdd)
	s.Security.Tmpfs = slices.Clone(s.Security.Tmpfs)
	return s
}

// poolFor returns the Executor's pool whose sessions match spec, if any.
func (e *Executor) poolFor(spec runbox.Spec) *Pool {
	e.poolMu.Lock()
	defer e.poolMu.Unlock()
	for _, p := range e.pools {
		if sameSessionSpec(p.spec, spec) {
			return p
		}
	}
	return nil
}

// closePools closes every pool of the Executor.
func (e *Executor) closePools() error {
	e.poolMu.Lock()
	pools := append([]*Pool(nil), e.pools...)
	e.poolMu.Unlock()
	var errs []error
	for _, p := range pools {
		errs = append(errs, p.Close(context.Background()))
	}
	return errors.Join(errs...)
}

// sameSessionSpec reports whether a and b make the same container but for
// its name: every other field equal, an empty list or map equal to none.
func sameSessionSpec(a, b runbox.Spec) bool {
	return reflect.DeepEqual(poolKey(a), poolKey(b))
}

func poolKey(s runbox.Spec) runbox.Spec {
	s.Name = ""
	if len(s.Mounts) == 0 {
		s.Mounts = nil
	}
	if len(s.Env) == 0 {
		s.Env = nil
	}
	if len(s.Labels) == 0 {
		s.Labels = nil
	}
	if len(s.Security.CapDrop) == 0 {
		s.Security.CapDrop = nil
	}
	if len(s.Security.CapAdd) == 0 {
		s.Security.CapAdd = nil
	}
	if len(s.Security.Tmpfs) == 0 {
		s.Security.Tmpfs = nil
	}
	return s
}
