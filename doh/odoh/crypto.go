package odoh

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/hkdf"
	"crypto/hpke"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
)

// Sizes of the suite (RFC 9180 §7): Nk and Nn of AES-128-GCM, Nh of
// HKDF-SHA256, the encapsulated key of X25519; the response nonce is
// max(Nn, Nk) bytes (§6.3).
const (
	nk            = 16
	nn            = 12
	nh            = 32
	encSize       = 32
	responseNonce = 16
)

// Labels of RFC 9230 §6.
const (
	labelKeyID    = "odoh key id"
	labelQuery    = "odoh query"
	labelResponse = "odoh response"
	labelKey      = "odoh key"
	labelNonce    = "odoh nonce"
)

var (
	kem  = hpke.DHKEM(ecdh.X25519())
	kdf  = hpke.HKDFSHA256()
	aead = hpke.AES128GCM()
)

// Key is one of a target's key pairs, with its configuration and its
// key_id.
type Key struct {
	priv   hpke.PrivateKey
	config Config
	id     []byte
}

// GenerateKey makes a new key pair.
func GenerateKey() (*Key, error) {
	priv, err := kem.GenerateKey()
	if err != nil {
		return nil, err
	}
	return newKey(priv), nil
}

// DeriveKey makes the key pair of ikm (RFC 9180 DeriveKeyPair), as the
// RFC's test vectors do.
func DeriveKey(ikm []byte) (*Key, error) {
	priv, err := kem.DeriveKeyPair(ikm)
	if err != nil {
		return nil, err
	}
	return newKey(priv), nil
}

// ParseKey reads a private key as PrivateBytes wrote it.
func ParseKey(b []byte) (*Key, error) {
	priv, err := kem.NewPrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("odoh: private key: %w", err)
	}
	return newKey(priv), nil
}

func newKey(priv hpke.PrivateKey) *Key {
	c := Config{KEM: KEMX25519, KDF: KDFSHA256, AEAD: AEADAES128, PublicKey: priv.PublicKey().Bytes()}
	return &Key{priv: priv, config: c, id: KeyID(c)}
}

// Config is the key's ObliviousDoHConfigContents.
func (k *Key) Config() Config { return k.config }

// ID is the key's key_id.
func (k *Key) ID() []byte { return k.id }

// PrivateBytes is the private key, for a key file; it never goes to a
// log.
func (k *Key) PrivateBytes() ([]byte, error) { return k.priv.Bytes() }

// KeyID is the key_id of a configuration (§6.1): HKDF-Expand of
// HKDF-Extract("", ObliviousDoHConfigContents) with "odoh key id", Nh
// bytes.
func KeyID(c Config) []byte {
	prk, _ := hkdf.Extract(sha256.New, c.appendContents(nil), nil)
	id, _ := hkdf.Expand(sha256.New, prk, labelKeyID, nh)
	return id
}

// Opened is a query a target opened: the DNS query, and what sealing its
// answer needs.
type Opened struct {
	Query  []byte // the DNS message, in plain
	plain  []byte // Q_plain: the whole ObliviousDoHMessagePlaintext
	secret []byte // the HPKE context's export for "odoh response"
}

// aad is a message's additional data (§6.2, §6.3): its type and its
// key_id (the response nonce, for a response) with its length.
func aad(typ byte, keyID []byte) []byte {
	a := make([]byte, 0, 3+len(keyID))
	a = append(a, typ)
	return appendVec16(a, keyID)
}

// Open decrypts a query message addressed to k (§6.2). The message's
// key_id must be k's (the Keyring picks k by it).
func (k *Key) Open(m Message) (Opened, error) {
	if m.Type != MessageQuery {
		return Opened{}, ErrMessageType
	}
	if len(m.Encrypted) <= encSize {
		return Opened{}, ErrMalformed
	}
	r, err := hpke.NewRecipient(m.Encrypted[:encSize], k.priv, kdf, aead, []byte(labelQuery))
	if err != nil {
		return Opened{}, ErrDecrypt
	}
	plain, err := r.Open(aad(MessageQuery, m.KeyID), m.Encrypted[encSize:])
	if err != nil {
		return Opened{}, ErrDecrypt
	}
	q, err := ParsePlaintext(plain)
	if err != nil {
		return Opened{}, err
	}
	secret, err := r.Export(labelResponse, nk)
	if err != nil {
		return Opened{}, ErrDecrypt
	}
	return Opened{Query: q, plain: plain, secret: secret}, nil
}

