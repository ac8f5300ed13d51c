package testenv

import (
	"bufio"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

// Notifications is a desktop notification server (the freedesktop.org
// org.freedesktop.Notifications D-Bus service, what GNOME's or KDE's shell
// provides) on a private D-Bus session bus. Chromium on Linux shows web
// notifications through that service and, when the service reports a click
// (the ActionInvoked signal with the "default" action), dispatches a real
// notificationclick to the service worker: a trusted event with the user
// activation clients.openWindow needs, which no DevTools command and no
// script-made NotificationEvent gives.
type Notifications struct {
	conn *dbus.Conn
	mu   sync.Mutex
	next uint32
	seen []Notification
	note chan struct{}
}

// Notification is one Notify call: what the browser asked the desktop to
// show.
type Notification struct {
	ID      uint32
	App     string
	Summary string
	Body    string
	Actions []string
}

const (
	notifyName = "org.freedesktop.Notifications"
	notifyPath = dbus.ObjectPath("/org/freedesktop/Notifications")
)

// NotificationServer starts dbus-daemon (Debian's dbus-daemon package) with
// a session bus of the test's own, owns org.freedesktop.Notifications on it
// and points DBUS_SESSION_BUS_ADDRESS at it for the rest of the test, so a
// Chromium started afterwards (testenv.Chromium) shows its notifications
// here. Skipped under -short; fails when dbus-daemon is missing.
func NotificationServer(t testing.TB) *Notifications {
	t.Helper()
	skipShort(t, "a D-Bus session bus")
	exe, err := exec.LookPath("dbus-daemon")
	if err != nil {
		t.Fatalf("testenv: dbus-daemon is required for the notification server: %v", err)
	}
	sock := filepath.Join(t.TempDir(), "bus")
	cmd := exec.Command(exe, "--session", "--nofork", "--nopidfile", "--print-address=1", "--address=unix:path="+sock)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("testenv: start dbus-daemon: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("testenv: dbus-daemon printed no address: %v", err)
	}
	addr = strings.TrimSpace(addr)

	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatalf("testenv: connect to the session bus %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	n := &Notifications{conn: conn, note: make(chan struct{}, 1)}
	if err := conn.Export(notifyServer{n}, notifyPath, notifyName); err != nil {
		t.Fatalf("testenv: export the notification server: %v", err)
	}
	if reply, err := conn.RequestName(notifyName, dbus.NameFlagDoNotQueue); err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("testenv: own %s: %v (reply %v)", notifyName, err, reply)
	}
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", addr)
	return n
}

// notifyServer holds the D-Bus methods of the service (godbus exports
// every exported method of the value it is given).
type notifyServer struct{ n *Notifications }

func (s notifyServer) GetCapabilities() ([]string, *dbus.Error) {
	return []string{"actions", "body"}, nil
}

func (s notifyServer) GetServerInformation() (string, string, string, string, *dbus.Error) {
	return "herald-test", "heraldhq", "1", "1.2", nil
}

func (s notifyServer) Notify(app string, replaces uint32, icon, summary, body string, actions []string, hints map[string]dbus.Variant, timeout int32) (uint32, *dbus.Error) {
	n := s.n
	n.mu.Lock()
	defer n.mu.Unlock()
	id := replaces
	if id == 0 {
		n.next++
		id = n.next
	}
	n.seen = append(n.seen, Notification{ID: id, App: app, Summary: summary, Body: body, Actions: actions})
	select {
	case n.note <- struct{}{}:
	default:
	}
	return id, nil
}

func (s notifyServer) CloseNotification(id uint32) *dbus.Error {
	if err := s.n.conn.Emit(notifyPath, notifyName+".NotificationClosed", id, uint32(3)); err != nil {
		return dbus.MakeFailedError(err)
	}
	return nil
}

// Await waits until the browser has asked to show a notification whose
// summary (the title) is summary and returns it. The minute is a guard
// against a browser that never shows it, not a timed assertion.
func (n *Notifications) Await(t testing.TB, summary string) Notification {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		n.mu.Lock()
		for _, s := range n.seen {
			if s.Summary == summary {
				n.mu.Unlock()
				return s
			}
		}
		got := fmt.Sprint(n.seen)
		n.mu.Unlock()
		select {
		case <-n.note:
		case <-time.After(time.Second):
		case <-deadline:
			t.Fatalf("testenv: no notification %q reached the desktop (it shows %s)", summary, got)
		}
	}
}

// Click reports a click on the notification's body to the browser, as the
// desktop does when a person clicks it: ActionInvoked with the "default"
// action.
func (n *Notifications) Click(t testing.TB, id uint32) {
	t.Helper()
	if err := n.conn.Emit(notifyPath, notifyName+".ActionInvoked", id, "default"); err != nil {
		t.Fatalf("testenv: click notification %d: %v", id, err)
	}
}
