//go:build !wasip1

package doh

import (
	"encoding/binary"
	"io"

	"golang.org/x/net/http2"
)

// The server writes its frames by hand into the connection's write
// buffer: they are a 9-byte header and a payload it already holds, and
// appending them there is what lets many responses leave in one write.

const frameHeaderLen = 9

func appendFrameHeader(b []byte, length int, t http2.FrameType, flags http2.Flags, stream uint32) []byte {
	b = append(b, byte(length>>16), byte(length>>8), byte(length), byte(t), byte(flags))
	return binary.BigEndian.AppendUint32(b, stream&(1<<31-1))
}

func appendSettings(b []byte, settings ...http2.Setting) []byte {
	b = appendFrameHeader(b, 6*len(settings), http2.FrameSettings, 0, 0)
	for _, s := range settings {
		b = binary.BigEndian.AppendUint16(b, uint16(s.ID))
		b = binary.BigEndian.AppendUint32(b, s.Val)
	}
	return b
}

func appendSettingsAck(b []byte) []byte {
	return appendFrameHeader(b, 0, http2.FrameSettings, http2.FlagSettingsAck, 0)
}

func appendWindowUpdate(b []byte, stream, inc uint32) []byte {
	b = appendFrameHeader(b, 4, http2.FrameWindowUpdate, 0, stream)
	return binary.BigEndian.AppendUint32(b, inc)
}

func appendPingAck(b []byte, data [8]byte) []byte {
	b = appendFrameHeader(b, 8, http2.FramePing, http2.FlagPingAck, 0)
	return append(b, data[:]...)
}

func appendRSTStream(b []byte, stream uint32, code http2.ErrCode) []byte {
	b = appendFrameHeader(b, 4, http2.FrameRSTStream, 0, stream)
	return binary.BigEndian.AppendUint32(b, uint32(code))
}

func appendGoAway(b []byte, last uint32, code http2.ErrCode, debug string) []byte {
	b = appendFrameHeader(b, 8+len(debug), http2.FrameGoAway, 0, 0)
	b = binary.BigEndian.AppendUint32(b, last)
	b = binary.BigEndian.AppendUint32(b, uint32(code))
	return append(b, debug...)
}

// appendHeaders writes a header block as HEADERS and, past maxFrame,
// CONTINUATION frames.
func appendHeaders(b []byte, stream uint32, block []byte, endStream bool, maxFrame int) []byte {
	first := true
	for {
		n := min(len(block), maxFrame)
		var t http2.FrameType = http2.FrameContinuation
		var flags http2.Flags
		if first {
			t = http2.FrameHeaders
			if endStream {
				flags |= http2.FlagHeadersEndStream
			}
		}
		if n == len(block) {
			flags |= http2.FlagHeadersEndHeaders
		}
		b = appendFrameHeader(b, n, t, flags, stream)
		b = append(b, block[:n]...)
		block, first = block[n:], false
		if len(block) == 0 {
			return b
		}
	}
}

func appendData(b []byte, stream uint32, data []byte, endStream bool) []byte {
	var flags http2.Flags
	if endStream {
		flags = http2.FlagDataEndStream
	}
	b = appendFrameHeader(b, len(data), http2.FrameData, flags, stream)
	return append(b, data...)
}

// headersFrame is a HEADERS frame as the server reads it: x/net's Framer
// allocates a HeadersFrame for each (it reuses only DATA frames), one
// allocation a request.
type headersFrame struct {
	id    uint32
	flags http2.Flags
	dep   uint32 // the priority's stream dependency, with FlagHeadersPriority
	block []byte // the header block fragment, in h2conn.payload
}

// readFrame reads the next frame: a HEADERS frame into hf, returning a
// nil Frame, any other through the Framer. The Framer reads every frame
// header, so its checks (size, CONTINUATION order) see HEADERS too; the
// payload is checked here as the Framer would, with the same errors.
func (c *h2conn) readFrame(hf *headersFrame) (http2.Frame, error) {
	fh, err := c.fr.ReadFrameHeader()
	if err != nil {
		return nil, err
	}
	if fh.Type != http2.FrameHeaders {
		return c.fr.ReadFrameForHeader(fh)
	}
	if cap(c.payload) < int(fh.Length) {
		c.payload = make([]byte, fh.Length)
	}
	p := c.payload[:fh.Length]
	if _, err := io.ReadFull(c.br, p); err != nil {
		return nil, err
	}
	if fh.StreamID == 0 {
		return nil, http2.ConnectionError(http2.ErrCodeProtocol)
	}
	hf.id, hf.flags = fh.StreamID, fh.Flags
	pad := 0
	if fh.Flags.Has(http2.FlagHeadersPadded) {
		if len(p) < 1 {
			return nil, io.ErrUnexpectedEOF
		}
		pad, p = int(p[0]), p[1:]
	}
	if fh.Flags.Has(http2.FlagHeadersPriority) {
		if len(p) < 5 {
			return nil, io.ErrUnexpectedEOF
		}
		hf.dep, p = binary.BigEndian.Uint32(p)&(1<<31-1), p[5:]
	}
	if len(p) < pad {
		return nil, http2.StreamError{StreamID: fh.StreamID, Code: http2.ErrCodeProtocol}
	}
	hf.block = p[:len(p)-pad]
	return nil, nil
}
