package apiload

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// rawServer answers each request it reads on a connection with answer(i),
// i counting the requests of all connections, written as is; close(i)
// says whether to close the connection after it. It counts connections.
type rawServer struct {
	mu    sync.Mutex
	n     int
	conns int
}

func (s *rawServer) start(t *testing.T, answer func(i int) string, closeAfter func(i int) bool) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns++
			s.mu.Unlock()
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					s.mu.Lock()
					i := s.n
					s.n++
					s.mu.Unlock()
					if _, err := io.WriteString(c, answer(i)); err != nil || closeAfter(i) {
						return
					}
				}
			}()
		}
	}()
	return "http://" + l.Addr().String()
}

func TestThePosterReadsEveryAnswerFormAndKeepsConnectionsOnlyWhenItMay(t *testing.T) {
	never := func(int) bool { return false }
	for _, tc := range []struct {
		name       string
		answer     func(i int) string
		closeAfter func(i int) bool
		wantConns  func(conns int) bool
	}{
		{"a Content-Length answer keeps the connection", func(int) string {
			return "HTTP/1.1 202 Accepted\r\nContent-Length: 5\r\n\r\nhello"
		}, never, func(c int) bool { return c == 1 }},
		{"a chunked answer with a trailer is read to its end and keeps the connection", func(int) string {
			return "HTTP/1.1 202 Accepted\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n3\r\nabc\r\n0\r\nT: v\r\n\r\n"
		}, never, func(c int) bool { return c == 1 }},
		{"Connection: close takes a new connection for the next send", func(int) string {
			return "HTTP/1.1 202 Accepted\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"
		}, func(int) bool { return true }, func(c int) bool { return c == 10 }},
		{"a body to the connection's end takes a new connection for the next send", func(int) string {
			return "HTTP/1.1 202 Accepted\r\n\r\nto the end"
		}, func(int) bool { return true }, func(c int) bool { return c == 10 }},
		{"a kept connection the server closed unannounced is replaced and the send made on the new one", func(int) string {
			return "HTTP/1.1 202 Accepted\r\nContent-Length: 2\r\n\r\nok"
		}, func(i int) bool { return i%2 == 1 }, func(c int) bool { return c == 5 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s rawServer
			url := s.start(t, tc.answer, tc.closeAfter)
			p, err := newPoster(url+"/v1/notifications", []string{"Authorization: Bearer k"}, 5*time.Second)
			if err != nil || p == nil {
				t.Fatalf("newPoster: %v, %v", p, err)
			}
			defer p.close()
			for i := range 10 {
				code, err := p.post(context.Background(), []byte(`{"n":`+strconv.Itoa(i)+`}`))
				if err != nil || code != 202 {
					t.Fatalf("send %d: %d, %v; want 202", i, code, err)
				}
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.n != 10 || !tc.wantConns(s.conns) {
				t.Fatalf("the server answered %d sends on %d connections", s.n, s.conns)
			}
		})
	}
	t.Run("a malformed status line is an error naming it", func(t *testing.T) {
		var s rawServer
		url := s.start(t, func(int) string { return "HTTX/1.1 oops\r\n\r\n" }, never)
		p, _ := newPoster(url+"/", nil, 5*time.Second)
		defer p.close()
		if _, err := p.post(context.Background(), []byte("{}")); err == nil || !strings.Contains(err.Error(), "malformed HTTP answer: status line") {
			t.Fatalf("err %v, want one naming the malformed status line", err)
		}
	})
	t.Run("an https URL is left to net/http", func(t *testing.T) {
		if p, err := newPoster("https://127.0.0.1:1/", nil, time.Second); p != nil || err != nil {
			t.Fatalf("newPoster(https): %v, %v; want nil, nil", p, err)
		}
	})
}
