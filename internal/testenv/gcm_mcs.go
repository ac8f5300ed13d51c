package testenv

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// The delivery half of the GCM service: the MCS connection Chromium keeps
// open to receive pushes (--gcm-mcs-endpoint), and the push endpoint an
// application server posts an encrypted push to
// (https://<google host>/fcm/send/<token>), reached through an HTTPS
// proxy (HTTPS_PROXY) whose TLS certificate the sender trusts
// (SSL_CERT_FILE). A push posted there is handed to Chromium as GCM hands
// it: a DataMessageStanza with the push's app id and the body as sent, which
// Chromium decrypts with the subscription's keys and dispatches to the
// service worker as a push event.

// MCS message tags (google_apis/gcm/protocol/mcs.proto).
const (
	mcsVersion           = 41
	mcsHeartbeatPing     = 0
	mcsHeartbeatAck      = 1
	mcsLoginRequest      = 2
	mcsLoginResponse     = 3
	mcsDataMessageStanza = 8
)

type mcsConn struct {
	mu sync.Mutex
	c  net.Conn
}

func (m *mcsConn) write(b []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, err := m.c.Write(b)
	return err
}

func mcsFrame(tag byte, msg []byte) []byte {
	b := []byte{tag}
	b = protowire.AppendVarint(b, uint64(len(msg)))
	return append(b, msg...)
}

func appendString(b []byte, field protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, field, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// serveMCS answers one Chromium connection: the login, heartbeats, and
// whatever else it sends is read and dropped (acks).
func (g *GCMService) serveMCS(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	if v, err := r.ReadByte(); err != nil || v < 38 {
		return
	}
	conn := &mcsConn{c: c}
	first := true
	for {
		tag, err := r.ReadByte()
		if err != nil {
			return
		}
		n, err := readVarint(r)
		if err != nil {
			return
		}
		msg := make([]byte, n)
		if _, err := io.ReadFull(r, msg); err != nil {
			return
		}
		switch tag {
		case mcsLoginRequest:
			// LoginResponse: id (1), the request's id back.
			var id string
			forEachField(msg, func(num protowire.Number, v []byte) {
				if num == 1 {
					id = string(v)
				}
			})
			out := []byte{}
			if first {
				out = append(out, mcsVersion)
				first = false
			}
			out = append(out, mcsFrame(mcsLoginResponse, appendString(nil, 1, id))...)
			if conn.write(out) != nil {
				return
			}
			g.mu.Lock()
			g.mcs = conn
			g.mu.Unlock()
			select {
			case g.loggedIn <- struct{}{}:
			default:
			}
		case mcsHeartbeatPing:
			if conn.write(mcsFrame(mcsHeartbeatAck, nil)) != nil {
				return
			}
		}
	}
}

func readVarint(r *bufio.Reader) (uint64, error) {
	var v uint64
	for shift := 0; shift < 64; shift += 7 {
		b, err := r.ReadByte()
		if err != nil {
			return 0, err
		}
		v |= uint64(b&0x7f) << shift
		if b < 0x80 {
			return v, nil
		}
	}
	return 0, fmt.Errorf("mcs: varint too long")
}

// forEachField calls f with every length-delimited field of a message.
func forEachField(msg []byte, f func(protowire.Number, []byte)) {
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return
		}
		msg = msg[n:]
		if typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(msg)
			if m < 0 {
				return
			}
			f(num, v)
			msg = msg[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, msg)
		if m < 0 {
			return
		}
		msg = msg[m:]
	}
}

// deliver hands an encrypted push to Chromium over its MCS connection.
func (g *GCMService) deliver(reg GCMRegistration, body []byte) error {
	g.mu.Lock()
	conn := g.mcs
	g.pushes++
	n := g.pushes
	g.mu.Unlock()
	if conn == nil {
		return fmt.Errorf("no MCS connection from the browser")
	}
	var m []byte
	m = appendString(m, 2, fmt.Sprintf("herald-test-%d", n)) // id
	m = appendString(m, 3, reg.Sender)                       // from
	m = appendString(m, 5, reg.App)                          // category
	for _, kv := range [][2]string{{"subtype", reg.Subtype}, {"content-encoding", "aes128gcm"}} {
		var d []byte
		d = appendString(d, 1, kv[0])
		d = appendString(d, 2, kv[1])
		m = protowire.AppendTag(m, 7, protowire.BytesType)
		m = protowire.AppendBytes(m, d)
	}
	m = appendString(m, 9, fmt.Sprintf("0:herald-test-%d", n)) // persistent_id
	m = protowire.AppendTag(m, 21, protowire.BytesType)        // raw_data
	m = protowire.AppendBytes(m, body)
	return conn.write(mcsFrame(mcsDataMessageStanza, m))
}

// startDelivery starts the MCS listener, the push endpoint and the proxy to
// it, with one self-signed certificate for Google's hosts and 127.0.0.1.
func (g *GCMService) startDelivery(t testing.TB) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "herald test GCM"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: []string{"*.google.com", "fcm.googleapis.com", "*.googleapis.com"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	spki := sha256.Sum256(leaf.RawSubjectPublicKeyInfo)
	g.spki = base64.StdEncoding.EncodeToString(spki[:])
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
	g.CertFile = filepath.Join(t.TempDir(), "gcm.pem")
	if err := os.WriteFile(g.CertFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}}

	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ln.Close()
		g.mu.Lock()
		if g.mcs != nil {
			g.mcs.c.Close()
		}
		g.mu.Unlock()
	})
	g.mcsAddr = ln.Addr().String()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go g.serveMCS(c)
		}
	}()

	push := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token := path.Base(r.URL.Path)
		body, _ := io.ReadAll(r.Body)
		var reg *GCMRegistration
		g.mu.Lock()
		g.posts = append(g.posts, gcmPost{token: token, topic: r.Header.Get("Topic")})
		for i := range g.reg {
			if g.reg[i].Token == token {
				reg = &g.reg[i]
			}
		}
		g.mu.Unlock()
		if r.Method != http.MethodPost || reg == nil {
			http.Error(w, "unknown subscription", http.StatusNotFound)
			return
		}
		if r.Header.Get("Content-Encoding") != "aes128gcm" {
			http.Error(w, "want Content-Encoding: aes128gcm", http.StatusBadRequest)
			return
		}
		for range g.repeat {
			if err := g.deliver(*reg, body); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		w.Header().Set("Location", r.URL.String())
		w.WriteHeader(http.StatusCreated)
	}))
	push.TLS = cfg
	push.StartTLS()
	t.Cleanup(push.Close)

	// The HTTPS proxy: every CONNECT is tunnelled to the push endpoint.
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect {
			http.Error(w, "CONNECT only", http.StatusMethodNotAllowed)
			return
		}
		up, err := net.Dial("tcp", push.Listener.Addr().String())
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		c, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			up.Close()
			return
		}
		rw.WriteString("HTTP/1.1 200 Connection established\r\n\r\n")
		rw.Flush()
		go func() { io.Copy(up, rw); up.Close() }()
		io.Copy(c, up)
		c.Close()
	}))
	t.Cleanup(proxy.Close)
	g.ProxyURL = proxy.URL
}

// AwaitConnection waits until Chromium has logged in over MCS. The minute
// is a guard, not a timed assertion.
func (g *GCMService) AwaitConnection(t testing.TB) {
	t.Helper()
	g.mu.Lock()
	ok := g.mcs != nil
	g.mu.Unlock()
	if ok {
		return
	}
	select {
	case <-g.loggedIn:
	case <-time.After(time.Minute):
		t.Fatal("testenv: Chromium never connected to the GCM service's MCS endpoint")
	}
}
