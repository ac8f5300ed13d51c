package apns_test

import (
	"crypto/tls"
	"io"
	"strings"

	"github.com/heraldhq/herald/sinks/apns/emulator"
)

func tlsConfig(em *emulator.Emulator) *tls.Config { return &tls.Config{RootCAs: em.RootCAs()} }

func stringsReader(s string) io.Reader { return strings.NewReader(s) }
