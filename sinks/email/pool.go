package email

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"

	mail "github.com/wneessen/go-mail"
	"github.com/wneessen/go-mail/smtp"
)

// pool keeps at most max SMTP connections, open ones reused for the next
// message.
type pool struct {
	client *mail.Client // settings: TLS, AUTH, HELO; one connection per session below
	slots  chan struct{}
	idleTO time.Duration
	perCon int

	mu   sync.Mutex
	idle []*session
}

// session is one open SMTP connection.
type session struct {
	c        *smtp.Client
	raw      *conn
	sent     int
	lastUsed time.Time
}

// errPoolBusy: every connection stayed busy until the call's deadline.
var errPoolBusy = errors.New("email: no SMTP connection free before the call's deadline")

// get takes a connection: an idle one (reused true) or a new one. The
// call's ctx bounds all I/O on it until put.
func (p *pool) get(ctx context.Context) (s *session, reused bool, err error) {
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, false, errPoolBusy
	}
	now := time.Now()
	p.mu.Lock()
	for len(p.idle) > 0 {
		s = p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		if now.Sub(s.lastUsed) < p.idleTO {
			break
		}
		go s.close(true) // idle too long: the server may have dropped it
		s = nil
	}
	p.mu.Unlock()
	if s != nil {
		s.raw.bound(ctx)
		return s, true, nil
	}
	h := &holder{}
	c, err := p.client.DialToSMTPClientWithContext(context.WithValue(ctx, holderKey{}, h))
	if err != nil {
		if h.c != nil {
			h.c.Close()
		}
		<-p.slots
		return nil, false, err
	}
	s = &session{c: c, raw: h.c}
	s.raw.bound(ctx)
	return s, false, nil
}

// put gives a connection back: kept open for the next message when keep
// and it has not sent its share, else closed.
func (p *pool) put(s *session, keep bool) {
	defer func() { <-p.slots }()
	if !s.raw.unbound() || !keep {
		// Mid-transaction, perhaps inside DATA: no QUIT (it would be
		// message text); closing without the end-of-data mark makes the
		// server drop any partial message.
		s.close(false)
		return
	}
	if s.sent >= p.perCon {
		go s.close(true)
		return
	}
	s.lastUsed = time.Now()
	p.mu.Lock()
	p.idle = append(p.idle, s)
	p.mu.Unlock()
}

// close closes every idle connection.
func (p *pool) close() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, s := range idle {
		s.close(true)
	}
}

// close closes the connection, after a QUIT (bounded by a second) when
// graceful: only between transactions.
func (s *session) close(graceful bool) {
	if graceful {
		s.raw.limitTo(time.Now().Add(time.Second))
		_ = s.c.Quit()
	}
	_ = s.raw.Close()
}

// holder passes the connection the dialer made back to get.
type holder struct{ c *conn }

type holderKey struct{}

// dialer is go-mail's dial function: a TCP connection wrapped in conn (so
// a call's deadline and cancellation reach every read and write), in TLS
// from the start for implicit TLS.
func dialer(implicit *tls.Config) mail.DialContextFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		raw, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		c := &conn{Conn: raw}
		if dl, ok := ctx.Deadline(); ok {
			c.limitTo(dl)
		}
		if h, ok := ctx.Value(holderKey{}).(*holder); ok {
			h.c = c
		}
		if implicit == nil {
			return c, nil
		}
		tc := tls.Client(c, implicit)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, err
		}
		return tc, nil
	}
}

// conn is a connection whose deadlines never pass the call's: go-mail
// sets its own (its timeout) before each command, and those are cut to
// the limit; a cancelled call sets the limit to the past, which ends a
// read or write in progress at once.
type conn struct {
	net.Conn
	mu    sync.Mutex
	limit time.Time
	stop  func() bool
}

func (c *conn) limitTo(t time.Time) {
	c.mu.Lock()
	c.limit = t
	c.mu.Unlock()
	_ = c.Conn.SetDeadline(t)
}

// bound limits the connection to ctx: its deadline, and its cancellation.
func (c *conn) bound(ctx context.Context) {
	dl, _ := ctx.Deadline()
	c.limitTo(dl)
	c.stop = context.AfterFunc(ctx, func() { c.limitTo(time.Unix(1, 0)) })
}

// unbound lifts the call's limit; false when the call's cancellation has
// already started cutting the connection (not reusable: its deadline is
// being set to the past).
func (c *conn) unbound() bool {
	if !c.stop() {
		return false
	}
	c.limitTo(time.Time{})
	return true
}

func (c *conn) clamp(t time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.limit.IsZero() && (t.IsZero() || t.After(c.limit)) {
		return c.limit
	}
	return t
}

func (c *conn) SetDeadline(t time.Time) error      { return c.Conn.SetDeadline(c.clamp(t)) }
func (c *conn) SetReadDeadline(t time.Time) error  { return c.Conn.SetReadDeadline(c.clamp(t)) }
func (c *conn) SetWriteDeadline(t time.Time) error { return c.Conn.SetWriteDeadline(c.clamp(t)) }
