//go:build !linux

package engine

import "context"

// upLoopHolder is empty: the upstream loop is Linux's (uploop_linux.go).
type upLoopHolder struct{}

func (e *Engine) closeUpLoop() {}

func (e *Engine) loopStart(context.Context, *transaction, *started, MissContinuation) bool {
	return false
}
