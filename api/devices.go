package api

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sdk"
	"github.com/heraldhq/herald/sinks/email"
	"github.com/heraldhq/herald/topics"
)

func deviceOut(d schemas.Device) sdk.Device {
	out := sdk.Device{UserID: d.Recipient, DeviceID: d.DeviceID, Platform: d.Platform, Token: d.Token,
		Locale: d.Locale, TimeZone: d.TimeZone, Enabled: d.Enabled, Tags: d.Tags, CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt}
	if d.Platform == sdk.PlatformEmail { // the address is the device's token on herald.devices
		out.Email, out.Token = d.Token, ""
	}
	if d.WebPush != nil {
		out.WebPush = &sdk.WebPushSubscription{Endpoint: d.WebPush.Endpoint, P256dh: d.WebPush.P256dh, Auth: d.WebPush.Auth}
	}
	return out
}

func (s *Server) listDevices(w http.ResponseWriter, r *http.Request, p principal) {
	user, ok := s.readyPath(w, r, "userId")
	if !ok {
		return
	}
	out := sdk.DeviceList{Devices: []sdk.Device{}}
	for _, d := range s.rep.userDevices(p.tenant, user) {
		out.Devices = append(out.Devices, deviceOut(d))
	}
	writeJSON(w, http.StatusOK, out)
}

// devicePath reads {userId} and {deviceId}, answering the problem of the
// first that is bad.
func devicePath(w http.ResponseWriter, r *http.Request) (user, device string, ok bool) {
	if user, ok = pathParam(w, r, "userId"); ok {
		device, ok = pathParam(w, r, "deviceId")
	}
	return user, device, ok
}

func (s *Server) getDevice(w http.ResponseWriter, r *http.Request, p principal) {
	user, device, ok := devicePath(w, r)
	if !ok || !s.replicaReady(w) {
		return
	}
	d, found := s.rep.device(p.tenant, user, device)
	writeFound(w, found, "device", d, deviceOut)
}

// maxTags bounds the tags of one device.
const maxTags = 64

// putDevice registers a device or updates it (a token rotation): 201 for a
// new device, 200 for an update. The body replaces the device, tags
// included.
func (s *Server) putDevice(w http.ResponseWriter, r *http.Request, p principal) {
	user, device, ok := devicePath(w, r)
	if !ok {
		return
	}
	f, ok := s.readObject(w, r)
	if !ok {
		return
	}
	d := schemas.Device{Tenant: p.tenant, Recipient: user, DeviceID: device, Enabled: true}
	d.Platform = f.text("platform", !f.has("email"), 16)
	if d.Platform == "" && f.has("email") {
		d.Platform = sdk.PlatformEmail // {"email": …} alone registers an address
	}
	if d.Platform != "" && !slices.Contains([]string{sdk.PlatformIOS, sdk.PlatformAndroid, sdk.PlatformWeb, sdk.PlatformEmail}, d.Platform) {
		f.fail("platform", "must be ios, android, web or email")
	}
	d.Token = f.text("token", false, 4096)
	if f.has("email") {
		addr := f.text("email", true, 254)
		if err := email.CheckAddress(addr); addr != "" && err != nil {
			f.fail("email", err.Error())
		}
		if d.Platform == sdk.PlatformEmail {
			d.Token = addr // an address is its device's token (sinks/email)
		}
	}
	if wp := f.child("webPush"); wp != nil {
		sub := &schemas.WebPushSubscription{
			Endpoint: wp.text("endpoint", true, 2048),
			P256dh:   wp.text("p256dh", true, 256),
			Auth:     wp.text("auth", true, 256),
		}
		if sub.Endpoint != "" && !strings.HasPrefix(sub.Endpoint, "https://") {
			wp.fail("endpoint", "must be an https URL")
		}
		wp.unknown()
		d.WebPush = sub
	}
	d.Locale = f.text("locale", false, maxLocaleLen)
	d.TimeZone = f.timeZone("timeZone", false)
	if en, ok := f.boolean("enabled"); ok {
		d.Enabled = en
	}
	if tags, ok := f.strings("tags"); ok {
		if len(tags) > maxTags {
			f.fail("tags", fmt.Sprintf("at most %d tags", maxTags))
		}
		f.distinctIDs("tags", tags)
		if len(tags) > 0 {
			d.Tags = tags
		}
	}
	switch d.Platform {
	case sdk.PlatformIOS, sdk.PlatformAndroid:
		if !f.has("token") {
			f.fail("token", "is required for "+d.Platform)
		}
		if f.has("webPush") {
			f.fail("webPush", "is only for web devices")
		}
	case sdk.PlatformWeb:
		if !f.has("webPush") {
			f.fail("webPush", "is required for web")
		}
		if f.has("token") {
			f.fail("token", "is not used by web devices (send webPush)")
		}
	case sdk.PlatformEmail:
		if !f.has("email") {
			f.fail("email", "is required for email")
		}
		if f.has("token") {
			f.fail("token", "is not used by email devices (send email)")
		}
		if f.has("webPush") {
			f.fail("webPush", "is only for web devices")
		}
	}
	if f.has("email") && d.Platform != sdk.PlatformEmail && d.Platform != "" {
		f.fail("email", "is only for email devices (platform email)")
	}
	if !f.valid(w) || !s.replicaReady(w) {
		return
	}
	now := time.Now()
	old, existed := s.rep.device(p.tenant, user, device)
	d.CreatedAt, d.UpdatedAt = now.UnixMilli(), now.UnixMilli()
	if existed {
		d.CreatedAt = old.CreatedAt
	}
	// A web device gets a fresh receipt token at each registration (see
	// receipts.go): answered once, only its hash kept.
	var token string
	if d.Platform == sdk.PlatformWeb {
		token, d.ReceiptTokenSHA256 = newReceiptToken(p.tenant, user, device)
	}
	key := schemas.DeviceKey(p.tenant, user, device)
	if !s.put(w, r, s.devicesT, key, d) {
		return
	}
	s.rep.putDevice(key, &d)
	status := http.StatusCreated
	if existed {
		status = http.StatusOK
	}
	out := deviceOut(d)
	out.ReceiptToken = token
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, status, out)
}

