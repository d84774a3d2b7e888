//go:build !wasip1

package config

// upstreamCookies turns DNS cookies toward upstreams on (each scope may
// opt out with upstream_cookies: false).
const upstreamCookies = true
