package engine

import (
	"net/netip"
	"testing"
	"time"
)

// engine-servers.demotion-marks-address-for-30-seconds: failures of
// concurrent transactions may be recorded out of order; a mark only ever
// moves forward, and a good reply still clears it.
func TestDemotionMarksAddressFor30SecondsOnlyForward(t *testing.T) {
	u := newUpstream(netip.MustParseAddrPort("127.0.0.1:53"))
	u.demote(10*time.Second, 30*time.Second)
	u.demote(5*time.Second, 30*time.Second) // an earlier failure, recorded late
	if got := u.markUntil(); got != 40*time.Second {
		t.Fatalf("mark ends at %v, want 40s", got)
	}
	u.demote(12*time.Second, 30*time.Second)
	if got := u.markUntil(); got != 42*time.Second {
		t.Fatalf("mark ends at %v, want 42s (moved forward)", got)
	}
	u.clear()
	if got := u.markUntil(); got != 0 {
		t.Fatalf("mark %v after a good reply, want none", got)
	}
}