func (s *Server) deleteDevice(w http.ResponseWriter, r *http.Request, p principal) {
	user, device, ok := devicePath(w, r)
	if !ok || !s.replicaReady(w) {
		return
	}
	_, found := s.rep.device(p.tenant, user, device)
	deleteRecord(s, w, r, found, "device", s.devicesT, schemas.DeviceKey(p.tenant, user, device), s.rep.putDevice)
}

var hhmm = regexp.MustCompile(`^([01][0-9]|2[0-3]):[0-5][0-9]$`)

// maxZoneLen bounds a time zone name.
const maxZoneLen = 64

// timeZone reads a time zone member (as text does) and checks that it
// names the same zone on every host: one time.LoadLocation loads (an IANA
// name, or UTC), not "Local", the zone of whichever host reads it. The
// route stage reads a zone it cannot load as UTC, so an unknown one would
// put quiet hours at the wrong time. Both read the IANA database the route
// package embeds (time/tzdata) where the host has none.
func (f *fields) timeZone(name string, required bool) string {
	before := len(*f.semErrs)
	z := f.text(name, required, maxZoneLen)
	if z == "" || len(*f.semErrs) > before {
		return z
	}
	if z == "Local" {
		f.fail(name, "must be an IANA time zone name (e.g. Europe/Paris) or UTC, not Local (the host's zone)")
	} else if _, err := time.LoadLocation(z); err != nil {
		f.fail(name, "is not a known IANA time zone name (e.g. Europe/Paris) or UTC")
	}
	return z
}

func prefsOut(pr schemas.Preferences) sdk.Preferences {
	out := sdk.Preferences{UserID: pr.Recipient, Channels: pr.Channels, OptedOutTypes: pr.OptedOutTypes, UpdatedAt: pr.UpdatedAt}
	if out.Channels == nil {
		out.Channels = map[string]bool{}
	}
	if out.OptedOutTypes == nil {
		out.OptedOutTypes = []string{}
	}
	if q := pr.QuietHours; q != nil {
		out.QuietHours = &sdk.QuietHours{Start: q.Start, End: q.End, TimeZone: q.TimeZone}
	}
	return out
}

func (s *Server) getPreferences(w http.ResponseWriter, r *http.Request, p principal) {
	user, ok := s.readyPath(w, r, "userId")
	if !ok {
		return
	}
	pr, found := s.rep.preferences(p.tenant, user)
	writeFound(w, found, "preferences", pr, prefsOut)
}

// putPreferences replaces a user's preferences.
func (s *Server) putPreferences(w http.ResponseWriter, r *http.Request, p principal) {
	user, ok := pathParam(w, r, "userId")
	if !ok {
		return
	}
	f, ok := s.readObject(w, r)
	if !ok {
		return
	}
	pr := schemas.Preferences{Tenant: p.tenant, Recipient: user}
	if ch := f.child("channels"); ch != nil {
		pr.Channels = map[string]bool{}
		for _, c := range topics.Channels {
			if v, ok := ch.boolean(c); ok {
				pr.Channels[c] = v
			}
		}
		ch.unknown()
	}
	if types, ok := f.strings("optedOutTypes"); ok {
		seen := map[string]bool{}
		for i, t := range types {
			field := fmt.Sprintf("optedOutTypes[%d]", i)
			switch {
			case t == "":
				f.fail(field, "must not be empty")
			case utf8.RuneCountInString(t) > maxIDLen:
				f.fail(field, fmt.Sprintf("must be at most %d characters", maxIDLen))
			case seen[t]:
				f.fail(field, "repeats a type")
			}
			seen[t] = true
		}
		pr.OptedOutTypes = types
	}
	if q := f.child("quietHours"); q != nil {
		qh := &schemas.QuietHours{Start: q.text("start", true, 5), End: q.text("end", true, 5), TimeZone: q.timeZone("timeZone", true)}
		if qh.Start != "" && !hhmm.MatchString(qh.Start) {
			q.fail("start", "must be HH:MM (24 h)")
		}
		if qh.End != "" && !hhmm.MatchString(qh.End) {
			q.fail("end", "must be HH:MM (24 h)")
		}
		q.unknown()
		pr.QuietHours = qh
	}
	if !f.valid(w) || !s.replicaReady(w) {
		return
	}
	now := time.Now()
	pr.UpdatedAt = now.UnixMilli()
	key := schemas.RecipientKey(p.tenant, user)
	if !s.put(w, r, s.prefsT, key, pr) {
		return
	}
	s.rep.putPreferences(key, &pr)
	writeJSON(w, http.StatusOK, prefsOut(pr))
}

func (s *Server) deletePreferences(w http.ResponseWriter, r *http.Request, p principal) {
	user, ok := s.readyPath(w, r, "userId")
	if !ok {
		return
	}
	_, found := s.rep.preferences(p.tenant, user)
	deleteRecord(s, w, r, found, "preferences", s.prefsT, schemas.RecipientKey(p.tenant, user), s.rep.putPreferences)
}
