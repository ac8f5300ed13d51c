package api

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/heraldhq/herald/schemas"
)

// BenchmarkReplicaBytesPerDevice reports the heap one registered device
// (a user with one iOS device, two tags) costs an API instance's replica:
// the replica's cost grows with the registry, not with the sends.
func BenchmarkReplicaBytesPerDevice(b *testing.B) {
	const n = 100_000
	for range b.N {
		r := newReplica("", "devices", "prefs", "segments")
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := range n {
			user := fmt.Sprintf("user-%07d", i)
			d := schemas.Device{Tenant: "acme", Recipient: user, DeviceID: "phone", Platform: "ios",
				Token: fmt.Sprintf("%064x", i), Enabled: true, Tags: []string{"vip", "beta"}, Locale: "en-GB", TimeZone: "Europe/London"}
			r.putDevice(schemas.DeviceKey("acme", user, "phone"), &d)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/device")
		runtime.KeepAlive(r)
	}
}
