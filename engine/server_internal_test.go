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
	u := newUpstream(Endpoint{Addr: netip.MustParseAddrPort("127.0.0.1:53")})
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

// The charge of each outcome, as the failure and demotion rules state it:
// engine-servers.good-reply-clears-demotion,
// engine-servers.send-error-fails-attempt-at-once (local errors excepted).
// Probes follow the same rule, except that a truncated reply shows the
// server alive (no retry follows) and nothing counts upstream_failed.
func TestChargeForEachOutcome(t *testing.T) {
	question := map[Outcome]charge{
		OutcomeAnswer:       {clearMark: true},
		OutcomeNXDomain:     {clearMark: true},
		OutcomeTruncated:    {},
		OutcomeTimeout:      {demote: true, failed: true},
		OutcomeRcode:        {demote: true, failed: true},
		OutcomeSendError:    {demote: true, failed: true},
		OutcomeRecvError:    {demote: true, failed: true},
		OutcomeConnectError: {demote: true, failed: true},
		OutcomeLocalError:   {failed: true},
		OutcomeCancelled:    {},
		// An encrypted server's failed handshake is a failed attempt
		// like a timeout.
		OutcomeHandshakeError: {demote: true, failed: true},
	}
	probe := map[Outcome]charge{
		OutcomeAnswer:         {clearMark: true},
		OutcomeNXDomain:       {clearMark: true},
		OutcomeTruncated:      {clearMark: true},
		OutcomeTimeout:        {demote: true},
		OutcomeRcode:          {demote: true},
		OutcomeSendError:      {demote: true},
		OutcomeRecvError:      {demote: true},
		OutcomeConnectError:   {demote: true},
		OutcomeLocalError:     {},
		OutcomeCancelled:      {},
		OutcomeHandshakeError: {demote: true},
	}
	for o := Outcome(0); o < numOutcomes; o++ {
		if got := chargeFor(o, questionAttempt); got != question[o] {
			t.Errorf("question %v: %+v, want %+v", o, got, question[o])
		}
		if got := chargeFor(o, probeAttempt); got != probe[o] {
			t.Errorf("probe %v: %+v, want %+v", o, got, probe[o])
		}
	}
}
