// Package config reads dohfwd's YAML configuration file.
//
// The file is strict: an unknown key, a value of the wrong type or a bad
// address is an error that names the file, the line and the key. Every key
// is optional and has a default; with no file at all dohfwd runs on the
// embedded default (default.yaml). A Config converts to the engine's
// configuration and the certificate manager's.
//
// The cache keys: max_entries (0 turns the cache off), min_ttl, max_ttl
// and negative_max_ttl clamp what is kept; stale_max (default 24h, 0
// off) keeps expired answers for serve-stale (RFC 8767), answered with
// TTL stale_ttl (default 30s, at least 1s) and EDE 3; stale_answer_after
// (default 1.8s, 0 off) is the client response timer after which a
// question with a stale answer gets it while its upstream question goes
// on; prefetch_min_hits (default 2, 0 off) is how often an entry must be
// asked to be refreshed in the background in the last tenth of its TTL.
package config
