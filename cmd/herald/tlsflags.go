package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"os"
)

// tlsFlags configure TLS to one component (Kafka, ClickHouse): the same
// five flags under the component's prefix, e.g. --kafka-tls,
// --kafka-tls-ca-file, --kafka-tls-cert-file, --kafka-tls-key-file,
// --kafka-tls-server-name. Files are read when the client is made, and
// their contents never logged.
type tlsFlags struct {
	prefix                                string
	enabled                               bool
	caFile, certFile, keyFile, serverName string
}

func (t *tlsFlags) register(fs *flag.FlagSet, prefix, component string) {
	t.prefix = prefix
	fs.BoolVar(&t.enabled, prefix+"-tls", false, "connect to "+component+" over TLS (implied by any other --"+prefix+"-tls-* flag)")
	fs.StringVar(&t.caFile, prefix+"-tls-ca-file", "", "PEM certificates to trust for "+component+" instead of the system's")
	fs.StringVar(&t.certFile, prefix+"-tls-cert-file", "", "client certificate (PEM) for "+component+" (mutual TLS; with --"+prefix+"-tls-key-file)")
	fs.StringVar(&t.keyFile, prefix+"-tls-key-file", "", "client certificate's private key (PEM) for "+component)
	fs.StringVar(&t.serverName, prefix+"-tls-server-name", "", "the name "+component+"'s certificate must carry (default: the host dialed)")
	addCheck(fs, func() error { _, err := t.config(); return err })
}

// on reports whether TLS is asked for.
func (t *tlsFlags) on() bool {
	return t.enabled || t.caFile != "" || t.certFile != "" || t.keyFile != "" || t.serverName != ""
}

// config returns the TLS configuration, nil when TLS is off. Its errors
// name the bad flag (badField), every one of them.
func (t *tlsFlags) config() (*tls.Config, error) {
	if !t.on() {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.serverName}
	var errs []error
	if t.caFile != "" {
		pool, err := readCAFile(t.prefix+"-tls-ca-file", t.caFile)
		if err != nil {
			errs = append(errs, err)
		}
		cfg.RootCAs = pool
	}
	switch {
	case t.certFile == "" && t.keyFile == "":
	case t.certFile == "":
		errs = append(errs, badField(t.prefix+"-tls-cert-file", "is required with --%s-tls-key-file", t.prefix))
	case t.keyFile == "":
		errs = append(errs, badField(t.prefix+"-tls-key-file", "is required with --%s-tls-cert-file", t.prefix))
	default:
		cert, err := tls.LoadX509KeyPair(t.certFile, t.keyFile)
		if err != nil {
			errs = append(errs, badField(t.prefix+"-tls-cert-file", "and --%s-tls-key-file are not a certificate and its key: %v", t.prefix, err))
		} else {
			cfg.Certificates = []tls.Certificate{cert}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return cfg, nil
}

// describe says how the component is reached, for a startup log line:
// whether TLS is on and which files it uses, never their contents.
func (t *tlsFlags) describe() string {
	if !t.on() {
		return "plaintext"
	}
	s := "TLS"
	if t.caFile != "" {
		s += ", CA " + t.caFile
	}
	if t.certFile != "" {
		s += ", client certificate " + t.certFile
	}
	return s
}

// readCAFile reads the PEM certificates of the CA file a flag names; its
// error names the flag (badField).
func readCAFile(flag, path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, badField(flag, "cannot be read: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, badField(flag, "%s holds no PEM certificate", path)
	}
	return pool, nil
}
