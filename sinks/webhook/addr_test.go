package webhook_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/sinks/webhook"
)

// addrCase is an address and whether Forbidden refuses it.
type addrCase struct {
	addr      string
	forbidden bool
}

func checkForbidden(t *testing.T, cases []addrCase) {
	t.Helper()
	for _, c := range cases {
		name := c.addr + " is allowed"
		if c.forbidden {
			name = c.addr + " is forbidden"
		}
		t.Run(name, func(t *testing.T) {
			if got := webhook.Forbidden(netip.MustParseAddr(c.addr)); got != c.forbidden {
				t.Fatalf("Forbidden(%s) = %v", c.addr, got)
			}
		})
	}
}

func TestForbiddenAddressesAreTheInternalOnes(t *testing.T) {
	cases := []addrCase{
		{"127.0.0.1", true}, {"127.8.9.10", true}, {"::1", true},
		{"10.0.0.1", true}, {"172.16.5.4", true}, {"172.31.255.255", true}, {"192.168.1.1", true}, {"fd12:3456::1", true},
		{"169.254.169.254", true}, {"fe80::1", true},
		{"0.0.0.0", true}, {"::", true}, {"0.1.2.3", true},
		{"100.64.0.1", true}, {"224.0.0.1", true}, {"ff02::1", true}, {"255.255.255.255", true},
		{"::ffff:127.0.0.1", true}, {"::ffff:10.0.0.1", true},
		{"198.18.0.1", true}, {"192.0.2.1", true},
		{"93.184.215.14", false}, {"8.8.8.8", false}, {"172.32.0.1", false}, {"100.128.0.1", false},
		{"2606:4700::6810:85e5", false}, {"::ffff:8.8.8.8", false},
	}
	checkForbidden(t, cases)
}

// resolver answers the names it holds.
type resolver map[string][]netip.Addr

func (r resolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if ips, ok := r[host]; ok {
		return ips, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func TestCheckURLRefusesWhatIsOrResolvesToAnInternalAddress(t *testing.T) {
	r := resolver{
		"public.example.com": {netip.MustParseAddr("93.184.215.14")},
		"mixed.example.com":  {netip.MustParseAddr("93.184.215.14"), netip.MustParseAddr("192.168.0.10")},
		"mapped.example.com": {netip.MustParseAddr("::ffff:127.0.0.1")},
	}
	cases := []struct {
		name, url string
		refused   bool
	}{
		{"a public name is accepted", "https://public.example.com/hook", false},
		{"a public address is accepted", "https://93.184.215.14:8443/hook", false},
		{"a name that does not resolve yet is accepted (the dialer still checks)", "https://unknown.example.com/hook", false},
		{"a loopback address is refused", "http://127.0.0.1:4020/hooks/a", true},
		{"a bracketed IPv6 loopback is refused", "http://[::1]:4020/hooks/a", true},
		{"localhost is refused without a lookup", "http://localhost/hook", true},
		{"a name under localhost is refused", "http://api.localhost./hook", true},
		{"a name with one private address among public ones is refused", "https://mixed.example.com/hook", true},
		{"a name resolving to an IPv4-mapped loopback is refused", "https://mapped.example.com/hook", true},
		{"the metadata address is refused", "http://169.254.169.254/latest", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := webhook.CheckURL(context.Background(), r, c.url)
			if got := errors.Is(err, webhook.ErrForbiddenAddress); got != c.refused {
				t.Fatalf("CheckURL(%s) = %v, want refused %v", c.url, err, c.refused)
			}
		})
	}
}

// TestTheAdapterRefusesToConnectToAnInternalAddress: the check at dial
// time, on the resolved address. The endpoint is registered by name
// ("localhost", which resolves to loopback only when dialled, as a
// rebinding name would), and by loopback literal; the receiver gets
// nothing and the delivery ends permanent, forbidden_address. Allowed
// private addresses, the same endpoint is called.
func TestTheAdapterRefusesToConnectToAnInternalAddress(t *testing.T) {
	em := startReceiver(t)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(em.URL(), "http://"))
	tbl := webhook.NewTable("herald.webhooks")
	for _, ep := range []struct{ id, url string }{
		{"by-name", "http://localhost:" + port + "/hooks/by-name"},
		{"by-address", em.EndpointURL("by-address")},
	} {
		w := endpoint(ep.id, ep.url, "delivery.failed")
		tbl.Put(w)
		em.AddSecret(w.Secret)
	}
	for _, allow := range []bool{false, true} {
		p, err := webhook.New(webhook.Config{Endpoints: tbl, Topic: "herald.webhooks", AllowPrivate: allow})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.CloseIdleConnections)
		for _, id := range []string{"by-name", "by-address"} {
			w, _ := tbl.Endpoint("acme", id)
			cmd := webhook.Commands(outcome(), []schemas.Webhook{w})[0]
			if !allow {
				t.Run("an endpoint "+id+" on loopback is refused at dial time", func(t *testing.T) {
					before := em.Total()
					res := send(p, cmd, 10*time.Second)
					if res.Class != sinks.Permanent || res.Rule != "forbidden_address" || !errors.Is(res.Err, webhook.ErrForbiddenAddress) {
						t.Fatalf("result %+v, want permanent forbidden_address", res)
					}
					if em.Total() != before {
						t.Fatal("the receiver was called")
					}
				})
				continue
			}
			t.Run("an endpoint "+id+" on loopback is called when private addresses are allowed", func(t *testing.T) {
				if res := send(p, cmd, 10*time.Second); res.Class != sinks.Success {
					t.Fatalf("result %+v, want success", res)
				}
			})
		}
	}
}

