//go:build !wasip1

package doh

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
)

// Request header blocks: HEADERS and CONTINUATION frames, decoded with
// the connection's HPACK state as they arrive, checked as RFC 9113 section
// 8 asks, into the stream's Request.

func (c *h2conn) onHeaders(f *headersFrame) error {
	if !c.sawFirst { // the client's first frame is SETTINGS
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	id := f.id
	if id%2 == 0 {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	st := c.streams[id]
	switch {
	case st != nil && st.recvDone:
		// Half closed (remote): only PRIORITY, WINDOW_UPDATE, RST_STREAM.
		return http2.ConnectionError(http2.ErrCodeStreamClosed)
	case st != nil:
		// Trailers: they must end the stream, and are read and dropped.
		st.trailers = true
		if !f.flags.Has(http2.FlagHeadersEndStream) {
			st.bad = "trailers without END_STREAM"
		}
	case !c.idle(id):
		return http2.ConnectionError(http2.ErrCodeStreamClosed)
	default:
		c.maxID = id
		c.idleSince = time.Time{}
		st = streams.Get().(*stream)
		st.id, st.conn, st.clen, st.opened = id, c, -1, c.now
		st.recvWin, st.sendWin = maxUploadPerStream, c.peerWin
		st.req.Proto, st.req.Peer, st.req.Local, st.req.ContentLength = "HTTP/2.0", c.peer, c.local, -1
		// Reset streams are closed (RFC 9113 5.1.2), though their
		// questions may still be stopping.
		if c.goingAway || c.active-c.resetRunning >= int(c.limits.MaxConcurrentStreams) {
			st.refused = true
		} else {
			c.streams[id] = st
			c.active++
		}
	}
	if f.flags.Has(http2.FlagHeadersPriority) && f.dep == id {
		st.bad = "stream depends on itself"
	}
	if f.flags.Has(http2.FlagHeadersEndStream) {
		st.recvDone = true
	}
	c.hdr, c.hdrStart, c.hdrBytes = st, c.now, 0
	return c.onBlock(f.block, f.flags.Has(http2.FlagHeadersEndHeaders), true)
}

// onBlock reads a piece of a header block. HPACK state is the
// connection's, so a block is always decoded to its end, even for a
// stream that will be refused.
func (c *h2conn) onBlock(frag []byte, end, first bool) error {
	st := c.hdr
	if st == nil { // the Framer lets no stray CONTINUATION through
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	c.hdrBytes += len(frag)
	if c.hdrBytes > 2*c.limits.MaxHeaderBytes {
		// A CONTINUATION flood: nothing this big decodes to a list
		// within the limit.
		return http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)
	}
	if err := c.dec.write(frag, first, end); err != nil {
		return http2.ConnectionError(http2.ErrCodeCompression)
	}
	if !end {
		return nil
	}
	c.hdr = nil
	return c.endHeaders(st)
}

// onField takes one decoded header field of the block being read. A
// literal's strings are the decoder's (f.temp): what the request keeps is
// copied, and only then.
func (c *h2conn) onField(f reqField) {
	st := c.hdr
	st.hdrSize += f.size()
	if st.hdrSize > c.maxList {
		st.tooBig = true
	}
	if st.bad != "" || st.tooBig || st.refused {
		return
	}
	if len(f.name) > 0 && f.name[0] == ':' {
		if st.regular || st.trailers {
			st.bad = "pseudo-header field after regular fields or in trailers"
			return
		}
		var bit uint8
		switch f.name {
		case ":method":
			bit, st.req.Method = pseudoMethod, keepMethod(f)
		case ":scheme":
			bit = pseudoScheme
		case ":path":
			bit = pseudoPath
			st.req.Path, st.req.RawQuery, _ = cutQuery(keepValue(f))
			if f.value == "" {
				st.bad = "empty :path"
			}
		case ":authority":
			bit, st.req.Host = pseudoAuthority, c.keepHost(f)
		default:
			st.bad = "unknown pseudo-header field " + f.name
			return
		}
		if st.pseudo&bit != 0 {
			st.bad = "duplicate " + f.name
		}
		st.pseudo |= bit
		return
	}
	st.regular = true
	if st.bad = checkRegularField(f.name, f.value); st.bad != "" {
		return
	}
	switch f.name {
	case "content-length":
		n, err := strconv.ParseUint(f.value, 10, 63)
		if err != nil || st.clen >= 0 && int64(n) != st.clen {
			st.bad = "bad content-length"
			return
		}
		st.clen = int64(n)
	}
	if !st.trailers {
		name := f.name
		if f.temp&tempName != 0 {
			name = strings.Clone(name)
		}
		st.req.Header = append(st.req.Header, HeaderField{name, keepValue(f)})
	}
}

// keepValue is f's value, copied if it is the decoder's.
func keepValue(f reqField) string {
	if f.temp&tempValue != 0 {
		return strings.Clone(f.value)
	}
	return f.value
}

// keepMethod is the request's method: a constant for the usual two.
func keepMethod(f reqField) string {
	switch f.value {
	case methodGet:
		return methodGet
	case methodPost:
		return methodPost
	}
	return keepValue(f)
}

// keepHost is :authority: a client names the same host on every request
// of a connection, so the connection keeps one copy.
func (c *h2conn) keepHost(f reqField) string {
	if f.temp&tempValue == 0 {
		return f.value
	}
	if f.value != c.host {
		c.host = strings.Clone(f.value)
	}
	return c.host
}

// validFieldName: a token in lower case (HTTP/2 field names).
func validFieldName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		if 'A' <= b && b <= 'Z' || !httpguts.IsTokenRune(rune(b)) {
			return false
		}
	}
	return true
}

func cutQuery(p string) (path, query string, ok bool) {
	for i := 0; i < len(p); i++ {
		if p[i] == '?' {
			return p[:i], p[i+1:], true
		}
	}
	return p, "", false
}

// endHeaders acts on a complete header block.
func (c *h2conn) endHeaders(st *stream) error {
	switch {
	case st.refused:
		c.wbuf = appendRSTStream(c.wbuf, st.id, http2.ErrCodeRefusedStream)
		c.free(st)
		return nil
	case st.bad == "" && !st.trailers && st.pseudo&(pseudoMethod|pseudoScheme|pseudoPath) != pseudoMethod|pseudoScheme|pseudoPath:
		st.bad = "missing pseudo-header field"
	}
	if st.bad != "" {
		c.resetStream(st.id, http2.ErrCodeProtocol)
		return nil
	}
	if st.trailers {
		return c.endRequest(st)
	}
	if st.tooBig {
		c.h.fail(&st.call, http.StatusRequestHeaderFieldsTooLarge,
			"request header fields too large: at most "+strconv.Itoa(c.maxList)+" bytes (HPACK's count)")
		return c.respond(st, c.now)
	}
	st.req.ContentLength = st.clen
	if st.recvDone {
		return c.endRequest(st)
	}
	if st.clen > MaxMessageSize {
		return c.start(st) // 413 at once: no need to wait for the body
	}
	return nil
}
