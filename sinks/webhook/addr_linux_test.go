package webhook_test

import (
	"context"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/heraldhq/herald/sinks/webhook"
)

// TestTheAdaptersConnectionsAreProbedAfter30IdleSeconds: the adapter's
// dialer keeps its connections alive as net/http's default transport
// does, the first keep-alive probe after 30 idle seconds (the kernel's
// TCP_KEEPIDLE), both when private addresses are allowed and to the
// proxy the environment names.
func TestTheAdaptersConnectionsAreProbedAfter30IdleSeconds(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name, dial := range map[string]func(context.Context, string, string) (net.Conn, error){
		"allowing private addresses":      webhook.Dialer(true),
		"to the proxy of the environment": webhook.Dialer(false, ln.Addr().String()),
	} {
		t.Run(name, func(t *testing.T) {
			c, err := dial(ctx, "tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			raw, err := c.(*net.TCPConn).SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			var idle int
			var gerr error
			if err := raw.Control(func(fd uintptr) {
				idle, gerr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE)
			}); err != nil || gerr != nil {
				t.Fatal(err, gerr)
			}
			if idle != 30 {
				t.Fatalf("TCP_KEEPIDLE = %d s, want 30", idle)
			}
		})
	}
}
