package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/sinks/webpush"
)

// secret values the tests put in configurations; no output may hold them.
const (
	testSASLPassword  = "sasl-pw-Zq81-never-shown"
	testCHPassword    = "ch-pw-Lm42-never-shown"
	testVAPIDPrivate  = "vapid-priv-Xk77-never-shown"
	testAPNSPassword  = "apns-pw-Qe19-never-shown"
	configTestTimeout = 2 * time.Minute
)

var testSecrets = []string{testSASLPassword, testCHPassword, testVAPIDPrivate, testAPNSPassword}

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func assertNoSecret(t *testing.T, what, out string) {
	t.Helper()
	for _, s := range testSecrets {
		if strings.Contains(out, s) {
			t.Fatalf("%s shows the secret %q:\n%s", what, s, out)
		}
	}
}

// readmeConfigExample is the YAML example of the Configuration section of
// the operators' guide (docs/operators.md).
func readmeConfigExample(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile("../../docs/operators.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(raw), "## Configuration")
	m := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindStringSubmatch(sec)
	if !ok || m == nil {
		t.Fatal("docs/operators.md has no ```yaml example in its Configuration section")
	}
	return m[1]
}

func TestConfigCheckNamesEveryBadSetting(t *testing.T) {
	example, err := os.ReadFile("../../deploy/herald.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		file string
		env  map[string]string
		code int
		// want are lines the output must hold; wantNot lines it must not.
		want, wantNot []string
	}{
		{
			name: "the example file in deploy is valid, with the SASL password from the environment",
			file: string(example),
			env:  map[string]string{"HERALD_KAFKA_SASL_PASSWORD": testSASLPassword},
			code: 0,
			want: []string{"is valid: ", `type-windows = "invoice.paid=24h,chat.message=30s", read by api, dedupe, dev, replay`,
				"max-in-flight = \"1000\", read by sink"},
		},
		{
			name: "the example file without the SASL password names the missing password",
			file: string(example),
			code: 1,
			want: []string{"has 1 bad setting(s)", "kafka-sasl-password: is required with --kafka-sasl-mechanism SCRAM-SHA-512"},
		},
		{
			name: "the operators' guide's example is valid",
			file: readmeConfigExample(t),
			env:  map[string]string{"HERALD_KAFKA_SASL_PASSWORD": testSASLPassword},
			code: 0,
			want: []string{"is valid: 9 setting(s)"},
		},
		{
			name: "a JSON file is read as YAML",
			file: `{"brokers": ["a:9092", "b:9092"], "dedupe-window": "5m", "quota": 10}`,
			code: 0,
			want: []string{`brokers = "a:9092,b:9092"`, `quota = "10", read by api`},
		},
		{
			name: "a file with many bad settings names every one, with its line, and shows no secret",
			file: strings.Join([]string{
				"brokers: [kafka-1:9092]", // 1
				"partitions: twelve",      // 2
				"broker: oops",            // 3
				"type-windows: {invoice.paid: 24x, chat.message: 30s}", // 4
				"rate-limits: {chat.message: 5/1h, promo: x/1d}",       // 5
				"kafka-sasl-mechanism: SCRAM-SHA-1",                    // 6
				"kafka-sasl-user: herald",                              // 7
				"kafka-sasl-password: " + testSASLPassword,             // 8
				"kafka-tls-ca-file: /nonexistent/ca.pem",               // 9
				"clickhouse-password: " + testCHPassword,               // 10
				"webpush-vapid-private-key: " + testVAPIDPrivate,       // 11
				"apns-cert-password: " + testAPNSPassword,              // 12
				"reset-offsets: sideways",                              // 13
				"dedupe-window:",                                       // 14
				"apns-priority: 7",                                     // 15
				"fallback-channels: {invoice.paid: sms}",               // 16
				"max-in-flight: 0",                                     // 17
				"database: 'bad name'",                                 // 18
				"quota: 10",                                            // 19
				"quota: 11",                                            // 20
				"fcm-priority: urgent",                                 // 21
				"kafka-compression: lz5",                               // 22
			}, "\n"),
			code: 1,
			want: []string{
				"has 15 bad setting(s)",
				`partitions (FILE line 2): = "twelve" is not a valid int`,
				"broker (FILE line 3): is not a setting of any herald command (did you mean brokers?)",
				`type-windows (FILE line 4): invoice.paid: time: unknown unit "x" in duration "24x"`,
				`rate-limits (FILE line 5): promo: "x/1d" is not max/window`,
				`kafka-sasl-mechanism (FILE line 6): "SCRAM-SHA-1" is not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512`,
				"kafka-tls-ca-file (FILE line 9): cannot be read",
				`reset-offsets (FILE line 13): must be earliest, latest or empty, got "sideways"`,
				`dedupe-window (FILE line 14): has no value`,
				"apns-priority (FILE line 15): must be 10 or 5, got 7",
				`fallback-channels (FILE line 16): invoice.paid: "sms": only "feed" needs no device`,
				"max-in-flight (FILE line 17): must be at least 1, got 0",
				"database (FILE line 18): ",
				"quota (FILE line 20): is set twice (first on line 19)",
				`fcm-priority (FILE line 21): must be high or normal, got "urgent"`,
				`kafka-compression (FILE line 22): "lz5" is not one of none, gzip, snappy, lz4, zstd`,
				"kafka-sasl-password = set (a secret, not shown)",
			},
		},
		{
			name: "a bad value in the environment is named with its variable",
			file: "brokers: kafka-1:9092\n",
			env:  map[string]string{"HERALD_DEDUPE_WINDOW": "soon"},
			code: 1,
			want: []string{`dedupe-window (environment HERALD_DEDUPE_WINDOW): = "soon" is not a valid duration`},
		},
		{
			name: "values a command used to replace by its default are named",
			file: strings.Join([]string{
				"batch-records: -3",      // 1
				"feed-retention: -1h",    // 2
				"max-recipients: -1",     // 3
				"timer-grace: -1s",       // 4
				"ttl-days: 0",            // 5
				"max-age: -1h",           // 6
				"batch-interval: 0s",     // 7
				"transaction-timeout: 0", // 8
				"quota: -5",              // 9
				"flush-interval: -1s",    // 10
			}, "\n"),
			code: 1,
			want: []string{
				"has 11 bad setting(s)", // batch-records twice: at least 1 for the stages, 0 (the default) for a sink
				"batch-records (FILE line 1): must be at least 1, got -3",
				"feed-retention (FILE line 2): must be positive, got -1h0m0s",
				"max-recipients (FILE line 3): must be at least 1, got -1",
				"timer-grace (FILE line 4): must be positive, got -1s",
				"ttl-days (FILE line 5): must be at least 1, got 0",
				"max-age (FILE line 6): must be positive, got -1h0m0s",
				"batch-interval (FILE line 7): must be positive, got 0s",
				"transaction-timeout (FILE line 8): must be positive, got 0s",
				"quota (FILE line 9): must be at least 0, got -5",
				"flush-interval (FILE line 10): must be positive, got -1s",
			},
		},
		{
			name: "addresses that are not host:port are named",
			file: strings.Join([]string{
				"brokers: [kafka-1, 'kafka-2:99999']", // 1
				"clickhouse-addr: nonsense",           // 2
				"metrics-addr: ':x'",                  // 3
				"listen: 127.0.0.1",                   // 4
			}, "\n"),
			code: 1,
			want: []string{
				"has 4 bad setting(s)",
				`brokers (FILE line 1): "kafka-2:99999": the port "99999" is not a number from 0 to 65535`,
				`clickhouse-addr (FILE line 2): "nonsense" is not host:port`,
				`metrics-addr (FILE line 3): ":x": the port "x" is not a number from 0 to 65535`,
				`listen (FILE line 4): "127.0.0.1" is not host:port`,
			},
		},
		{
			name: "an integer in another base than 10 is refused, not read as octal or hex",
			file: "partitions: 010\nreplication: 0x3\nmax-recipients: 1000\n",
			code: 1,
			want: []string{
				"has 2 bad setting(s)",
				`partitions (FILE line 1): = "010" is not a decimal integer`,
				`replication (FILE line 2): = "0x3" is not a decimal integer`,
			},
		},
		{
			name: "a second YAML document is refused, not ignored",
			file: "brokers: 127.0.0.1:1\n---\nbrokres: x\npartitions: -4\n",
			code: 1,
			want: []string{"holds more than one YAML document (a second starts at line 2)"},
		},
		{
			name: "a file that is not a mapping is refused as a whole",
			file: "- brokers\n- partitions\n",
			code: 1,
			want: []string{"want a mapping of setting names to values"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			path := writeFile(t, "herald.yaml", tc.file)
			var out, errb bytes.Buffer
			code := run(t.Context(), []string{"config", "check", "--config", path}, &out, &errb)
			all := out.String() + errb.String()
			if code != tc.code {
				t.Fatalf("exit %d, want %d:\n%s", code, tc.code, all)
			}
			for _, w := range tc.want {
				if w = strings.ReplaceAll(w, "FILE", path); !strings.Contains(all, w) {
					t.Errorf("output lacks %q:\n%s", w, all)
				}
			}
			assertNoSecret(t, "herald config check", all)
		})
	}
}

func TestRolesRefuseABadFileNamingEveryBadSetting(t *testing.T) {
	path := writeFile(t, "herald.yaml", "brokers: kafka-1:9092\ntype-windows: {a: 1x}\nreset-offsets: sideways\nbrokerz: x\nkafka-sasl-password: "+testSASLPassword+"\n")
	for _, role := range []string{"dedupe", "route", "sink"} {
		t.Run(role+" exits 2 naming each bad setting", func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(t.Context(), []string{role, "--config", path}, &out, &errb)
			if code != 2 {
				t.Fatalf("exit %d, want 2: %s", code, errb.String())
			}
			want := []string{"--reset-offsets must be earliest, latest or empty", "--brokerz is not a setting of any herald command (did you mean brokers?)",
				"--kafka-sasl-mechanism is required with --kafka-sasl-user or --kafka-sasl-password"}
			if role == "dedupe" {
				want = append(want, "--type-windows a: time: unknown unit")
			}
			for _, w := range want {
				if !strings.Contains(errb.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, errb.String())
				}
			}
			assertNoSecret(t, "herald "+role, errb.String())
		})
	}
}

