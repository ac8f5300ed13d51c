package webhook

import (
	"errors"
	"testing"
)

// TestTheDialTimeCheckJudgesTheDialledAddress: the Control of the guarded
// dialer lets a public address through and refuses an internal one or one
// it cannot read (the adapter's tests can only dial loopback, which it
// refuses, so the public case is checked here).
func TestTheDialTimeCheckJudgesTheDialledAddress(t *testing.T) {
	for _, c := range []struct {
		address string
		refused bool
	}{
		{"93.184.215.14:443", false}, {"[2606:4700::6810:85e5]:443", false},
		{"10.0.0.1:443", true}, {"[::ffff:127.0.0.1]:80", true}, {"example.com:443", true},
	} {
		t.Run(c.address, func(t *testing.T) {
			err := guardControl("tcp", c.address, nil)
			if errors.Is(err, ErrForbiddenAddress) != c.refused || (err != nil) != c.refused {
				t.Fatalf("guardControl(%s) = %v, want refused %v", c.address, err, c.refused)
			}
		})
	}
}
