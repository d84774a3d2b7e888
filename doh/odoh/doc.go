// Package odoh is Oblivious DNS over HTTPS (RFC 9230) without the HTTP:
// the message format (ObliviousDoHConfigs, ObliviousDoHMessage and its
// padded plaintext, §6), the target's side of the cryptography (open a
// query with the key its key_id names, seal the answer under keys derived
// from the query and a fresh response nonce, §6.2 and §6.3), the client's
// side for dohfwd's own client command and tests, and the target's keys
// (Keyring: generated or read from a file, rotated with a grace period
// for the previous key).
//
// The suite is the one RFC 9230 names and every deployed client uses:
// DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-128-GCM, on Go's
// crypto/hpke. Everything here is a pure function of its inputs (and of
// the random source, for keys, encapsulation and nonces), so the RFC's
// rules are stated directly by tests and the parsers are fuzzed. The
// DoH handler (package doh) wires the target into its query path; the
// relay is an HTTP concern and lives there too.
package odoh
