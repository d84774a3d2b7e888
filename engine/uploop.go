package engine

// MissContinuation is the rest of a miss that StartMiss gave to the
// upstream loop (see StartMiss): the front end's way to finish its
// question once the first transaction ended.
type MissContinuation interface {
	// ResolveHere finishes the question on the loop's goroutine: its
	// transaction's end, an answer or NXDOMAIN, ends it, so
	// ResolveMiss returns without waiting. It must not wait for
	// anything else. It returns what to flush when the loop's round ends
	// (once for all the round's questions), or nil.
	ResolveHere() Flusher
	// ResolveElsewhere hands the question to a goroutine that may wait
	// (ResolveMiss makes the further attempts).
	ResolveElsewhere()
}

// Flusher writes out what questions finished on the loop appended.
type Flusher interface {
	Flush()
}
