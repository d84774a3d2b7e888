// Package config reads dohfwd's YAML configuration file.
//
// The file is strict: an unknown key, a value of the wrong type, a bad
// address, or anything else the engine would refuse (its own parsers do
// the checking, and engine.Validate runs last) is an error that names the
// file, the line and the key. Every key is optional and has a default;
// with no file at all dohfwd runs on the embedded default (default.yaml)
// plus a scope of the nameservers in /etc/resolv.conf. A Config converts
// to the engine's configuration (EngineConfig); package assembly builds
// the rest of a running dohfwd from it.
//
// Besides the DoH listeners, listen.dot (DNS over TLS, with the HTTPS
// listener's certificates), listen.doq (DNS over QUIC, RFC 9250, on UDP,
// with the same certificates) and listen.dns (plain DNS on UDP and TCP)
// are off unless set. The ddr section only names what Discovery of Designated
// Resolvers advertises (ddr.names, ddr.addresses); DDR itself is on
// whenever an encrypted listener is. apple_profile signs the Apple
// configuration profile when set.
//
// Keys for a fleet of replicas behind a layer-4 load balancer:
//
//   - listen.proxy_protocol (default []): the balancers' CIDRs or IPs.
//     Connections from them to the DoH listeners (HTTPS, plaintext, DoT)
//     and to tls.acme.http_listen must open with a PROXY protocol v1 or v2 header, whose client address
//     is then the one the handler, logs, limits and metrics see; a header
//     from anyone else is refused. Empty turns PROXY protocol off.
//   - tls.acme.storage: a folder, or redis://host:port/db (rediss:// for
//     TLS) naming a store that every replica shares, so one of them orders
//     each certificate and renewal. A password in the URL is refused.
//   - tls.acme.redis.password_file (default ""): a file holding the Redis
//     password; when empty, $DOHFWD_REDIS_PASSWORD. The user name comes
//     from the URL or $DOHFWD_REDIS_USERNAME. Neither is ever logged.
//   - tls.acme.redis.ca_root (default ""): PEM roots for rediss:// with a
//     private CA ("" = the system's).
//   - tls.acme.redis.key_prefix (default dohfwd): starts every Redis key.
//   - tls.acme.redis.lock_lease (default 30s, 1s to 1m): how long a lock
//     outlives a replica that died holding it; the holder renews it every
//     third of a lease while it lives.
//
// The cache keys: max_entries (0 turns the cache off), min_ttl, max_ttl
// and negative_max_ttl clamp what is kept; stale_max (default 24h, 0
// off) keeps expired answers for serve-stale (RFC 8767), answered with
// TTL and Cache-Control max-age stale_ttl (default 30s, at least 1s; for
// NXDOMAIN and NODATA too) and EDE 3; stale_answer_after
// (default 1.8s, 0 off) is the client response timer after which a
// question with a stale answer gets it while its upstream question goes
// on; prefetch_min_hits (default 2, 0 off) is how often an entry must be
// asked to be refreshed in the background in the last tenth of its TTL.
//
// The limits keys (package limits; all 0 = off by default) bound one client
// prefix (prefix_v4 /24, prefix_v6 /56): client_qps and client_burst (a
// token bucket), client_in_flight (upstream transactions), and
// client_connections; connections bounds all clients together.
// streams_per_connection (default 250, read at start) is how many requests
// one HTTP/2 connection may have open at once.
//
// The dnstap keys (off while address is ""): address, unix:/path or
// tcp:host:port, the collector's socket; queue (default 10000, 1 to
// 1000000), how many messages wait for it before new ones are dropped;
// identity ("" = the host name), the server's name in each message.
package config
