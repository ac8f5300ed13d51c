package api

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// APIKey is one configured key: the tenant it belongs to, a name for logs
// and the producer field (never the key), and the SHA-256 of the key.
type APIKey struct {
	Tenant string
	Name   string
	SHA256 [sha256.Size]byte
}

// DevAPIKey is the development key: tenant "dev", name "dev". It is public;
// use it only on a laptop (herald dev, herald api without --api-keys).
const DevAPIKey = "herald-dev-key"

// DevKeys returns the key set that accepts only DevAPIKey.
func DevKeys() []APIKey {
	return []APIKey{{Tenant: "dev", Name: "dev", SHA256: sha256.Sum256([]byte(DevAPIKey))}}
}

// HashKey returns the hex SHA-256 of a key, the form a key file holds.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// ParseKeys reads a key file: one "tenant:name:sha256hex" per line; blank
// lines and lines starting with '#' are ignored. Tenant and name must be
// non-empty and free of ':'; a hash must be 64 hex digits and unique.
func ParseKeys(r io.Reader) ([]APIKey, error) {
	var keys []APIKey
	seen := map[[sha256.Size]byte]bool{}
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		parts := strings.Split(text, ":")
		if len(parts) != 3 || parts[0] == "" || parts[1] == "" {
			return nil, fmt.Errorf("api: key file line %d: want tenant:name:sha256hex", line)
		}
		raw, err := hex.DecodeString(strings.ToLower(parts[2]))
		if err != nil || len(raw) != sha256.Size {
			return nil, fmt.Errorf("api: key file line %d: the hash must be 64 hex digits (sha256 of the key)", line)
		}
		k := APIKey{Tenant: parts[0], Name: parts[1]}
		copy(k.SHA256[:], raw)
		if seen[k.SHA256] {
			return nil, fmt.Errorf("api: key file line %d: the same key hash appears twice", line)
		}
		seen[k.SHA256] = true
		keys = append(keys, k)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("api: read key file: %w", err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("api: key file holds no keys")
	}
	return keys, nil
}

// principal is the authenticated caller.
type principal struct {
	tenant, name string
}

// authenticate finds the key of a "Bearer <key>" Authorization header. It
// hashes the presented key and compares the hash with every configured one
// in constant time, without stopping at a match, so timing tells nothing
// about which keys exist.
func authenticate(keys []APIKey, r *http.Request) (principal, bool) {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return principal{}, false
	}
	token = strings.TrimSpace(token)
	if token == "" {
		return principal{}, false
	}
	sum := sha256.Sum256([]byte(token))
	found := -1
	for i := range keys {
		if subtle.ConstantTimeCompare(sum[:], keys[i].SHA256[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return principal{}, false
	}
	return principal{tenant: keys[found].Tenant, name: keys[found].Name}, true
}

func unauthorized() *problem {
	p := newProblem(http.StatusUnauthorized, probUnauthorized, "Unauthorized", "send a valid API key as 'Authorization: Bearer <key>'")
	p.header = http.Header{"Www-Authenticate": {`Bearer realm="herald"`}}
	return p
}
