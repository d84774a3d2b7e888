package dohclient

import (
	"errors"
	"fmt"
	"mime"
	"strings"

	"github.com/dohfwd/dohfwd/engine"
)

// mediaType is RFC 8484's: the request body's and the reply's.
const mediaType = "application/dns-message"

// classHTTP is the class of a reply the HTTP exchange refused: a status
// other than 200, another content type, a body that does not fit.
const classHTTP = engine.ErrHTTP

var (
	errClientClosed  = errors.New("DoH client closed")
	errHandshakeWait = errors.New("the connection being opened was not ready by the deadline")
	errNoH2          = errors.New("server did not negotiate HTTP/2 (ALPN h2)")
)

// httpError is a failed attempt of class "http", receiving.
func httpError(format string, args ...any) error {
	return &engine.SocketError{Op: "receive", Class: classHTTP, Err: fmt.Errorf(format, args...)}
}

// checkResponse is the rule for a DoH reply's status line and headers
// before its body is read (RFC 8484 §4.2.1, §6): status 200, content type
// application/dns-message (parameters allowed, case ignored), a declared
// length (when there is one) no larger than room. Anything else is a
// failed attempt, never an answer: a 500 page or a 415 is not DNS.
func checkResponse(status int, contentType string, length int64, room int) error {
	if status != 200 {
		return httpError("HTTP status %d", status)
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil || !strings.EqualFold(mt, mediaType) {
		return httpError("content-type %q, want %s", contentType, mediaType)
	}
	if length > int64(room) {
		return httpError("reply body of %d bytes over %d", length, room)
	}
	return nil
}