// TestConfigPrecedence: the command line wins over the environment, the
// environment over the file, the file over the default.
func TestConfigPrecedence(t *testing.T) {
	file := writeFile(t, "herald.yaml", "dedupe-window: 3m\nbrokers: [file-1:9092, file-2:9092]\n")
	tests := []struct {
		name        string
		args        []string
		env         map[string]string
		config      bool
		wantWindow  time.Duration
		wantBrokers string
	}{
		{"without a file, environment or flag the defaults hold", nil, nil, false, time.Hour, "127.0.0.1:9092"},
		{"the file wins over the defaults", nil, nil, true, 3 * time.Minute, "file-1:9092,file-2:9092"},
		{"the environment wins over the file", nil, map[string]string{"HERALD_DEDUPE_WINDOW": "4m"}, true, 4 * time.Minute, "file-1:9092,file-2:9092"},
		{"the command line wins over the environment and the file", []string{"--dedupe-window", "5m", "--brokers", "flag:9092"},
			map[string]string{"HERALD_DEDUPE_WINDOW": "4m", "HERALD_BROKERS": "env:9092"}, true, 5 * time.Minute, "flag:9092"},
		{"HERALD_CONFIG names the file like --config", nil, map[string]string{"HERALD_CONFIG": file}, false, 3 * time.Minute, "file-1:9092,file-2:9092"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			fs := newFlagSet("dedupe")
			var kf kafkaFlags
			kf.register(fs)
			var pf policyFlags
			pf.register(fs)
			args := tc.args
			if tc.config {
				args = append([]string{"--config", file}, args...)
			}
			if err := parseFlags(fs, args); err != nil {
				t.Fatal(err)
			}
			if pf.window != tc.wantWindow || kf.brokers != tc.wantBrokers {
				t.Fatalf("dedupe-window %v, brokers %q; want %v, %q", pf.window, kf.brokers, tc.wantWindow, tc.wantBrokers)
			}
		})
	}
}

