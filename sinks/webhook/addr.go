package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// ErrForbiddenAddress is the error of an endpoint whose address is
// private, loopback, link-local or otherwise internal while such
// addresses are not allowed (AllowPrivate false).
var ErrForbiddenAddress = errors.New("webhook: the endpoint's address is private, loopback or link-local")

// Ranges Forbidden refuses besides netip's loopback, private, link-local,
// multicast and unspecified classes.
var extraForbidden = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),   // carrier-grade NAT (shared address space)
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, and 255.255.255.255
	netip.MustParsePrefix("64:ff9b:1::/48"),  // local-use NAT64
	netip.MustParsePrefix("fec0::/10"),       // deprecated site-local
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
	netip.MustParsePrefix("100::/64"),        // discard-only
	netip.MustParsePrefix("2001::/23"),       // IETF protocol assignments (Teredo and others)
	netip.MustParsePrefix("192.88.99.0/24"),  // 6to4 relay anycast (deprecated)
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation
	netip.MustParsePrefix("198.51.100.0/24"), // documentation
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation
}

// The IPv6 ranges that carry an IPv4 address (see Forbidden).
var (
	nat64        = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour    = netip.MustParsePrefix("2002::/16")
	v4Compatible = netip.MustParsePrefix("::/96")
)

// Forbidden reports whether an endpoint may not be called at ip without
// AllowPrivate: loopback, private (RFC 1918, fc00::/7), link-local
// (169.254/16 with the cloud metadata address, fe80::/10), unspecified,
// multicast, carrier-grade NAT, and the other special-purpose ranges
// above. An IPv4-mapped IPv6 address is judged as its IPv4 address, and so
// is one carrying an IPv4 address a gateway connects to: NAT64's
// 64:ff9b::/96 (the last 32 bits) and 6to4's 2002::/16 (bits 16-47), so
// 64:ff9b::a00:1 is 10.0.0.1 while DNS64's names of public IPv4 hosts
// stay reachable from an IPv6-only network. The deprecated
// IPv4-compatible ::/96 is refused whole. A zone is ignored: the kernel
// ignores it for an address that needs none, and netip's Prefix.Contains
// never matches a zoned address.
func Forbidden(ip netip.Addr) bool {
	ip = ip.Unmap().WithZone("")
	if ip.Is6() {
		b := ip.As16()
		switch {
		case nat64.Contains(ip):
			return Forbidden(netip.AddrFrom4([4]byte(b[12:16])))
		case sixToFour.Contains(ip):
			if Forbidden(netip.AddrFrom4([4]byte(b[2:6]))) {
				return true
			}
		case v4Compatible.Contains(ip):
			return true
		}
	}
	if !ip.IsValid() || ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified() {
		return true
	}
	for _, p := range extraForbidden {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// Resolver looks a host's addresses up (*net.Resolver implements it).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// CheckURL is the registration check of an endpoint URL without
// AllowPrivate: an IP literal or a name resolving (with r) to a forbidden
// address is refused with an error wrapping ErrForbiddenAddress, naming
// the address. A name that does not resolve now is not refused (it may
// by the time events come; the dial-time check in Dialer still guards
// every connection), nor is a lookup that fails for another reason.
func CheckURL(ctx context.Context, r Resolver, raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("webhook: parse url: %w", err)
	}
	host := u.Hostname()
	if ip, err := netip.ParseAddr(host); err == nil {
		if Forbidden(ip) {
			return fmt.Errorf("%w (%s)", ErrForbiddenAddress, ip)
		}
		return nil
	}
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return fmt.Errorf("%w (%s)", ErrForbiddenAddress, host)
	}
	if r == nil {
		r = net.DefaultResolver
	}
	ips, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil
	}
	for _, ip := range ips {
		if Forbidden(ip) {
			return fmt.Errorf("%w (%s resolves to %s)", ErrForbiddenAddress, host, ip.Unmap())
		}
	}
	return nil
}

// guardControl is a net.Dialer Control refusing a connection to a
// forbidden address: it runs on the address actually dialled, after DNS
// resolution, so a name that resolved to a public address at
// registration and to an internal one now (DNS rebinding) is refused.
func guardControl(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w (unparsable %q)", ErrForbiddenAddress, address)
	}
	if Forbidden(ap.Addr()) {
		return fmt.Errorf("%w (%s)", ErrForbiddenAddress, ap.Addr().Unmap())
	}
	return nil
}

// Dialer returns the DialContext of the adapter's default transport.
// Without allowPrivate, every connection to an endpoint is checked by a
// net.Dialer Control on its resolved address (see guardControl); a
// connection to an HTTP(S) proxy the environment configures
// (HTTP_PROXY, HTTPS_PROXY) is not, since the operator chose it, and
// then the proxy is the one that must refuse internal addresses.
func Dialer(allowPrivate bool, proxies ...string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	plain := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	if allowPrivate {
		return plain.DialContext
	}
	guarded := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: guardControl}
	exempt := map[string]bool{}
	for _, p := range proxies {
		if p != "" {
			exempt[p] = true
		}
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if exempt[addr] {
			return plain.DialContext(ctx, network, addr)
		}
		return guarded.DialContext(ctx, network, addr)
	}
}

// proxyAddrs are the host:port of the proxies the environment configures
// for http and https requests (what http.ProxyFromEnvironment uses).
func proxyAddrs() []string {
	var out []string
	for _, scheme := range []string{"http", "https"} {
		req := &http.Request{URL: &url.URL{Scheme: scheme, Host: "herald.invalid"}}
		p, err := http.ProxyFromEnvironment(req)
		if err != nil || p == nil {
			continue
		}
		port := p.Port()
		if port == "" {
			port = map[string]string{"http": "80", "https": "443", "socks5": "1080"}[p.Scheme]
		}
		out = append(out, net.JoinHostPort(p.Hostname(), port))
	}
	return out
}
