package engine

import "time"

// serverOrder writes into dst the order in which servers are tried for one
// attempt: the servers not demoted at now, in configured order, then the
// demoted ones, in configured order. until[i] is server i's mark (0 = none).
func serverOrder(dst []int, until []time.Duration, now time.Duration) []int {
	dst = dst[:0]
	for i, u := range until {
		if !demotedAt(u, now) {
			dst = append(dst, i)
		}
	}
	for i, u := range until {
		if demotedAt(u, now) {
			dst = append(dst, i)
		}
	}
	return dst
}

// demotedAt reports whether a mark ending at until is in force at now.
func demotedAt(until, now time.Duration) bool { return until != 0 && now < until }

// chooseServer picks the server for the next attempt of a candidate: the
// first in order not yet asked; once all have been asked, the one at
// position n mod len(order), n being the attempts already made for the
// candidate.
func chooseServer(order []int, asked []bool, n int) int {
	for _, i := range order {
		if !asked[i] {
			return i
		}
	}
	return order[n%len(order)]
}