// testCA is a generated certificate authority and a server certificate
// it signed for 127.0.0.1.
type testCA struct {
	caFile     string
	server     tls.Certificate
	serverPEM  []byte // the server's PKCS #8 key and certificate, PEM (a Kafka PEM keystore)
	clientCert string // a client certificate and its key, signed by the CA
	clientKey  string
}

func newTestCA(t *testing.T) testCA {
	t.Helper()
	dir := t.TempDir()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey := key()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "herald test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	sign := func(serial int64, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey) {
		k := key()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "127.0.0.1"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, KeyUsage: x509.KeyUsageDigitalSignature}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, k
	}
	pemOf := func(typ string, b []byte) []byte { return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}) }
	keyPEM := func(k *ecdsa.PrivateKey) []byte {
		b, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return pemOf("PRIVATE KEY", b)
	}
	ca := testCA{caFile: filepath.Join(dir, "ca.pem"), clientCert: filepath.Join(dir, "client.pem"), clientKey: filepath.Join(dir, "client-key.pem")}
	srvDER, srvKey := sign(2, x509.ExtKeyUsageServerAuth)
	ca.serverPEM = append(keyPEM(srvKey), pemOf("CERTIFICATE", srvDER)...)
	if ca.server, err = tls.X509KeyPair(pemOf("CERTIFICATE", srvDER), keyPEM(srvKey)); err != nil {
		t.Fatal(err)
	}
	cliDER, cliKey := sign(3, x509.ExtKeyUsageClientAuth)
	for path, b := range map[string][]byte{ca.caFile: pemOf("CERTIFICATE", caDER), ca.clientCert: pemOf("CERTIFICATE", cliDER), ca.clientKey: keyPEM(cliKey)} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return ca
}

