package doh

import (
	"context"
	"errors"
	"net/netip"
	"strings"

	"github.com/dohfwd/dohfwd/doh/odoh"
)

// Oblivious DoH (RFC 9230) in the core: the target decrypts a query
// POSTed to the DoH path as application/oblivious-dns-message, hands it
// to the same query check and resolver as any DoH question, and seals
// the answer; it serves its keys at odoh.ConfigsPath. The relay takes
// POSTs at RelayPath and forwards them, unread, to an allowed target
// (an [ObliviousRelay]). The cryptography is package odoh's.

// RelayPath is where the ODoH relay (RFC 9230's Oblivious Proxy) takes
// queries: POST RelayPath?targethost=HOST&targetpath=PATH.
const RelayPath = "/proxy"

// ProtoODoH is the proto of an ODoH question's events and metrics: the
// target knows the relay, not the client, nor how the client reached it.
const ProtoODoH = "odoh"

// FormatOblivious is an ODoH request: a query for the target, or one the
// relay forwards (Exchange.Relayed).
const FormatOblivious Format = FormatJSON + 1

// ObliviousTarget holds a target's keys: *odoh.Keyring.
type ObliviousTarget interface {
	// Configs is the body of GET /.well-known/odohconfigs.
	Configs() []byte
	// Open parses and decrypts a query message.
	Open(msg []byte) (odoh.Opened, error)
}

// ObliviousRelay forwards an ODoH message to a target and returns the
// target's answer: the status to send (200, the target's own 4xx, 403 for
// a target not allowed, 502 for one that failed) and its body, or a short
// problem for any status but 200. It keeps nothing of the client.
type ObliviousRelay interface {
	Allowed(targetHost string) bool
	Forward(ctx context.Context, targetHost, targetPath string, msg []byte) (status int, body []byte, problem string)
}

// Reasons an ODoH request failed, as Exchange.ODoHFailure says them for
// the metrics (odoh_failures_total{reason}).
const (
	ODoHMalformed   = "malformed"
	ODoHMessageType = "message_type"
	ODoHUnknownKey  = "unknown_key"
	ODoHDecrypt     = "decrypt"
	ODoHPadding     = "padding"
	ODoHSeal        = "seal"
	ODoHForbidden   = "relay_forbidden"
	ODoHBadGateway  = "relay_bad_gateway"
)

// obliviousFailure is the status (RFC 9230 §7), the reason and the
// problem text for a query the target could not open: 401 for a key it
// does not hold (the client should fetch the configurations again), 400
// for the rest.
func obliviousFailure(err error) (status int, reason, problem string) {
	switch {
	case errors.Is(err, odoh.ErrUnknownKey):
		return statusUnauthorized, ODoHUnknownKey, "odoh: unknown key id: fetch " + odoh.ConfigsPath + " again"
	case errors.Is(err, odoh.ErrMessageType):
		return statusBadRequest, ODoHMessageType, "odoh: not a query message"
	case errors.Is(err, odoh.ErrDecrypt):
		return statusBadRequest, ODoHDecrypt, "odoh: the query does not decrypt"
	case errors.Is(err, odoh.ErrPadding):
		return statusBadRequest, ODoHPadding, "odoh: the query's padding is not all zeros"
	}
	return statusBadRequest, ODoHMalformed, "odoh: malformed message"
}

// isObliviousPost reports whether a request to the DoH path is an ODoH
// query this handler serves.
func (h *Handler) isObliviousPost(r *Request) bool {
	return h.oblivious != nil && r.Method == methodPost && isMediaType(r.Header.Get("content-type"), odoh.MediaTypeMessage)
}

// obliviousBody checks an ODoH request's body as a DoH POST's is checked;
// false: c is answered.
func (h *Handler) obliviousBody(c *call) bool {
	r := &c.req
	if r.Method != methodPost {
		c.resp.Header.Add("allow", "POST")
		h.fail(c, statusMethodNotAllowed, "method not allowed: ODoH messages are POSTed")
		return false
	}
	if !isMediaType(r.Header.Get("content-type"), odoh.MediaTypeMessage) {
		h.fail(c, statusUnsupportedMediaType, "unsupported Content-Type: want "+odoh.MediaTypeMessage)
		return false
	}
	if r.ContentLength > MaxMessageSize || len(r.Body) > MaxMessageSize {
		h.fail(c, statusRequestEntityTooLarge, errTooLarge.Error())
		return false
	}
	if r.BodyErr != nil {
		h.fail(c, statusBadRequest, "reading body: "+r.BodyErr.Error())
		return false
	}
	return true
}

