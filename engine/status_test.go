package engine

import (
	"testing"
	"time"
)

// The statuses of several engines add up: every counter (probes
// included), the in-flight numbers, and the latest demotion of a server.
func TestMergeStatusesAddsUpEveryCounter(t *testing.T) {
	early, late := time.Unix(100, 0), time.Unix(200, 0)
	one := func(probes, attempts uint64, demotedUntil *time.Time) Status {
		return Status{
			Scopes: []ScopeStatus{{Name: "s", Servers: []ServerStatus{{Address: "127.0.0.1:53",
				Demoted: demotedUntil != nil, DemotedUntil: demotedUntil}}}},
			Counters: Counters{UpstreamFailed: 1, Refused: 2, Cancelled: 3, MismatchedReplies: 4, CacheHits: 5,
				Attempts:  map[string]uint64{"answer": attempts},
				Questions: map[string]uint64{"answer": 1},
				Probes:    map[string]uint64{"timeout": probes}},
			InFlight: 1, InFlightCeiling: 10,
		}
	}
	got := MergeStatuses([]Status{one(1, 2, nil), one(3, 4, &early), one(5, 6, &late)})
	c := got.Counters
	if c.UpstreamFailed != 3 || c.Refused != 6 || c.Cancelled != 9 || c.MismatchedReplies != 12 || c.CacheHits != 15 {
		t.Errorf("scalar counters %+v", c)
	}
	if c.Probes["timeout"] != 9 || c.Attempts["answer"] != 12 || c.Questions["answer"] != 3 {
		t.Errorf("probes %v attempts %v questions %v", c.Probes, c.Attempts, c.Questions)
	}
	if got.InFlight != 3 || got.InFlightCeiling != 30 {
		t.Errorf("in flight %d/%d", got.InFlight, got.InFlightCeiling)
	}
	if sv := got.Scopes[0].Servers[0]; !sv.Demoted || !sv.DemotedUntil.Equal(late) {
		t.Errorf("server %+v, want demoted until the latest mark", sv)
	}
	if MergeStatuses(nil).Counters.Probes == nil {
		t.Error("an empty merge has no probe map")
	}
}