// TestKafkaSASLAndTLSFromTheConfigFile connects `herald topics create` with
// the SASL and TLS settings of a configuration file to a cluster that
// requires them: kfake, which implements SASL PLAIN and SCRAM and TLS with
// franz-go's own server side (the shared test broker has no SASL or TLS
// listener). The client options are the ones every role passes to its
// clients (kafkaFlags.clientOpts).
func TestKafkaSASLAndTLSFromTheConfigFile(t *testing.T) {
	ca := newTestCA(t)
	pool := x509.NewCertPool()
	caPEM, _ := os.ReadFile(ca.caFile)
	pool.AppendCertsFromPEM(caPEM)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(),
		kfake.Superuser("SCRAM-SHA-512", "herald512", testSASLPassword),
		kfake.Superuser("SCRAM-SHA-256", "herald256", testSASLPassword),
		kfake.Superuser("PLAIN", "heraldplain", testSASLPassword),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{ca.server}, ClientCAs: pool, ClientAuth: tls.VerifyClientCertIfGiven}))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	brokers := strings.Join(cluster.ListenAddrs(), ",")

	tests := []struct {
		name, config, password string
		ok                     bool
		// why is in the error of a refused connection.
		why string
	}{
		{"SCRAM-SHA-512 over TLS with the generated CA connects", "kafka-sasl-mechanism: SCRAM-SHA-512\nkafka-sasl-user: herald512\nkafka-tls-ca-file: " + ca.caFile, testSASLPassword, true, ""},
		{"SCRAM-SHA-256 connects", "kafka-sasl-mechanism: SCRAM-SHA-256\nkafka-sasl-user: herald256\nkafka-tls-ca-file: " + ca.caFile, testSASLPassword, true, ""},
		{"PLAIN with a client certificate connects", "kafka-sasl-mechanism: PLAIN\nkafka-sasl-user: heraldplain\nkafka-tls-ca-file: " + ca.caFile +
			"\nkafka-tls-cert-file: " + ca.clientCert + "\nkafka-tls-key-file: " + ca.clientKey, testSASLPassword, true, ""},
		{"a wrong SCRAM password is refused", "kafka-sasl-mechanism: SCRAM-SHA-512\nkafka-sasl-user: herald512\nkafka-tls-ca-file: " + ca.caFile, testVAPIDPrivate, false, "deadline exceeded"}, // franz-go retries the failed authentication until the context ends
		{"a server certificate the system does not trust is refused", "kafka-sasl-mechanism: SCRAM-SHA-512\nkafka-sasl-user: herald512\nkafka-tls: true", testSASLPassword, false, "certificate signed by unknown authority"},
		{"without TLS the TLS listener does not answer", "kafka-sasl-mechanism: SCRAM-SHA-512\nkafka-sasl-user: herald512", testSASLPassword, false, "is TLS missing?"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("HERALD_KAFKA_SASL_PASSWORD", tc.password)
			path := writeFile(t, "herald.yaml", "brokers: "+brokers+"\npartitions: 1\nreplication: 1\ntopic-prefix: cfg"+string(rune('a'+i))+".\n"+tc.config+"\n")
			// A refused client retries until its context ends: a bound, not an assertion.
			bound := time.Minute
			if !tc.ok {
				bound = 3 * time.Second
			}
			ctx, cancel := context.WithTimeout(t.Context(), bound)
			defer cancel()
			var out, errb bytes.Buffer
			code := run(ctx, []string{"topics", "create", "--config", path}, &out, &errb)
			if (code == 0) != tc.ok {
				t.Fatalf("exit %d, want success %v:\n%s%s", code, tc.ok, out.String(), errb.String())
			}
			if !strings.Contains(errb.String(), tc.why) {
				t.Fatalf("stderr lacks %q: %s", tc.why, errb.String())
			}
			assertNoSecret(t, "herald topics create", out.String()+errb.String())
		})
	}
}

