package testenv

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"
	"google.golang.org/protobuf/encoding/protowire"
)

// GCMService is the registration half of Chromium's push service (Google
// Cloud Messaging, which Chromium's PushManager.subscribe talks to), on
// loopback: the device check-in and the registration that issues a
// subscription's token. Chromium reaches it through its --gcm-checkin-url
// and --gcm-registration-url switches (Flags), so a page's
// pushManager.subscribe really runs in the browser — the browser makes
// its keys (p256dh, auth) and the endpoint — with no network. Without it,
// subscribe never answers offline: Chromium retries its check-in at
// android.clients.google.com with backoff.
//
// It delivers too (gcm_mcs.go): Chromium keeps an MCS connection open to
// it (--gcm-mcs-endpoint), and a push posted to a subscription's endpoint
// (on Google's host, reached through ProxyURL) is handed to Chromium over
// that connection, which decrypts it and fires the service worker's push
// event: the whole path a push takes in production, but Google's servers.
type GCMService struct {
	URL string
	// CertFile holds the certificate of the push endpoint (trust it with
	// SSL_CERT_FILE), ProxyURL the HTTPS proxy that reaches it (HTTPS_PROXY).
	CertFile, ProxyURL string

	spki, mcsAddr string
	repeat        int
	loggedIn      chan struct{}

	mu     sync.Mutex
	reg    []GCMRegistration
	mcs    *mcsConn
	pushes int
	posts  []gcmPost
}

// gcmPost is one push posted to the service: the subscription's token and
// the push's Topic header (herald's collapse id for Web Push).
type gcmPost struct{ token, topic string }

// GCMRegistration is one registration request Chromium made and the token
// it was issued.
type GCMRegistration struct {
	// App is Chromium's product category (app=), Subtype the push
	// subscription's app id (X-subtype=wp:<origin>#<uuid>), Sender the
	// subscription's applicationServerKey (the VAPID public key).
	App, Subtype, Sender, Token string
}

// Fixed check-in credentials: Chromium only wants them non-zero.
const (
	gcmAndroidID     = 4242
	gcmSecurityToken = 9999
)

// StartGCMService starts the service; it is stopped when t ends.
func StartGCMService(t testing.TB) *GCMService {
	t.Helper()
	g := &GCMService{repeat: 1, loggedIn: make(chan struct{}, 1)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /checkin", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		// AndroidCheckinResponse: stats_ok (1), android_id (7),
		// security_token (8).
		var b []byte
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
		b = protowire.AppendTag(b, 7, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, gcmAndroidID)
		b = protowire.AppendTag(b, 8, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, gcmSecurityToken)
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(b)
	})
	mux.HandleFunc("POST /register", func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			http.Error(w, "Error=INVALID_PARAMETERS", http.StatusBadRequest)
			return
		}
		if r.Header.Get("Authorization") != fmt.Sprintf("AidLogin %d:%d", gcmAndroidID, gcmSecurityToken) {
			http.Error(w, "Error=AUTHENTICATION_FAILED", http.StatusUnauthorized)
			return
		}
		if r.PostForm.Get("delete") != "" {
			fmt.Fprintf(w, "deleted=%s", r.PostForm.Get("app"))
			return
		}
		g.mu.Lock()
		reg := GCMRegistration{App: r.PostForm.Get("app"), Subtype: r.PostForm.Get("X-subtype"), Sender: r.PostForm.Get("sender"),
			Token: fmt.Sprintf("herald-test-token-%d", len(g.reg)+1)}
		g.reg = append(g.reg, reg)
		g.mu.Unlock()
		fmt.Fprintf(w, "token=%s", reg.Token)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	g.URL = srv.URL
	g.startDelivery(t)
	return g
}

// DeliverEachPushTwice makes the service hand every push to the browser
// twice (as two messages), as a push service that delivers twice would.
func (g *GCMService) DeliverEachPushTwice() { g.repeat = 2 }

// Posts is how many pushes were posted to the service's endpoints.
func (g *GCMService) Posts() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.posts)
}

// PostsWithTopic is how many pushes were posted with the Topic header
// topic: the posts of one notification, whatever else was posted.
func (g *GCMService) PostsWithTopic(topic string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, p := range g.posts {
		if p.topic == topic {
			n++
		}
	}
	return n
}

// LastPostedTo is the token of the subscription the last push was posted
// to.
func (g *GCMService) LastPostedTo() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.posts) == 0 {
		return ""
	}
	return g.posts[len(g.posts)-1].token
}

// Flags are the Chromium switches that point its push service here.
func (g *GCMService) Flags() []chromedp.ExecAllocatorOption {
	return []chromedp.ExecAllocatorOption{
		chromedp.Flag("gcm-checkin-url", g.URL+"/checkin"),
		chromedp.Flag("gcm-registration-url", g.URL+"/register"),
		chromedp.Flag("gcm-mcs-endpoint", "https://"+g.mcsAddr),
		chromedp.Flag("ignore-certificate-errors-spki-list", g.spki),
	}
}

// Registrations returns the push subscriptions' registrations so far (not
// Chromium's own: those with a subtype), in order.
func (g *GCMService) Registrations() []GCMRegistration {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []GCMRegistration
	for _, r := range g.reg {
		if r.Subtype != "" {
			out = append(out, r)
		}
	}
	return out
}

// Token is the token of a subscription's endpoint (its last path segment).
func Token(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil {
		return ""
	}
	return path.Base(u.Path)
}
