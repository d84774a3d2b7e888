//go:build !wasip1

package doh

import "context"

// job is one stream whose question waits on the network, resolved on
// its connection by a kept goroutine of the server's workpool.Pool; or,
// with no stream, a flush of what the upstream loop's questions appended
// to the connection (a write may wait for the client: never on the loop).
type job struct {
	c   *h2conn
	ctx context.Context
	st  *stream
}

func resolveJob(j job) {
	if j.st == nil {
		j.c.flushAppended()
		return
	}
	j.c.resolve(j.ctx, j.st)
}
