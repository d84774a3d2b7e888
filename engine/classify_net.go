//go:build !wasip1 && !js

package engine

import "context"

// ClassifyError is the failure-rule class of an error from package net
// or crypto/tls, for transports built outside the engine (the DoH
// client, engine/dohclient), so that they classify exactly as the
// engine's own sockets and DoT connections do. Op "handshake" takes the
// TLS rules (handshakeError: ErrTLS for a certificate, name, pin or
// alert; ErrTimeout when ctx, the handshake's deadline, ended); any other
// Op the socket rules (classify). ctx may be nil but for "handshake".
func ClassifyError(op string, err error, ctx context.Context) *SocketError {
	if op == "handshake" && ctx != nil {
		return handshakeError(err, ctx)
	}
	return classify(op, err)
}
