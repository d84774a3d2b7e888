//go:build !wasip1

package doh

import "context"

// job is one stream whose question waits on the network, resolved on
// its connection by a kept goroutine of the server's workpool.Pool.
type job struct {
	c   *h2conn
	ctx context.Context
	st  *stream
}

func resolveJob(j job) { j.c.resolve(j.ctx, j.st) }
