package docker

import (
	"context"
	"fmt"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/runbox-dev/runbox"
)

// A session with an agent is leased to the program that opened it: the
// agent ends the session when no caller renewed the lease for its time to
// live, and the Engine then removes the container (it is created with
// AutoRemove). The opening Session renews it in the background, so the
// session lives exactly as long as its program does, give or take the time
// to live; no sidecar container is needed. Every connection to the agent
// (a reattached Session, `runbox exec`) renews it once as well.

// DefaultLease is the time to live of a session's lease.
const DefaultLease = 15 * time.Second

// LabelLease records a session's lease: its time to live ("15s"), or
// "persistent".
const LabelLease = "dev.runbox.lease"

// minLease keeps heartbeats (a third of the time to live) sensible.
const minLease = 300 * time.Millisecond

// WithLease sets the time to live of the sessions' leases (see
// DefaultLease): a session whose program stopped renewing it ends within
// ttl and is removed by the Engine.
func WithLease(ttl time.Duration) Option {
	return func(c *config) error {
		if ttl < minLease {
			return fmt.Errorf("runbox/docker: WithLease: %v is below %v", ttl, minLease)
		}
		c.lease = ttl
		return nil
	}
}

// WithoutLease opens persistent sessions: they outlive their program until
// Close or `runbox prune`, as `docker run -d` containers do.
func WithoutLease() Option {
	return func(c *config) error {
		c.lease = 0
		return nil
	}
}

// leaseLabel is LabelLease's value for ttl.
func leaseLabel(ttl time.Duration) string {
	if ttl <= 0 {
		return "persistent"
	}
	return ttl.String()
}

// heartbeat renews the session's lease every third of its time to live
// until stop is closed. A lost connection is made again, so that a
// passing network failure costs no session.
func (s *Session) heartbeat(ttl time.Duration, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), ttl/3)
		if c, err := s.agentConn(ctx); err == nil {
			_ = c.Renew()
		}
		cancel()
	}
}

// startHeartbeat begins renewing the lease of a session this program
// opened.
func (s *Session) startHeartbeat() {
	if s.plan == nil || s.plan.lease <= 0 {
		return
	}
	s.hbStop, s.hbDone = make(chan struct{}), make(chan struct{})
	go s.heartbeat(s.plan.lease, s.hbStop, s.hbDone)
}

// stopHeartbeat stops renewing and waits until the renewer has gone.
func (s *Session) stopHeartbeat() {
	s.hbOnce.Do(func() {
		if s.hbStop != nil {
			close(s.hbStop)
			<-s.hbDone
		}
	})
}

// Renew renews the session's lease (connecting to its agent does too); a
// persistent or plain-exec session has no lease, and Renew does nothing.
func (s *Session) Renew(ctx context.Context) error {
	if s.plan == nil {
		return nil
	}
	c, err := s.agentConn(ctx)
	if err != nil {
		return err
	}
	if err := c.Renew(); err != nil {
		return fmt.Errorf("%w: renewing the lease: %w", runbox.ErrTransport, err)
	}
	return nil
}

// Detach hands the session over: it stops being leased to this program and
// becomes persistent, outliving it until someone closes it (by ID, with
// Executor.Session or `runbox close`, or with `runbox prune --all`). The
// Session value stays usable.
func (s *Session) Detach(ctx context.Context) error {
	if s.plan == nil || s.plan.lease <= 0 {
		return nil // plain exec and persistent sessions are not leased
	}
	c, err := s.agentConn(ctx)
	if err != nil {
		return err
	}
	if err := c.Release(); err != nil {
		return fmt.Errorf("%w: releasing the lease: %w", runbox.ErrTransport, err)
	}
	s.stopHeartbeat()
	return nil
}

// waitRemoved waits until the Engine has removed the container.
func (s *Session) waitRemoved(ctx context.Context) error {
	wait := s.e.cli.ContainerWait(ctx, s.id, client.ContainerWaitOptions{Condition: container.WaitConditionRemoved})
	select {
	case <-wait.Result:
		return nil
	case err := <-wait.Error:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
