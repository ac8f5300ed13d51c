package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/heraldhq/herald/sinks/fcm"
	fcmemulator "github.com/heraldhq/herald/sinks/fcm/emulator"
	"github.com/heraldhq/herald/sinks/webpush"
)

// fcmFlags configure the FCM adapter. The service account key is read from
// its file, never logged.
type fcmFlags struct {
	credentialsFile, project, endpoint, priority string
}

func (f *fcmFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.credentialsFile, "fcm-credentials-file", "", "the Firebase service account key (JSON) file")
	fs.StringVar(&f.project, "fcm-project", "", "the Firebase project id (default: the key's project_id)")
	fs.StringVar(&f.endpoint, "fcm-endpoint", "", "FCM HTTP v1 base URL (default https://fcm.googleapis.com/v1; an emulator's URL + /v1)")
	fs.StringVar(&f.priority, "fcm-priority", "high", "android.priority: high or normal")
	addCheck(fs, f.check)
}

// check reports every bad FCM setting that can be seen without a channel.
func (f *fcmFlags) check() error {
	var errs []error
	if f.credentialsFile != "" {
		if _, err := os.Stat(f.credentialsFile); err != nil {
			errs = append(errs, badField("fcm-credentials-file", "cannot be read: %v", err))
		}
	}
	if f.priority != "high" && f.priority != "normal" {
		errs = append(errs, badField("fcm-priority", "must be high or normal, got %q", f.priority))
	}
	return errors.Join(errs...)
}

func (f *fcmFlags) provider(ctx context.Context) (*fcm.Provider, error) {
	if f.credentialsFile == "" {
		return nil, fmt.Errorf("%w: --fcm-credentials-file (HERALD_FCM_CREDENTIALS_FILE) is required", errUsage)
	}
	return fcm.New(ctx, fcm.Config{CredentialsFile: f.credentialsFile, ProjectID: f.project, Endpoint: f.endpoint, Priority: f.priority})
}

// webpushFlags configure the Web Push adapter. The private key is never
// logged; prefer HERALD_WEBPUSH_VAPID_PRIVATE_KEY to the flag.
type webpushFlags struct {
	public, private, subscriber, urgency string
}

func (w *webpushFlags) register(fs *flag.FlagSet) {
	w.registerPublic(fs)
	fs.StringVar(&w.private, "webpush-vapid-private-key", "", "the VAPID private key, unpadded base64url (prefer HERALD_WEBPUSH_VAPID_PRIVATE_KEY)")
	fs.StringVar(&w.subscriber, "webpush-subscriber", "", "the VAPID contact: mailto: address or https URL")
	fs.StringVar(&w.urgency, "webpush-urgency", "high", "Urgency header: very-low, low, normal or high")
	addCheck(fs, func() error {
		switch w.urgency {
		case "very-low", "low", "normal", "high":
			return nil
		}
		return badField("webpush-urgency", "must be very-low, low, normal or high, got %q", w.urgency)
	})
	addCheck(fs, func() error {
		var errs []error
		if w.private != "" && webpush.CheckVAPIDPublicKey(w.public) == nil { // a bad public key is named by its own check
			if err := webpush.CheckVAPIDKeys(w.public, w.private); err != nil {
				errs = append(errs, badField("webpush-vapid-private-key", "%v", strings.TrimPrefix(err.Error(), "webpush: ")))
			}
		}
		if err := webpush.CheckSubscriber(w.subscriber); err != nil {
			errs = append(errs, badField("webpush-subscriber", "%v", strings.TrimPrefix(err.Error(), "webpush: ")))
		}
		return errors.Join(errs...)
	})
}

// registerPublic registers only the public key (what the API serves).
func (w *webpushFlags) registerPublic(fs *flag.FlagSet) {
	fs.StringVar(&w.public, "webpush-vapid-public-key", "", "the VAPID public key, unpadded base64url (browsers subscribe with it)")
	addCheck(fs, func() error {
		if w.public == "" {
			return nil
		}
		if err := webpush.CheckVAPIDPublicKey(w.public); err != nil {
			return badField("webpush-vapid-public-key", "%v", strings.TrimPrefix(err.Error(), "webpush: "))
		}
		return nil
	})
}

func (w *webpushFlags) provider() (*webpush.Provider, error) {
	if w.public == "" || w.private == "" {
		return nil, fmt.Errorf("%w: --webpush-vapid-public-key and --webpush-vapid-private-key are required", errUsage)
	}
	return webpush.New(webpush.Config{VAPIDPublicKey: w.public, VAPIDPrivateKey: w.private, Subscriber: w.subscriber, Urgency: w.urgency})
}