// TestAnIPv6AddressCarryingAnInternalIPv4AddressIsForbidden: NAT64
// (64:ff9b::/96, RFC 6052: the gateway connects to the last 32 bits, so
// an IPv6-only cluster's DNS64 names reach IPv4 hosts through it), 6to4
// (2002::/16) and the deprecated IPv4-compatible form (::/96) carry an
// IPv4 address; one carrying an internal address reaches it (a NAT64
// gateway in the VPC connects to 10.0.0.1 for 64:ff9b::a00:1). Judged as
// the address they carry, so public IPv4 hosts stay reachable from an
// IPv6-only network.
func TestAnIPv6AddressCarryingAnInternalIPv4AddressIsForbidden(t *testing.T) {
	cases := []addrCase{
		{"64:ff9b::a00:1", true},     // NAT64 of 10.0.0.1
		{"64:ff9b::a9fe:a9fe", true}, // NAT64 of the metadata address
		{"64:ff9b::7f00:1", true},    // NAT64 of 127.0.0.1
		{"64:ff9b::c0a8:101", true},  // NAT64 of 192.168.1.1
		{"2002:a00:1::1", true},      // 6to4 of 10.0.0.1
		{"::a00:1", true},            // IPv4-compatible 10.0.0.1
		{"::808:808", true},          // IPv4-compatible: deprecated, never a public endpoint
		{"64:ff9b::808:808", false},  // NAT64 of 8.8.8.8: DNS64's answer for a public IPv4 host
		{"2002:808:808::1", false},   // 6to4 of 8.8.8.8
	}
	checkForbidden(t, cases)
}

// TestAZonedAddressIsJudgedAsTheAddress: an IPv6 zone (fe80::1%eth0) names
// the interface; the kernel ignores it for an address that needs none, so
// 2001:db8::1%eth0 is 2001:db8::1. netip's Prefix.Contains never matches a
// zoned address, which the ranges beyond netip's own classes relied on.
func TestAZonedAddressIsJudgedAsTheAddress(t *testing.T) {
	for _, addr := range []string{"fe80::1%eth0", "fec0::1%eth0", "2001:db8::1%eth0", "100::1%lo", "64:ff9b::a00:1%eth0", "::a00:1%eth0", "64:ff9b:1::1%eth0"} {
		t.Run(addr+" is forbidden", func(t *testing.T) {
			if !webhook.Forbidden(netip.MustParseAddr(addr)) {
				t.Fatalf("Forbidden(%s) = false", addr)
			}
		})
	}
	t.Run("a URL naming one is refused at registration", func(t *testing.T) {
		err := webhook.CheckURL(context.Background(), resolver{}, "http://[2001:db8::1%25eth0]:8080/hook")
		if !errors.Is(err, webhook.ErrForbiddenAddress) {
			t.Fatalf("CheckURL = %v, want ErrForbiddenAddress", err)
		}
	})
}

// TestTheDialerLetsTheConfiguredProxyThroughOnly: the proxy the
// environment names is dialled even at a loopback address (the operator
// chose it); any other internal address is refused.
func TestTheDialerLetsTheConfiguredProxyThroughOnly(t *testing.T) {
	proxy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	dial := webhook.Dialer(false, "", proxy.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t.Run("the proxy is dialled", func(t *testing.T) {
		c, err := dial(ctx, "tcp", proxy.Addr().String())
		if err != nil {
			t.Fatalf("dial the proxy: %v", err)
		}
		c.Close()
	})
	t.Run("another loopback address is refused", func(t *testing.T) {
		if c, err := dial(ctx, "tcp", other.Addr().String()); !errors.Is(err, webhook.ErrForbiddenAddress) {
			if c != nil {
				c.Close()
			}
			t.Fatalf("dial = %v, want ErrForbiddenAddress", err)
		}
	})
}

// TestAnHTTPProxyTheEnvironmentNamesCarriesTheCalls: with HTTP_PROXY set
// (at a loopback address here), the adapter's default client sends an
// endpoint's call through the proxy, which its address check does not
// refuse; the proxy is then the one that must check the endpoint. The
// environment is read once per process (net/http caches it), so the
// adapter runs in a child process of the test binary.
func TestAnHTTPProxyTheEnvironmentNamesCarriesTheCalls(t *testing.T) {
	if os.Getenv("WEBHOOK_TEST_PROXY_CHILD") != "" {
		tbl := webhook.NewTable("herald.webhooks")
		ep := endpoint("proxied", "http://hooks.example.com/proxied", schemas.EventDeliveryFailed)
		tbl.Put(ep)
		p, err := webhook.New(webhook.Config{Endpoints: tbl, Topic: "herald.webhooks"})
		if err != nil {
			t.Fatal(err)
		}
		if res := send(p, webhook.Commands(outcome(), []schemas.Webhook{ep})[0], 10*time.Second); res.Class != sinks.Success {
			t.Fatalf("result %+v, want success through the proxy", res)
		}
		return
	}
	var mu sync.Mutex
	var seen []string
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.String())
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(proxy.Close)
	cmd := exec.Command(os.Args[0], "-test.run=^TestAnHTTPProxyTheEnvironmentNamesCarriesTheCalls$")
	cmd.Env = append(os.Environ(), "WEBHOOK_TEST_PROXY_CHILD=1", "HTTP_PROXY="+proxy.URL, "http_proxy="+proxy.URL, "NO_PROXY=", "no_proxy=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the child failed: %v\n%s", err, out)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0] != "POST http://hooks.example.com/proxied" {
		t.Fatalf("the proxy carried %v, want the endpoint's POST", seen)
	}
}
