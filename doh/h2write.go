//go:build !wasip1

package doh

import (
	"net/http"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
)

// Responses and flow control: frames are appended to the connection's
// write buffer and leave together (flushLocked); DATA waits for the
// client's windows.

// respond writes a stream's response: HEADERS, then DATA as flow control
// allows. now is the time for its Date.
func (c *h2conn) respond(st *stream, now time.Time) error {
	if st.reset || c.closed {
		st.cancelled()
		c.finish(st)
		return nil
	}
	blk := c.enc.begin(c.block[:0])
	blk = c.enc.appendStatus(blk, st.resp.Status)
	blk = c.enc.appendField(blk, "date", httpDate(now))
	for _, f := range st.resp.Header {
		blk = c.enc.appendField(blk, f.Name, f.Value)
	}
	c.block = blk
	c.wbuf = appendHeaders(c.wbuf, st.id, blk, len(st.resp.Body) == 0, c.peerFrame)
	st.unsent = st.resp.Body
	c.sendData(st)
	return nil
}

// sendData sends what flow control allows of a stream's body; the
// stream ends when all of it is sent.
func (c *h2conn) sendData(st *stream) {
	for len(st.unsent) > 0 {
		n := min(int64(len(st.unsent)), int64(c.peerFrame), c.sendWin, st.sendWin)
		if n <= 0 {
			if !st.queued {
				st.queued, st.blockedAt = true, time.Now()
				c.blocked = append(c.blocked, st)
			}
			return
		}
		end := int(n) == len(st.unsent)
		c.wbuf = appendData(c.wbuf, st.id, st.unsent[:n], end)
		st.unsent = st.unsent[n:]
		c.sendWin -= n
		st.sendWin -= n
	}
	if !st.recvDone {
		// Answered before the request ended (413): the rest is not wanted.
		c.wbuf = appendRSTStream(c.wbuf, st.id, http2.ErrCodeNo)
	}
	c.finish(st)
}

// sendBlocked sends what new window allows of blocked responses.
func (c *h2conn) sendBlocked() {
	blocked := c.blocked
	c.blocked = nil
	for _, st := range blocked {
		st.queued = false
		if !st.reset {
			c.sendData(st)
		}
	}
}

func (c *h2conn) onSettings(f *http2.SettingsFrame) error {
	if f.IsAck() {
		return nil
	}
	err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingHeaderTableSize:
			c.enc.setLimit(s.Val)
		case http2.SettingMaxFrameSize:
			c.peerFrame = int(s.Val)
		case http2.SettingInitialWindowSize:
			delta := int64(s.Val) - c.peerWin
			c.peerWin = int64(s.Val)
			for _, st := range c.streams {
				st.sendWin += delta
				if st.sendWin > maxWindow {
					return http2.ConnectionError(http2.ErrCodeFlowControl)
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	c.wbuf = appendSettingsAck(c.wbuf)
	c.sendBlocked()
	return nil
}

func (c *h2conn) onWindowUpdate(f *http2.WindowUpdateFrame) error {
	if f.StreamID == 0 {
		c.sendWin += int64(f.Increment)
		if c.sendWin > maxWindow {
			return http2.ConnectionError(http2.ErrCodeFlowControl)
		}
		c.sendBlocked()
		return nil
	}
	if c.idle(f.StreamID) {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	st := c.streams[f.StreamID]
	if st == nil {
		return nil
	}
	st.sendWin += int64(f.Increment)
	if st.sendWin > maxWindow {
		return http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeFlowControl}
	}
	if st.queued {
		c.sendBlocked()
	}
	return nil
}

// flushAfterOthers is flushLocked for a response that a worker appended:
// the write waits until the goroutines ready to run have run (one
// runtime.Gosched), so that answers that came back from the network
// together (woken by one poll) leave in one write, one TLS record, as
// they would in an event loop that flushes once per round. Meanwhile the
// connection counts as writing, so they append and leave the write to
// this one. With no other question of the connection resolving, there is
// nothing to wait for: it writes at once (one stream at a time, the usual
// browser case, skips a round of the scheduler).
func (c *h2conn) flushAfterOthers() {
	if c.writing || c.werr != nil {
		return
	}
	if c.resolving == 0 {
		// No other worker of this connection is resolving: no answer
		// can come to join this one (the reader flushes its own).
		c.flushLocked()
		return
	}
	c.writing = true
	// While others append, let them: a few rounds at most, so a stream of
	// answers does not hold the first of them back.
	for range maxFlushYields {
		n := len(c.wbuf)
		c.mu.Unlock()
		runtime.Gosched()
		c.mu.Lock()
		if len(c.wbuf) == n || c.werr != nil {
			break
		}
	}
	c.writing = false
	c.wdone.Broadcast() // should flushLocked not write, no waiter is left behind
	c.flushLocked()
}

// maxFlushYields bounds the rounds flushAfterOthers waits for answers.
const maxFlushYields = 4

// flushLocked writes the buffer unless a write is in progress (which then
// takes what was added). c.mu is held, and released during the write.
func (c *h2conn) flushLocked() {
	if c.writing || c.werr != nil {
		return
	}
	c.writing = true
	for len(c.wbuf) > 0 && c.werr == nil {
		b := c.wbuf
		c.wbuf = c.spare[:0]
		c.mu.Unlock()
		now := time.Now()
		if d := now.Add(c.limits.WriteTimeout); d.Sub(c.wdeadline) >= c.slack {
			c.wdeadline = d
			c.nc.SetWriteDeadline(d)
		}
		_, err := c.nc.Write(b)
		c.mu.Lock()
		if cap(b) <= maxPendingWrite {
			c.spare = b[:0]
		} else {
			c.spare = nil
		}
		if err != nil {
			c.werr = err
		}
	}
	c.writing = false
	c.wdone.Broadcast()
	if c.werr != nil {
		c.closeLocked()
	}
}

// httpDate is the Date header of a response now (net/http sends one on
// every response, and so does this server). It is formatted once a
// second.
func httpDate(t time.Time) string {
	now := t.Unix()
	if d := lastDate.Load(); d != nil && d.unix == now {
		return d.text
	}
	d := &dateText{unix: now, text: time.Unix(now, 0).UTC().Format(http.TimeFormat)}
	lastDate.Store(d)
	return d.text
}

type dateText struct {
	unix int64
	text string
}

var lastDate atomic.Pointer[dateText]
