package engine

import (
	"reflect"
	"sync"
	"testing"
	"time"
)

// TestPooledFlightNotReusedWhileRead: a landed flight goes back to the
// pool only when its leader and every follower have let go of it. While
// a follower still holds it (it may not have read the result yet), no
// new flight is that flight, and what the leader set is still there; the
// last release empties it.
func TestPooledFlightNotReusedWhileRead(t *testing.T) {
	var f flights
	k := cacheKey{name: "held.example.", qtype: 1, qclass: 1}
	leaderTrace, followerTrace := &Trace{ID: [16]byte{1}}, &Trace{ID: [16]byte{2}}
	fl, leads := f.join(k, leaderTrace)
	if !leads {
		t.Fatal("the first to join does not lead")
	}
	follower, leads := f.join(k, followerTrace)
	if leads || follower != fl {
		t.Fatal("the second to join does not follow the same flight")
	}
	en := &entry{result: ResultAnswer}
	fl.entry, fl.result, fl.leaderID = en, ResultAnswer, 7
	f.land(k, fl, nil)
	fl.release() // the leader is done; the follower has not read yet

	// Many flights come and go (each from the pool) before the follower reads.
	for i := range 1000 {
		other := cacheKey{name: "other.example.", qtype: uint16(i), qclass: 1}
		o, _ := f.join(other, nil)
		if o == fl {
			t.Fatalf("flight %d is the one a follower still holds", i)
		}
		f.land(other, o, nil)
		o.release()
	}
	select {
	case <-fl.done:
	default:
		t.Fatal("the landed flight's done channel is not closed")
	}
	if fl.entry != en || fl.leaderID != 7 || !fl.hasLeader || fl.leader != *leaderTrace || len(fl.served) != 1 || fl.served[0] != *followerTrace {
		t.Fatalf("the held flight changed: %+v", fl)
	}
	fl.release() // the follower has read it
	if fl.entry != nil || fl.hasLeader || fl.done != nil || len(fl.served) != 0 || fl.refs.Load() != 0 {
		t.Fatalf("a released flight keeps its past: %+v", fl)
	}
}

// TestPooledFlightFollowersRace: followers read a flight's result while
// the leader lands and releases it, and new flights for the key start
// from the pool; run with -race, a reuse before the last follower read
// would be a data race (and a wrong result).
func TestPooledFlightFollowersRace(t *testing.T) {
	var f flights
	k := cacheKey{name: "race.example.", qtype: 1, qclass: 1}
	for round := range 200 {
		fl, leads := f.join(k, nil)
		if !leads {
			t.Fatal("no leader")
		}
		var wg sync.WaitGroup
		errs := make(chan string, 8)
		for range 8 {
			fo, leads := f.join(k, nil)
			if leads {
				t.Fatal("a follower leads")
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer fo.release()
				select {
				case <-fo.done:
				case <-time.After(10 * time.Second):
					errs <- "a follower's flight was emptied before it landed"
					return
				}
				if int(fo.spent) != round || fo.leaderID != uint64(round) {
					errs <- "a follower read another flight's result"
				}
			}()
		}
		fl.spent, fl.leaderID = int32(round), uint64(round)
		f.land(k, fl, nil)
		fl.release()
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Fatal(e)
		}
	}
}

// TestFlightsSharingAHash: flights whose keys have the same hash (forced
// here; by chance one in 2^64) are chained: each question finds its own
// key's flight, and landing one in any order leaves the others flying.
func TestFlightsSharingAHash(t *testing.T) {
	var f flights
	const h = 42
	keys := []cacheKey{{name: "a.example.", qtype: 1, qclass: 1}, {name: "b.example.", qtype: 1, qclass: 1}, {name: "a.example.", qtype: 28, qclass: 1}}
	var fls []*flight
	for _, k := range keys {
		fl, leads := f.joinHashed(k, h, nil)
		if !leads {
			t.Fatalf("%v follows another key's flight", k)
		}
		fls = append(fls, fl)
	}
	for i, k := range keys {
		if fl, leads := f.joinHashed(k, h, nil); leads || fl != fls[i] {
			t.Fatalf("%v: leads %v, same flight %v", k, leads, fl == fls[i])
		}
	}
	for _, i := range []int{1, 2, 0} { // the middle, the head, the last
		f.land(keys[i], fls[i], nil)
		for j, k := range keys {
			f.mu.Lock()
			var found *flight
			for fl := f.m[h]; fl != nil; fl = fl.next {
				if fl.key == k {
					found = fl
				}
			}
			f.mu.Unlock()
			landed := j == i || (i == 2 && j == 1) || i == 0
			if (found == nil) != landed || found != nil && found != fls[j] {
				t.Fatalf("after landing %v: %v flying %v", keys[i], k, found != nil)
			}
		}
	}
	if len(f.m) != 0 {
		t.Fatalf("%d hashes left in the map", len(f.m))
	}
}

// TestLandCopiesHeldEntryForFollowers: a leader's entry that lies in the
// buffers its question holds (question.held) reaches the flight's
// followers as a copy, since the buffers go back to the pool when the
// leader's question ends, before a follower may read them; with no one
// waiting, nothing is copied.
func TestLandCopiesHeldEntryForFollowers(t *testing.T) {
	var f flights
	k := cacheKey{name: "held.example.", qtype: 1, qclass: 1}
	for _, followers := range []int{0, 1, 3} {
		held := &entry{result: ResultAnswer, msg: []byte{0, 0, 0x81, 0x80, 0, 0, 0, 0, 0, 0, 0, 0}}
		fl, _ := f.join(k, nil)
		for range followers {
			f.join(k, nil)
		}
		fl.entry, fl.result = held, ResultAnswer
		f.land(k, fl, held)
		switch {
		case followers == 0 && fl.entry != held:
			t.Fatal("no followers: the held entry was copied")
		case followers > 0 && fl.entry == held:
			t.Fatalf("%d followers get the leader's held entry itself", followers)
		case followers > 0 && !reflect.DeepEqual(fl.entry, held):
			t.Fatalf("the followers' copy %+v, want %+v", fl.entry, held)
		}
		for range followers + 1 {
			fl.release()
		}
	}
}