// Seal appends to dst the response message carrying dns with pad bytes
// of padding, under a fresh response nonce (§6.3).
func (o *Opened) Seal(dst, dns []byte, pad int) ([]byte, error) {
	var nonce [responseNonce]byte
	if _, err := io.ReadFull(rand.Reader, nonce[:]); err != nil {
		return dst, err
	}
	return o.sealWithNonce(dst, dns, pad, nonce[:])
}

func (o *Opened) sealWithNonce(dst, dns []byte, pad int, nonce []byte) ([]byte, error) {
	gcm, iv, err := responseAEAD(o.secret, o.plain, nonce)
	if err != nil {
		return dst, err
	}
	ct := gcm.Seal(nil, iv, AppendPlaintext(nil, dns, pad), aad(MessageResponse, nonce))
	return AppendMessage(dst, Message{Type: MessageResponse, KeyID: nonce, Encrypted: ct}), nil
}

// responseAEAD derives the response's key and nonce (§6.3):
// prk = Extract(Q_plain || len(nonce) || nonce, secret), key and nonce
// expanded from it with "odoh key" and "odoh nonce".
func responseAEAD(secret, qplain, nonce []byte) (cipher.AEAD, []byte, error) {
	salt := make([]byte, 0, len(qplain)+2+len(nonce))
	salt = appendVec16(append(salt, qplain...), nonce)
	prk, err := hkdf.Extract(sha256.New, secret, salt)
	if err != nil {
		return nil, nil, err
	}
	key, err := hkdf.Expand(sha256.New, prk, labelKey, nk)
	if err != nil {
		return nil, nil, err
	}
	iv, err := hkdf.Expand(sha256.New, prk, labelNonce, nn)
	if err != nil {
		return nil, nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, nil, err
	}
	gcm, err := cipher.NewGCM(block)
	return gcm, iv, err
}

// PendingQuery is a client's query on its way: what opening its answer
// needs.
type PendingQuery struct {
	plain  []byte
	secret []byte
}

// SealQuery encrypts dns, with pad bytes of padding, to the target's
// configuration c (§6.2): the query message, and what opening the answer
// needs.
func SealQuery(c Config, dns []byte, pad int) ([]byte, *PendingQuery, error) {
	return sealPlaintext(c, AppendPlaintext(nil, dns, pad))
}

// sealPlaintext encrypts an ObliviousDoHMessagePlaintext as it is.
func sealPlaintext(c Config, plain []byte) ([]byte, *PendingQuery, error) {
	if !c.Supported() {
		return nil, nil, errors.New("odoh: the target's configuration is not DHKEM(X25519)/HKDF-SHA256/AES-128-GCM")
	}
	pk, err := kem.NewPublicKey(c.PublicKey)
	if err != nil {
		return nil, nil, fmt.Errorf("odoh: target public key: %w", err)
	}
	id := KeyID(c)
	enc, s, err := hpke.NewSender(pk, kdf, aead, []byte(labelQuery))
	if err != nil {
		return nil, nil, err
	}
	ct, err := s.Seal(aad(MessageQuery, id), plain)
	if err != nil {
		return nil, nil, err
	}
	secret, err := s.Export(labelResponse, nk)
	if err != nil {
		return nil, nil, err
	}
	msg := AppendMessage(nil, Message{Type: MessageQuery, KeyID: id, Encrypted: append(enc, ct...)})
	return msg, &PendingQuery{plain: plain, secret: secret}, nil
}

// OpenResponse decrypts the target's answer to q (§6.3): the DNS
// message.
func (q *PendingQuery) OpenResponse(b []byte) ([]byte, error) {
	m, err := ParseMessage(b)
	if err != nil {
		return nil, err
	}
	if m.Type != MessageResponse {
		return nil, ErrMessageType
	}
	gcm, iv, err := responseAEAD(q.secret, q.plain, m.KeyID)
	if err != nil {
		return nil, err
	}
	plain, err := gcm.Open(nil, iv, m.Encrypted, aad(MessageResponse, m.KeyID))
	if err != nil {
		return nil, ErrDecrypt
	}
	return ParsePlaintext(plain)
}

// PaddingFor is how much padding takes a DNS message of n bytes to the
// next multiple of 128 (RFC 8467's block for responses), so an answer's
// size says little of its name.
func PaddingFor(n int) int { return (128 - (n+4)%128) % 128 }