// TestARolesLogsShowNoSecret starts `herald dedupe` and `herald sink
// --channel webpush` (which reads the VAPID private key) from a
// configuration file holding every kind of secret, against a cluster
// requiring SCRAM over TLS (kfake), runs each until /readyz answers 200,
// stops it, and reads every line it logged at debug level: the connection
// is described (mechanism, user, CA file) and no secret appears.
func TestARolesLogsShowNoSecret(t *testing.T) {
	ca := newTestCA(t)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(),
		kfake.Superuser("SCRAM-SHA-512", "herald512", testSASLPassword),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{ca.server}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	vapidPublic, vapidPrivate, err := webpush.GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	ops := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	path := writeFile(t, "herald.yaml", strings.Join([]string{
		"brokers: " + strings.Join(cluster.ListenAddrs(), ","),
		"partitions: 1", "replication: 1", "topic-prefix: secrets.",
		"kafka-sasl-mechanism: SCRAM-SHA-512", "kafka-sasl-user: herald512",
		"kafka-sasl-password: " + testSASLPassword,
		"kafka-tls-ca-file: " + ca.caFile,
		"clickhouse-password: " + testCHPassword,
		"webpush-vapid-public-key: " + vapidPublic,
		"webpush-vapid-private-key: " + vapidPrivate,
		"webpush-subscriber: mailto:ops@example.com",
		"apns-cert-password: " + testAPNSPassword,
		"metrics-addr: " + ops,
		"instance-id: secrets-0",
	}, "\n"))

	var logs testenv.LockedBuffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	defer slog.SetDefault(prev)

	var out, errb bytes.Buffer
	if code := run(t.Context(), []string{"topics", "create", "--config", path}, &out, &errb); code != 0 {
		t.Fatalf("topics create exits %d: %s", code, errb.String())
	}
	for _, role := range [][]string{{"dedupe"}, {"sink", "--channel", "webpush"}} {
		t.Run("herald "+strings.Join(role, " ")+" logs the connection and no secret", func(t *testing.T) {
			before := len(logs.String())
			roleErr := runUntilReady(t, ops, append(role, "--config", path)...)
			all := logs.String()[before:] + roleErr
			if want := "TLS, CA " + ca.caFile + ", SASL SCRAM-SHA-512 as herald512"; !strings.Contains(all, want) {
				t.Fatalf("the logs do not describe the connection (%q):\n%s", want, all)
			}
			assertNoSecret(t, "herald "+role[0]+"'s logs", all)
			if strings.Contains(all, vapidPrivate) {
				t.Fatalf("herald %s's logs show the VAPID private key:\n%s", role[0], all)
			}
		})
	}
	assertNoSecret(t, "herald topics create", logs.String()+out.String()+errb.String())
}