// vapidKeys is the VAPID key pair `herald dev` keeps in its state dir.
type vapidKeys struct {
	PublicKey  string `json:"publicKey"`
	PrivateKey string `json:"privateKey"`
}

// devVAPIDKeys returns the dev VAPID key pair from dir/webpush-vapid.json,
// generating and saving it (mode 0600) on first start: subscriptions made
// against one dev start keep working in the next.
func devVAPIDKeys(dir string) (vapidKeys, error) {
	path := filepath.Join(dir, "webpush-vapid.json")
	var k vapidKeys
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		if err := json.Unmarshal(b, &k); err != nil || k.PublicKey == "" || k.PrivateKey == "" {
			return k, fmt.Errorf("dev: %s is not a VAPID key pair (delete it to make a new one)", path)
		}
		return k, nil
	case !errors.Is(err, os.ErrNotExist):
		return k, fmt.Errorf("dev: read the VAPID keys: %w", err)
	}
	if k.PublicKey, k.PrivateKey, err = webpush.GenerateVAPIDKeys(); err != nil {
		return k, fmt.Errorf("dev: generate the VAPID keys: %w", err)
	}
	b, _ = json.Marshal(k)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return k, fmt.Errorf("dev: save the VAPID keys: %w", err)
	}
	return k, nil
}

// devFCMProvider is the FCM adapter of `herald dev`, and the emulator it
// sends to when there is one.
type devFCMProvider struct {
	p  *fcm.Provider
	em *fcmemulator.Emulator
}

func (d devFCMProvider) close() {
	d.p.CloseIdleConnections()
	if d.em != nil {
		d.em.Close()
	}
}

// devFCM starts the local FCM emulator (unless emulate is false) and the
// adapter that sends to it; note says where messages go.
func devFCM(ctx context.Context, emulate bool, addr string, f *fcmFlags, log *slog.Logger) (d devFCMProvider, note string, err error) {
	if !emulate {
		if d.p, err = f.provider(ctx); err != nil {
			return d, "", fmt.Errorf("dev: fcm: %w", err)
		}
		return d, "fcm " + f.endpoint, nil
	}
	if d.em, err = fcmemulator.Start(fcmemulator.Options{Addr: addr, MaxRecords: 1000, Logger: log.With("component", "fcm-emulator")}); err != nil {
		return d, "", fmt.Errorf("dev: %w", err)
	}
	if d.p, err = fcm.New(ctx, fcm.Config{Endpoint: d.em.URL() + "/v1", CredentialsJSON: d.em.ServiceAccountJSON()}); err != nil {
		d.em.Close()
		return d, "", fmt.Errorf("dev: fcm: %w", err)
	}
	return d, "fcm emulator " + d.em.URL() + " (messages: " + d.em.URL() + "/emulator/messages)", nil
}

// runEmulateFCM implements `herald emulate fcm`: a local FCM (HTTP v1
// messages:send and the OAuth token endpoint) until SIGINT or SIGTERM.
// Point a sink at it with --fcm-endpoint URL/v1 and the service account
// key it writes to --credentials-out (made at each start: a dev key, never
// a real one).
func runEmulateFCM(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("emulate fcm")
	addr := fs.String("addr", "127.0.0.1:4010", "address to listen on")
	listenAddr(fs, "addr", addr, false)
	project := fs.String("project", "herald-dev", "the emulated Firebase project id")
	baseURL := fs.String("base-url", "", "the URL clients reach it at, for the key's token_uri (default http://ADDR; e.g. http://fcm-emulator:4010 in compose)")
	var ff faultFlags
	ff.register(fs, "messages", "a connection reset")
	credsOut := fs.String("credentials-out", "", "write the emulator's service account key (JSON) here, for --fcm-credentials-file")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	em, err := fcmemulator.Start(fcmemulator.Options{Addr: *addr, ProjectID: *project, BaseURL: *baseURL, Latency: ff.latency, MaxRecords: 10_000})
	if err != nil {
		return err
	}
	defer em.Close()
	em.SetFaults(fcmemulator.Faults{ResetRate: ff.resetRate, SlowRate: ff.slowRate, SlowDelay: ff.slowDelay})
	if *credsOut != "" {
		if err := os.WriteFile(*credsOut, em.ServiceAccountJSON(), 0o600); err != nil {
			return fmt.Errorf("emulate: write --credentials-out: %w", err)
		}
	}
	fmt.Fprintf(stdout, "fcm emulator listening on %s (endpoint %s/v1, messages: %s/emulator/messages)\n", em.URL(), em.URL(), em.URL())
	<-ctx.Done()
	return nil
}
