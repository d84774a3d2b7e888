package odoh

import (
	"encoding/binary"
	"errors"
)

// Wire constants of RFC 9230 §6.
const (
	// Version is the ObliviousDoHConfig version this package speaks.
	Version uint16 = 0x0001
	// The suite: DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-128-GCM.
	KEMX25519  uint16 = 0x0020
	KDFSHA256  uint16 = 0x0001
	AEADAES128 uint16 = 0x0001

	// MessageQuery and MessageResponse are ObliviousDoHMessage's
	// message_type.
	MessageQuery    byte = 0x01
	MessageResponse byte = 0x02

	// MediaTypeMessage is the media type of a query and its answer;
	// MediaTypeConfigs that of the target's configurations.
	MediaTypeMessage = "application/oblivious-dns-message"
	MediaTypeConfigs = "application/odohconfigs"
	// ConfigsPath is where a target serves its configurations, the
	// convention Cloudflare, dnscrypt-proxy and routedns use.
	ConfigsPath = "/.well-known/odohconfigs"
)

// Errors a message can fail with; a target answers each with the HTTP
// status of RFC 9230 §7 (StatusFor).
var (
	ErrMalformed   = errors.New("odoh: malformed message")
	ErrMessageType = errors.New("odoh: wrong message type")
	ErrUnknownKey  = errors.New("odoh: unknown key id")
	ErrDecrypt     = errors.New("odoh: decryption failed")
	ErrPadding     = errors.New("odoh: padding is not all zeros")
)

// Message is one ObliviousDoHMessage: its type, its key_id (for a
// response: the response nonce) and its encrypted_message. The slices
// point into what it was parsed from.
type Message struct {
	Type      byte
	KeyID     []byte
	Encrypted []byte
}

// ParseMessage reads an ObliviousDoHMessage that must fill b exactly.
func ParseMessage(b []byte) (Message, error) {
	var m Message
	if len(b) < 1 {
		return m, ErrMalformed
	}
	m.Type = b[0]
	rest := b[1:]
	var ok bool
	if m.KeyID, rest, ok = readVec16(rest); !ok {
		return m, ErrMalformed
	}
	if m.Encrypted, rest, ok = readVec16(rest); !ok || len(m.Encrypted) == 0 || len(rest) != 0 {
		return m, ErrMalformed
	}
	return m, nil
}

// AppendMessage appends m in its wire form to dst.
func AppendMessage(dst []byte, m Message) []byte {
	dst = append(dst, m.Type)
	dst = appendVec16(dst, m.KeyID)
	return appendVec16(dst, m.Encrypted)
}

// AppendPlaintext appends ObliviousDoHMessagePlaintext: dns and pad zero
// bytes of padding.
func AppendPlaintext(dst, dns []byte, pad int) []byte {
	dst = appendVec16(dst, dns)
	dst = binary.BigEndian.AppendUint16(dst, uint16(pad))
	for range pad {
		dst = append(dst, 0)
	}
	return dst
}

// ParsePlaintext reads ObliviousDoHMessagePlaintext, which must fill b
// exactly: the DNS message (not empty) and its padding, which must be
// all zeros (§6.2: a receiver checks it).
func ParsePlaintext(b []byte) (dns []byte, err error) {
	dns, rest, ok := readVec16(b)
	if !ok || len(dns) == 0 {
		return nil, ErrMalformed
	}
	pad, rest, ok := readVec16(rest)
	if !ok || len(rest) != 0 {
		return nil, ErrMalformed
	}
	for _, c := range pad {
		if c != 0 {
			return nil, ErrPadding
		}
	}
	return dns, nil
}

// Config is one ObliviousDoHConfigContents: the suite and the target's
// public key.
type Config struct {
	KEM, KDF, AEAD uint16
	PublicKey      []byte
}

// appendContents appends c's ObliviousDoHConfigContents.
func (c Config) appendContents(dst []byte) []byte {
	dst = binary.BigEndian.AppendUint16(dst, c.KEM)
	dst = binary.BigEndian.AppendUint16(dst, c.KDF)
	dst = binary.BigEndian.AppendUint16(dst, c.AEAD)
	return appendVec16(dst, c.PublicKey)
}

// Supported reports whether c is the suite this package speaks.
func (c Config) Supported() bool {
	return c.KEM == KEMX25519 && c.KDF == KDFSHA256 && c.AEAD == AEADAES128 && len(c.PublicKey) == 32
}

// AppendConfigs appends ObliviousDoHConfigs holding cs, each as a
// version 0x0001 ObliviousDoHConfig.
func AppendConfigs(dst []byte, cs ...Config) []byte {
	start := len(dst)
	dst = append(dst, 0, 0)
	for _, c := range cs {
		dst = binary.BigEndian.AppendUint16(dst, Version)
		at := len(dst)
		dst = append(dst, 0, 0)
		dst = c.appendContents(dst)
		binary.BigEndian.PutUint16(dst[at:], uint16(len(dst)-at-2))
	}
	binary.BigEndian.PutUint16(dst[start:], uint16(len(dst)-start-2))
	return dst
}

// ParseConfigs reads ObliviousDoHConfigs and returns the configurations
// of version 0x0001 in it, in order; others are skipped, as §6 says a
// client does. It fails on a malformed list, and on a list with no
// version 0x0001 configuration.
func ParseConfigs(b []byte) ([]Config, error) {
	list, rest, ok := readVec16(b)
	if !ok || len(rest) != 0 || len(list) == 0 {
		return nil, ErrMalformed
	}
	var out []Config
	for len(list) > 0 {
		if len(list) < 2 {
			return nil, ErrMalformed
		}
		version := binary.BigEndian.Uint16(list)
		var body []byte
		if body, list, ok = readVec16(list[2:]); !ok {
			return nil, ErrMalformed
		}
		if version != Version {
			continue
		}
		if len(body) < 6 {
			return nil, ErrMalformed
		}
		c := Config{KEM: binary.BigEndian.Uint16(body), KDF: binary.BigEndian.Uint16(body[2:]), AEAD: binary.BigEndian.Uint16(body[4:])}
		pk, tail, ok := readVec16(body[6:])
		if !ok || len(pk) == 0 || len(tail) != 0 {
			return nil, ErrMalformed
		}
		c.PublicKey = pk
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("odoh: no configuration of version 0x0001")
	}
	return out, nil
}

// readVec16 reads an opaque vector with a two-byte length.
func readVec16(b []byte) (v, rest []byte, ok bool) {
	if len(b) < 2 {
		return nil, nil, false
	}
	n := int(binary.BigEndian.Uint16(b))
	if len(b)-2 < n {
		return nil, nil, false
	}
	return b[2 : 2+n], b[2+n:], true
}

func appendVec16(dst, v []byte) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(v)))
	return append(dst, v...)
}
