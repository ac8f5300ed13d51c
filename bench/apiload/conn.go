package apiload

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// poster sends the generator's POSTs over plain-HTTP/1.1 connections kept
// alive in a pool, written and read by the sending goroutine itself: one
// write and a read or two a send. net/http's client hands every request
// to a writing and a reading goroutine of its connection and builds a
// header map per request; on the two cores the generator shares with the
// server it measures, those wake-ups cost more CPU than the server's own
// handling of a send at a moderate rate (docs/benchmarks-history.md,
// "Request → decision at 2,000/s"). The pool is last in, first out, so a
// moderate rate keeps a few connections busy rather than thousands idle.
// https URLs go through net/http (newPoster returns nil for them).
type poster struct {
	addr    string // host:port
	head    []byte // the request line and the fixed headers, up to Content-Length's value
	timeout time.Duration
	dialer  net.Dialer

	mu   sync.Mutex
	idle []*pconn
}

type pconn struct {
	c  net.Conn
	br *bufio.Reader
	wb []byte
}

// newPoster returns a poster of POSTs to rawURL with the given header
// lines ("Name: value"), or nil when rawURL is not http://.
func newPoster(rawURL string, headers []string, timeout time.Duration) (*poster, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" {
		return nil, nil
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	var h bytes.Buffer
	fmt.Fprintf(&h, "POST %s HTTP/1.1\r\nHost: %s\r\n", u.RequestURI(), u.Host)
	for _, l := range headers {
		h.WriteString(l)
		h.WriteString("\r\n")
	}
	h.WriteString("Content-Length: ")
	return &poster{addr: addr, head: h.Bytes(), timeout: timeout, dialer: net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}}, nil
}

// post sends body and returns the answer's status code, having read the
// answer to its end. A send on a kept-alive connection that the server had
// closed (nothing of an answer read) is made again once on a new one, as
// net/http's client does.
func (p *poster) post(ctx context.Context, body []byte) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	for try := 0; ; try++ {
		c, reused, err := p.get(ctx)
		if err != nil {
			return 0, err
		}
		// Cancelling ctx ends a send in flight, as net/http's client does.
		stop := context.AfterFunc(ctx, func() { c.c.SetDeadline(time.Now()) })
		code, answered, keep, err := p.roundTrip(c, body)
		if stopped := stop(); err == nil {
			if keep && stopped { // (not stopped: ctx ended and may have cut the connection)
				p.put(c)
			} else {
				c.c.Close()
			}
			return code, nil
		}
		c.c.Close()
		if !reused || answered || try > 0 {
			return 0, err
		}
	}
}

func (p *poster) get(ctx context.Context) (*pconn, bool, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		c := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return c, true, nil
	}
	p.mu.Unlock()
	c, err := p.dialer.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, false, err
	}
	return &pconn{c: c, br: bufio.NewReaderSize(c, 4096)}, false, nil
}

func (p *poster) put(c *pconn) {
	p.mu.Lock()
	p.idle = append(p.idle, c)
	p.mu.Unlock()
}

// close closes the idle connections.
func (p *poster) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.idle {
		c.c.Close()
	}
	p.idle = nil
}

var errBadAnswer = errors.New("malformed HTTP answer")

// roundTrip writes one request on c and reads its answer; answered says
// whether any of the answer was read, keep whether c can carry another
// request (a complete answer that does not close the connection).
func (p *poster) roundTrip(c *pconn, body []byte) (code int, answered, keep bool, err error) {
	if p.timeout > 0 {
		if err := c.c.SetDeadline(time.Now().Add(p.timeout)); err != nil {
			return 0, false, false, err
		}
	}
	c.wb = append(c.wb[:0], p.head...)
	c.wb = strconv.AppendInt(c.wb, int64(len(body)), 10)
	c.wb = append(c.wb, "\r\n\r\n"...)
	c.wb = append(c.wb, body...)
	if _, err := c.c.Write(c.wb); err != nil {
		return 0, false, false, err
	}
	line, err := c.br.ReadSlice('\n')
	if err != nil {
		return 0, len(line) > 0, false, err
	}
	// "HTTP/1.1 202 Accepted\r\n"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return 0, true, false, fmt.Errorf("%w: status line %q", errBadAnswer, line)
	}
	code, err = strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, true, false, fmt.Errorf("%w: status line %q", errBadAnswer, line)
	}
	length, chunked, closing := -1, false, false
	for {
		h, err := c.br.ReadSlice('\n')
		if err != nil {
			return 0, true, false, err
		}
		h = bytes.TrimRight(h, "\r\n")
		if len(h) == 0 {
			break
		}
		name, value, ok := bytes.Cut(h, []byte(":"))
		if !ok {
			return 0, true, false, fmt.Errorf("%w: header %q", errBadAnswer, h)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(value)); err != nil || length < 0 {
				return 0, true, false, fmt.Errorf("%w: Content-Length %q", errBadAnswer, value)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(value, []byte("chunked"))
		case bytes.EqualFold(name, []byte("Connection")):
			closing = bytes.EqualFold(value, []byte("close"))
		}
	}
	switch {
	case chunked:
		err = discardChunked(c.br)
	case length >= 0:
		_, err = c.br.Discard(length)
	default: // the body runs to the connection's end
		_, err = io.Copy(io.Discard, c.br)
		closing = true
	}
	if err != nil {
		return 0, true, false, err
	}
	return code, true, !closing, nil
}

// discardChunked reads a chunked body (and its trailers) to its end.
func discardChunked(br *bufio.Reader) error {
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return err
		}
		size, _, _ := bytes.Cut(bytes.TrimRight(line, "\r\n"), []byte(";"))
		n, err := strconv.ParseInt(string(bytes.TrimSpace(size)), 16, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("%w: chunk size %q", errBadAnswer, line)
		}
		if n == 0 {
			for { // trailers, up to the blank line
				t, err := br.ReadSlice('\n')
				if err != nil {
					return err
				}
				if len(bytes.TrimRight(t, "\r\n")) == 0 {
					return nil
				}
			}
		}
		if _, err := br.Discard(int(n) + 2); err != nil { // the chunk and its CRLF
			return err
		}
	}
}
