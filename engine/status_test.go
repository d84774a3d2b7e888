package engine

import (
	"reflect"
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

// Counters.Add sums every field of Counters, whatever it is named: each
// uint64 and each map entry of one snapshot with every counter set comes
// out doubled from adding it to itself, and an empty Counters takes every
// key of a snapshot. An edge host's /status is such a sum.
func TestCountersAddSumsEveryField(t *testing.T) {
	var c counters
	c.upstreamFailed.Add(1)
	one := c.snapshot()
	setAll(t, reflect.ValueOf(&one).Elem(), 1)
	var sum Counters
	sum.Add(one)
	sum.Add(one)
	v := reflect.ValueOf(sum)
	for i := range v.NumField() {
		name, f := v.Type().Field(i).Name, v.Field(i)
		switch f.Kind() {
		case reflect.Uint64:
			if f.Uint() != 2 {
				t.Errorf("%s = %d, want 2", name, f.Uint())
			}
		case reflect.Map:
			want := reflect.ValueOf(one).Field(i).Len()
			if f.Len() != want || want == 0 {
				t.Errorf("%s has %d keys, want %d (and some)", name, f.Len(), want)
			}
			for _, k := range f.MapKeys() {
				if n := f.MapIndex(k).Uint(); n != 2 {
					t.Errorf("%s[%s] = %d, want 2", name, k, n)
				}
			}
		}
	}
}

// setAll sets every uint64 and every map value of the struct v to n.
func setAll(t *testing.T, v reflect.Value, n uint64) {
	for i := range v.NumField() {
		switch f := v.Field(i); f.Kind() {
		case reflect.Uint64:
			f.SetUint(n)
		case reflect.Map:
			for _, k := range f.MapKeys() {
				f.SetMapIndex(k, reflect.ValueOf(n))
			}
		default:
			t.Fatalf("Counters.%s is a %s", v.Type().Field(i).Name, f.Kind())
		}
	}
}