// tlsProxy terminates TLS (the generated CA's server certificate; a client
// certificate required when clientCAs is set) and forwards the bytes to
// backend: a real server reached over TLS.
func tlsProxy(t *testing.T, ca testCA, clientCAs *x509.CertPool, backend string) string {
	t.Helper()
	cfg := &tls.Config{Certificates: []tls.Certificate{ca.server}}
	if clientCAs != nil {
		cfg.ClientCAs, cfg.ClientAuth = clientCAs, tls.RequireAndVerifyClientCert
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if err := c.(*tls.Conn).Handshake(); err != nil {
					return
				}
				b, err := net.Dial("tcp", backend)
				if err != nil {
					return
				}
				defer b.Close()
				go func() { io.Copy(b, c); b.Close() }()
				io.Copy(c, b)
			}()
		}
	}()
	return ln.Addr().String()
}

// TestClickHouseOverTLSFromTheConfigFile runs `herald migrate` with the
// ClickHouse TLS settings of a configuration file against the test
// ClickHouse server behind a TLS proxy with a generated CA (the server
// itself serves no TLS port): the real handshake, with mutual TLS, and the
// real server answering through it.
func TestClickHouseOverTLSFromTheConfigFile(t *testing.T) {
	addr, db := testenv.ClickHouseDB(t)
	ca := newTestCA(t)
	pool := x509.NewCertPool()
	caPEM, _ := os.ReadFile(ca.caFile)
	pool.AppendCertsFromPEM(caPEM)
	proxy := tlsProxy(t, ca, pool, addr)
	base := "clickhouse-addr: " + proxy + "\ndatabase: " + db + "\n"
	tests := []struct {
		name, config string
		ok           bool
		why          string
		password     string
	}{
		{"with the CA and a client certificate herald migrate runs over TLS", base + "clickhouse-tls-ca-file: " + ca.caFile +
			"\nclickhouse-tls-cert-file: " + ca.clientCert + "\nclickhouse-tls-key-file: " + ca.clientKey, true, "", ""},
		{"without the CA the server's certificate is refused", base + "clickhouse-tls: true\nclickhouse-tls-cert-file: " + ca.clientCert +
			"\nclickhouse-tls-key-file: " + ca.clientKey, false, "certificate signed by unknown authority", ""},
		{"without a client certificate the server refuses the client", base + "clickhouse-tls-ca-file: " + ca.caFile, false, "tls: certificate required", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, "herald.yaml", tc.config)
			t.Setenv("HERALD_CLICKHOUSE_PASSWORD", tc.password) // the test server's default user has none
			var out, errb bytes.Buffer
			code := run(t.Context(), []string{"migrate", "--config", path}, &out, &errb)
			if (code == 0) != tc.ok || !strings.Contains(errb.String(), tc.why) {
				t.Fatalf("exit %d, want success %v and %q in:\n%s%s", code, tc.ok, tc.why, out.String(), errb.String())
			}
			if tc.ok && !strings.Contains(out.String(), "ok: database "+db) {
				t.Fatalf("migrate over TLS did not finish:\n%s", out.String())
			}
			assertNoSecret(t, "herald migrate", out.String()+errb.String())
		})
	}
}

// runUntilReady runs the role in this process until its /readyz (on ops)
// answers 200, stops it, requires exit 0, and returns what it wrote to
// stderr.
func runUntilReady(t *testing.T, ops string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var errb bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, args, io.Discard, &errb) }()
	deadline := time.Now().Add(configTestTimeout)
	for {
		if resp, err := http.Get("http://" + ops + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case code := <-done:
			t.Fatalf("herald %s exited %d before it was ready: %s", args[0], code, errb.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("herald %s not ready after %v: %s", args[0], configTestTimeout, errb.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("herald %s exited %d: %s", args[0], code, errb.String())
	}
	return errb.String()
}
