package dohclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"syscall"

	"github.com/dohfwd/dohfwd/engine"
)

// classifyError maps a connect, handshake or stream error to the class
// the engine's failure rules need: a certificate, name or pin that fails
// and TLS alerts are ErrTLS; the deadline ErrTimeout; the errno's class
// for the socket's own failures.
func classifyError(op string, err error) *engine.SocketError {
	se := &engine.SocketError{Op: op, Class: engine.ErrOther, Err: err}
	var (
		errno   syscall.Errno
		unknown x509.UnknownAuthorityError
		invalid x509.CertificateInvalidError
		host    x509.HostnameError
		verify  *tls.CertificateVerificationError
		alert   tls.AlertError
		record  tls.RecordHeaderError
		ne      net.Error
	)
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		se.Class = engine.ErrTimeout
	case errors.Is(err, errPin), errors.As(err, &verify), errors.As(err, &unknown),
		errors.As(err, &invalid), errors.As(err, &host), errors.As(err, &alert), errors.As(err, &record):
		se.Class = engine.ErrTLS
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed), errors.Is(err, io.ErrClosedPipe):
		se.Class = engine.ErrClosed
	case errors.As(err, &errno):
		se.Class = errnoClass(errno)
	case errors.As(err, &ne) && ne.Timeout():
		se.Class = engine.ErrTimeout
	}
	return se
}

// errnoClass is the failure-rule class of one errno (as the engine's
// native sockets classify theirs).
func errnoClass(errno syscall.Errno) engine.ErrorClass {
	switch errno {
	case syscall.EMFILE, syscall.ENFILE, syscall.ENOMEM, syscall.ENOBUFS,
		syscall.EADDRNOTAVAIL, syscall.EADDRINUSE, syscall.EACCES, syscall.EPERM:
		return engine.ErrLocal
	case syscall.ECONNREFUSED:
		return engine.ErrRefused
	case syscall.ENETUNREACH, syscall.EHOSTUNREACH, syscall.ENETDOWN, syscall.EHOSTDOWN:
		return engine.ErrUnreachable
	case syscall.ECONNRESET, syscall.EPIPE, syscall.ECONNABORTED:
		return engine.ErrReset
	case syscall.ETIMEDOUT:
		return engine.ErrTimeout
	}
	return engine.ErrOther
}