// beginOblivious opens an ODoH query and checks the DNS query in it as
// beginWire checks a plain one. The client the question is resolved for
// is nobody: the peer is the relay.
func (h *Handler) beginOblivious(c *call) bool {
	c.x.Format = FormatOblivious
	if !h.obliviousBody(c) {
		return true
	}
	o, err := h.oblivious.Open(c.req.Body)
	if err != nil {
		status, reason, problem := obliviousFailure(err)
		c.x.ODoHFailure = reason
		h.fail(c, status, problem)
		return true
	}
	c.opened, c.oblivious = o, true
	return h.checkWire(c, o.Query)
}

// serveConfigs answers GET odoh.ConfigsPath with the target's keys.
func (h *Handler) serveConfigs(c *call) {
	c.page = true
	if c.req.Method != methodGet {
		c.resp.Header.Add("allow", "GET")
		h.fail(c, statusMethodNotAllowed, "method not allowed: use GET")
		return
	}
	cfgs := h.oblivious.Configs()
	c.out = append(c.out[:0], cfgs...)
	c.resp.Status, c.resp.Body = statusOK, c.out
	c.resp.Header = append(c.resp.Header,
		HeaderField{"content-type", odoh.MediaTypeConfigs},
		HeaderField{"content-length", itoa(len(c.out))},
		// Clients may keep the keys a while; the next key is listed, so
		// an hour is safe with any rotation of two hours or more.
		HeaderField{"cache-control", "max-age=3600"})
}

// sealOblivious replaces c's answer, a DNS message in c.out, with the
// ODoH response sealed for the client (RFC 9230 §6.3): padded to a
// block, never cached (§4.3).
func (h *Handler) sealOblivious(c *call, wire []byte) bool {
	sealed, err := c.opened.Seal(c.in[:0], wire, odoh.PaddingFor(len(wire)))
	if err != nil {
		c.x.ODoHFailure = ODoHSeal
		h.fail(c, statusInternalServerError, "odoh: cannot seal the answer")
		return false
	}
	c.in = sealed
	c.resp.Status, c.resp.Body = statusOK, sealed
	c.resp.Header = append(c.resp.Header,
		HeaderField{"content-type", odoh.MediaTypeMessage},
		HeaderField{"content-length", itoa(len(sealed))},
		HeaderField{"cache-control", "no-cache, no-store"})
	return true
}

// beginRelay checks a request to the relay: a POSTed ODoH message for a
// target on the allowed list (403 otherwise). The forwarding waits for
// answer, on a goroutine that may wait on the network.
func (h *Handler) beginRelay(c *call) bool {
	c.x.Format, c.x.Relayed = FormatOblivious, true
	if !h.obliviousBody(c) {
		return true
	}
	host, okHost := queryParam(c.req.RawQuery, "targethost")
	path, okPath := queryParam(c.req.RawQuery, "targetpath")
	if !okHost || !okPath || host == "" || !strings.HasPrefix(path, "/") {
		h.fail(c, statusBadRequest, "odoh relay: want ?targethost=HOST&targetpath=/PATH")
		return true
	}
	if !h.relay.Allowed(host) {
		c.x.ODoHFailure = ODoHForbidden
		h.fail(c, statusForbidden, "odoh relay: target not allowed")
		return true
	}
	c.relayHost, c.relayPath = host, path
	return false
}

// forward relays c's message and writes the target's answer.
func (h *Handler) forward(ctx context.Context, c *call) bool {
	status, body, problem := h.relay.Forward(ctx, c.relayHost, c.relayPath, c.req.Body)
	if ctx.Err() != nil {
		c.x.Status = StatusClientClosed
		return false
	}
	if status != statusOK {
		if status == statusBadGateway {
			c.x.ODoHFailure = ODoHBadGateway
		}
		h.fail(c, status, problem)
		return true
	}
	c.out = append(c.out[:0], body...)
	c.resp.Status, c.resp.Body = statusOK, c.out
	c.resp.Header = append(c.resp.Header,
		HeaderField{"content-type", odoh.MediaTypeMessage},
		HeaderField{"content-length", itoa(len(c.out))},
		HeaderField{"cache-control", "no-cache, no-store"})
	c.x.Status = statusOK
	return true
}

// questionClient is the client c's question is resolved for: nobody for
// an ODoH query (its peer is a relay), else the client.
func (c *call) questionClient() netip.Addr {
	if c.oblivious {
		return netip.Addr{}
	}
	return c.x.ClientIP
}
