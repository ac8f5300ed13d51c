package apns_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/sinks/apns"
	"github.com/heraldhq/herald/sinks/apns/emulator"
)

// writeKey writes a new P-256 key as PKCS#8 PEM (Apple's .p8 format), and
// returns it.
func writeKey(t *testing.T, path string) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return key
}

// writeClientCert writes a self-signed client certificate and its key in
// one PEM file, as Apple's provider certificates are often exported.
func writeClientCert(t *testing.T, path string) {
	t.Helper()
	keyPath := path + ".key"
	key := writeKey(t, keyPath)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "Apple Push Services: com.example.app"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM...), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestTokenAndCertificateAuthReachAnEmulatorThatRequiresAuth(t *testing.T) {
	em := startEmulator(t, emulator.Options{RequireAuth: true})
	dir := t.TempDir()
	p8, pemCert := filepath.Join(dir, "AuthKey_ABC123DEFG.p8"), filepath.Join(dir, "push.pem")
	writeKey(t, p8)
	writeClientCert(t, pemCert)
	cases := []struct {
		name  string
		cfg   apns.Config
		class sinks.Class
		rule  string
	}{
		{"token auth with a .p8 key is accepted", apns.Config{KeyFile: p8, KeyID: "ABC123DEFG", TeamID: "DEF123GHIJ"}, sinks.Success, "accepted"},
		{"certificate auth with a PEM certificate is accepted", apns.Config{CertFile: pemCert}, sinks.Success, "accepted"},
		// testdata/push.p12: a self-signed client certificate and its P-256
		// key, made with openssl pkcs12 -export -keypbe PBE-SHA1-3DES
		// -certpbe PBE-SHA1-3DES -macalg sha1 (the encryption Keychain's
		// exports use) and the password herald-test.
		{"certificate auth with a .p12 file is accepted", apns.Config{CertFile: "testdata/push.p12", CertPassword: "herald-test"}, sinks.Success, "accepted"},
		{"no auth is refused as a permanent auth error", apns.Config{}, sinks.Permanent, "auth"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := provider(t, em, tc.cfg)
			res := p.Send(context.Background(), command("tok-auth"))
			if res.Class != tc.class || res.Rule != tc.rule {
				t.Fatalf("got %v %q (%d %s, %v), want %v %q", res.Class, res.Rule, res.Status, res.Reason, res.Err, tc.class, tc.rule)
			}
		})
	}
}

func TestBadAuthConfigurationIsRefusedWithoutNamingTheSecret(t *testing.T) {
	dir := t.TempDir()
	p8, pemP12 := filepath.Join(dir, "key.p8"), filepath.Join(dir, "push.p12")
	writeKey(t, p8)
	writeClientCert(t, pemP12)
	cases := []struct {
		name string
		cfg  apns.Config
	}{
		{"token and certificate together", apns.Config{Host: "https://x", KeyFile: p8, KeyID: "k", TeamID: "t", CertFile: p8}},
		{"a token key without its key id", apns.Config{Host: "https://x", KeyFile: p8, TeamID: "t"}},
		{"a missing key file", apns.Config{Host: "https://x", KeyFile: filepath.Join(dir, "absent.p8"), KeyID: "k", TeamID: "t"}},
		{"a .p12 file with the wrong password", apns.Config{Host: "https://x", CertFile: "testdata/push.p12", CertPassword: "wrong"}},
		{"a PEM certificate under a .p12 name", apns.Config{Host: "https://x", CertFile: pemP12}},
		{"no host", apns.Config{}},
	}
	secret, err := os.ReadFile(p8)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := apns.New(tc.cfg)
			if err == nil {
				t.Fatal("accepted")
			}
			if strings.Contains(err.Error(), string(secret[30:60])) {
				t.Fatalf("the error quotes the key: %v", err)
			}
		})
	}
}
