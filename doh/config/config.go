package config

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// DefaultSource names the embedded default in errors and logs.
const DefaultSource = "(embedded default)"

// Config is the whole file. Its YAML keys are documented in README.md
// ("Configuration"); config_test.go's fullFile writes every one out.
type Config struct {
	Listen          Listen              `yaml:"listen"`
	TLS             TLS                 `yaml:"tls"`
	Engine          Engine              `yaml:"engine"`
	Scopes          []Scope             `yaml:"scopes"`
	FallbackServers []string            `yaml:"fallback_servers"`
	UpstreamTLS     UpstreamTLS         `yaml:"upstream_tls"`
	Hosts           map[string][]string `yaml:"hosts"`
	Cache           Cache               `yaml:"cache"`
	Limits          Limits              `yaml:"limits"`
	Log             Log                 `yaml:"log"`
	DDR             DDR                 `yaml:"ddr"`
	AppleProfile    AppleProfile        `yaml:"apple_profile"`
	Dnstap          Dnstap              `yaml:"dnstap"`
	// Policies are the block policies by name (package
	// engine/blocklist): lists of names to block, names to let through,
	// and how to answer a blocked question.
	Policies map[string]Policy `yaml:"policies"`
	// PoliciesReload is how often the policies' list files are checked
	// for changes (size, modification time, then contents) and reloaded
	// without a restart; 0 turns the check off (SIGHUP still reloads).
	PoliciesReload time.Duration `yaml:"policies_reload"`
	ODoH           ODoH          `yaml:"odoh"`

	// Source is the file the configuration came from, or DefaultSource.
	Source string `yaml:"-"`
}

// Listen holds the listeners' addresses and the DoH path.
type Listen struct {
	HTTPS string `yaml:"https"` // "" turns it off
	// HTTP3 serves DoH over HTTP/3 (QUIC, RFC 9114) on the UDP port of
	// the HTTPS listener's address, and HTTP/2 and HTTP/1.1 answers
	// advertise it (Alt-Svc); false leaves the HTTPS listener TCP only.
	HTTP3          bool     `yaml:"http3"`
	HTTP           string   `yaml:"http"`  // plaintext HTTP/1.1 + h2c; "" = off
	DoT            string   `yaml:"dot"`   // DNS over TLS (RFC 7858); "" = off
	DoQ            string   `yaml:"doq"`   // DNS over QUIC (RFC 9250), a UDP address; "" = off
	DNS            string   `yaml:"dns"`   // plain DNS, UDP and TCP; "" = off
	Admin          string   `yaml:"admin"` // "" turns it off
	Path           string   `yaml:"path"`
	TrustedProxies []string `yaml:"trusted_proxies"` // CIDRs or single IPs
	// ProxyProtocol lists the layer-4 balancers (CIDRs or single IPs) that
	// open every connection to the DoH listeners with a PROXY protocol
	// header (v1 or v2). Their header is required; anyone else's is refused.
	ProxyProtocol []string `yaml:"proxy_protocol"`
	// ServerTiming adds a Server-Timing header (source, attempts,
	// upstream time) to each DoH answer.
	ServerTiming bool `yaml:"server_timing"`
	// TraceContext reads W3C traceparent, puts the trace on the
	// question's log events and answers with traceresponse.
	TraceContext bool `yaml:"trace_context"`
}

// TLS chooses where the HTTPS listener's certificate comes from.
type TLS struct {
	Mode     string `yaml:"mode"` // self-signed | files | acme
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	ACME     ACME   `yaml:"acme"`
}

// ACME configures certificates from an ACME CA.
type ACME struct {
	Domains []string `yaml:"domains"`
	Email   string   `yaml:"email"`
	CA      string   `yaml:"ca"`      // directory URL; "" = Let's Encrypt production
	CARoot  string   `yaml:"ca_root"` // PEM file to trust for the CA
	// Storage is a folder, or a redis:// or rediss:// URL (no password in
	// it) of a store shared by the replicas of a fleet.
	Storage string `yaml:"storage"`
	// Redis tunes a Redis storage.
	Redis Redis `yaml:"redis"`
	// HTTPListen is where HTTP-01 challenges are answered; "" leaves
	// TLS-ALPN-01 only.
	HTTPListen string `yaml:"http_listen"`
	// DisableTLSALPN turns TLS-ALPN-01 off, for an HTTPS listener that
	// the CA cannot reach directly; HTTP-01 (http_listen) must then be on.
	DisableTLSALPN bool `yaml:"disable_tls_alpn"`
	// Profile asks the CA for a certificate profile it offers ("" = the
	// CA's default).
	Profile string `yaml:"profile"`
}

// Redis tunes the shared certificate store when tls.acme.storage is a
// redis:// or rediss:// URL.
type Redis struct {
	// PasswordFile holds the password; "" = $DOHFWD_REDIS_PASSWORD. The
	// user name comes from the URL or $DOHFWD_REDIS_USERNAME.
	PasswordFile string `yaml:"password_file"`
	// CARoot is a PEM file of roots to trust for rediss:// ("" = system).
	CARoot    string `yaml:"ca_root"`
	KeyPrefix string `yaml:"key_prefix"`
	// LockLease is how long a lock outlives a replica that died holding it.
	LockLease time.Duration `yaml:"lock_lease"`
}

// Engine holds the forwarding engine's values.
type Engine struct {
	TransactionTimeout time.Duration `yaml:"transaction_timeout"`
	Attempts           int           `yaml:"attempts"`
	DemotionPeriod     time.Duration `yaml:"demotion_period"`
	InFlightCeiling    int           `yaml:"in_flight_ceiling"`
	QuestionTimeout    time.Duration `yaml:"question_timeout"` // 0 = none
	Probe              bool          `yaml:"probe"`
	// ForwardECS is the ECS policy of scopes that set none, and of the
	// fallback servers: true is "pass", false "strip" (Scope.ECS).
	ForwardECS bool `yaml:"forward_ecs"`
	// EDEServers lists each attempt (server, transport, outcome) in the
	// Extended DNS Error of an unavailable answer; false keeps the
	// upstreams private (the info-code and reason stay).
	EDEServers bool `yaml:"ede_servers"`
}

// Scope is one scope: routing domains and the servers that answer them.
type Scope struct {
	Name         string   `yaml:"name"`
	Domains      []string `yaml:"domains"`
	DefaultRoute bool     `yaml:"default_route"`
	Servers      []string `yaml:"servers"`
	Search       []string `yaml:"search"`
	SourcesV4    []string `yaml:"sources_v4"`
	SourcesV6    []string `yaml:"sources_v6"`
	// ECS is what becomes of a client's EDNS Client Subnet option (RFC
	// 7871) toward the scope's servers: "strip" (it never reaches them)
	// or "pass" (it goes as the client wrote it; such answers are not
	// cached). "" is engine.forward_ecs's choice: pass when true, else
	// strip.
	ECS string `yaml:"ecs"`
	// IPv4Prefix and IPv6Prefix are the source prefixes of ecs: add (0:
	// 24 and 56).
	IPv4Prefix int `yaml:"ipv4_prefix"`
	IPv6Prefix int `yaml:"ipv6_prefix"`
	// UpstreamCookies sends the scope's servers DNS cookies (RFC 7873)
	// and ignores replies without their own; nil is true. False is for
	// servers that mishandle cookies.
	UpstreamCookies *bool `yaml:"upstream_cookies"`
	// Upstream0x20 asks the scope's servers each name in random case and
	// ignores replies that do not keep it; nil is true. A server found
	// not to keep case is asked in lower case anyway.
	Upstream0x20 *bool `yaml:"upstream_0x20"`
}

// Cache bounds the answer cache.
type Cache struct {
	MaxEntries     int           `yaml:"max_entries"` // 0 turns the cache off
	MinTTL         time.Duration `yaml:"min_ttl"`
	MaxTTL         time.Duration `yaml:"max_ttl"`
	NegativeMaxTTL time.Duration `yaml:"negative_max_ttl"`
	// Serve-stale (RFC 8767) and prefetch: see engine.CacheConfig.
	StaleMax         time.Duration `yaml:"stale_max"`          // 0 turns serve-stale off
	StaleTTL         time.Duration `yaml:"stale_ttl"`          // TTL of stale answers
	StaleAnswerAfter time.Duration `yaml:"stale_answer_after"` // client response timer; 0 off
	PrefetchMinHits  int           `yaml:"prefetch_min_hits"`  // 0 turns prefetch off
}

// Limits bound what one client prefix may take (package limits); 0
// turns a limit off, and every one is off by default. One more bounds
// each HTTP/2 connection: StreamsPerConnection.
type Limits struct {
	ClientQPS         float64 `yaml:"client_qps"`         // queries per second per prefix
	ClientBurst       int     `yaml:"client_burst"`       // queries at once above the rate; 0 = client_qps
	ClientInFlight    int     `yaml:"client_in_flight"`   // upstream transactions a prefix may hold
	ClientConnections int     `yaml:"client_connections"` // open connections per prefix
	Connections       int     `yaml:"connections"`        // open connections in all
	PrefixV4          int     `yaml:"prefix_v4"`          // how clients group: /24
	PrefixV6          int     `yaml:"prefix_v6"`          // and /56
	// StreamsPerConnection is how many requests one HTTP/2 connection may
	// have open at once (SETTINGS_MAX_CONCURRENT_STREAMS); unlike the
	// others it is always on (default 250) and read at start only.
	StreamsPerConnection int `yaml:"streams_per_connection"`
}

// DDR sets what Discovery of Designated Resolvers (RFC 9462) advertises.
// It is on whenever an encrypted listener (https, dot) is; the ports are
// the listeners'.
type DDR struct {
	// Names are the names clients reach this server by and check its
	// certificate against; empty = tls.acme.domains, else the DNS names
	// of the certificate.
	Names []string `yaml:"names"`
	// Addresses are this server's public IP addresses (ipv4hint,
	// ipv6hint); empty = the encrypted listeners' addresses when they are
	// not wildcards.
	Addresses []string `yaml:"addresses"`
}

// AppleProfile configures the .mobileconfig served at /apple.mobileconfig
// and written by `dohfwd profile apple`.
type AppleProfile struct {
	// SignCert and SignKey, both set, sign the profile (PEM: the chain,
	// leaf first, and its key); both "" leave it unsigned.
	SignCert string `yaml:"sign_cert"`
	SignKey  string `yaml:"sign_key"`
}

// UpstreamTLS configures the encrypted upstreams: servers written
// tls://IP[:PORT]#NAME (DNS over TLS) and https://IP[:PORT]/PATH#NAME
// (DoH) in a scope's servers or fallback_servers.
type UpstreamTLS struct {
	// CAFile is a PEM file of CA certificates to verify encrypted
	// upstreams against instead of the system's roots (a private
	// resolver's CA); "" = the system's.
	CAFile string `yaml:"ca_file"`
	// MaxConnections bounds the connections kept open to each DoT or DoH
	// server; queries are pipelined on them.
	MaxConnections int `yaml:"max_connections"`
	// IdleTimeout closes a DoT or DoH connection unused that long.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
}

// Dnstap sends every client and upstream message to a dnstap collector
// (Frame Streams over a Unix or TCP socket); off while Address is "".
type Dnstap struct {
	// Address is the collector's socket: unix:/path (or a path
	// starting with /) or tcp:host:port (or host:port).
	Address string `yaml:"address"`
	// Queue is how many messages wait for the socket at most; past it,
	// and while the collector is away, new messages are dropped and
	// counted, and no question waits.
	Queue int `yaml:"queue"`
	// Identity names this server in each message; "" = the host name.
	Identity string `yaml:"identity"`
}

// ODoH turns on the Oblivious DoH (RFC 9230) roles, each off by default:
// the target (this server decrypts and answers ODoH queries at
// listen.path and serves its keys at /.well-known/odohconfigs) and the
// relay (it forwards clients' ODoH messages at /proxy to the targets on
// its list).
type ODoH struct {
	Target bool `yaml:"target"`
	// KeyFile holds the secret seed the target's keys are derived from;
	// made (0600) when missing. Replicas behind one name share it, as
	// they share certificates. "" keeps a fresh seed in memory: new keys
	// at each start.
	KeyFile string `yaml:"key_file"`
	// Rotate is how often the target's key changes (0: never); the
	// previous key is still accepted for one more period, and the next
	// one is listed ahead of its period.
	Rotate time.Duration `yaml:"rotate"`

	Relay bool `yaml:"relay"`
	// Targets are the targets the relay forwards to, host or host:port
	// as clients name them in targethost; any other gets 403.
	Targets []string `yaml:"targets"`
	// CARoot is a PEM file of roots to trust for the targets'
	// certificates ("" = the system's).
	CARoot string `yaml:"ca_root"`
}

// DnstapAddress reads a dnstap.address: its network ("unix" or "tcp")
// and address.
func DnstapAddress(s string) (network, address string, err error) {
	switch {
	case strings.HasPrefix(s, "unix:"):
		network, address = "unix", strings.TrimPrefix(s, "unix:")
	case strings.HasPrefix(s, "/"):
		network, address = "unix", s
	case strings.HasPrefix(s, "tcp:"):
		network, address = "tcp", strings.TrimPrefix(s, "tcp:")
	default:
		network, address = "tcp", s
	}
	if network == "unix" {
		if address == "" {
			return "", "", fmt.Errorf("%q: no socket path after unix:", s)
		}
		return network, address, nil
	}
	host, port, err := net.SplitHostPort(address)
	if err != nil || host == "" {
		return "", "", fmt.Errorf("%q: want unix:/path or tcp:host:port", s)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return "", "", fmt.Errorf("%q: port %q is not a number from 1 to 65535", s, port)
	}
	return network, address, nil
}

// Log sets the log level and format.
type Log struct {
	Level  string `yaml:"level"`  // debug | info | warn | error
	Format string `yaml:"format"` // auto | json | console
}

// Error is one problem in a configuration file, located by line and key.
type Error struct {
	File string
	Line int    // 0 when unknown
	Key  string // dotted path, e.g. "scopes[0].servers[1]"; "" when unknown
	Msg  string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(e.Line))
	}
	if e.Key != "" {
		b.WriteString(": ")
		b.WriteString(e.Key)
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}

// resolvConf is where Default reads the system's nameservers.
var resolvConf = "/etc/resolv.conf"

// defaults returns the built-in values, the same as default.yaml without
// the system scope.
func defaults() *Config {
	return &Config{
		Listen: Listen{HTTPS: "127.0.0.1:8443", HTTP3: true, Admin: "127.0.0.1:9153", Path: "/dns-query", TrustedProxies: []string{},
			ProxyProtocol: []string{}, ServerTiming: true, TraceContext: true},
		TLS: TLS{Mode: "self-signed", ACME: ACME{Domains: []string{},
			Redis: Redis{KeyPrefix: "dohfwd", LockLease: 30 * time.Second}}},
		Engine: Engine{
			TransactionTimeout: 2 * time.Second, Attempts: 3, DemotionPeriod: 30 * time.Second,
			InFlightCeiling: 4096, EDEServers: true,
		},
		Scopes:          []Scope{},
		FallbackServers: []string{"1.1.1.1", "8.8.8.8", "9.9.9.9"},
		Hosts:           map[string][]string{},
		Cache: Cache{MaxEntries: 100000, MaxTTL: 24 * time.Hour, NegativeMaxTTL: time.Hour,
			StaleMax: 24 * time.Hour, StaleTTL: 30 * time.Second, StaleAnswerAfter: 1800 * time.Millisecond,
			PrefetchMinHits: 2},
		Limits: Limits{PrefixV4: 24, PrefixV6: 56, StreamsPerConnection: 250},
		Log:    Log{Level: "info", Format: "auto"},
		DDR:    DDR{Names: []string{}, Addresses: []string{}},
		Dnstap: Dnstap{Queue: 10000},
		UpstreamTLS: UpstreamTLS{MaxConnections: 4,
			IdleTimeout: 30 * time.Second},
		Policies:       map[string]Policy{},
		PoliciesReload: time.Minute,
		ODoH:           ODoH{Targets: []string{}},
	}
}

// SystemServers returns the nameservers listed in a resolv.conf file.
func SystemServers(path string) ([]string, error) {
	servers, err := systemServers(path)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(servers))
	for i, ns := range servers {
		out[i] = ns.addr
	}
	return out, nil
}

// nameserver is one nameserver line of a resolv.conf file.
type nameserver struct {
	addr string
	line int
}

func systemServers(path string) ([]nameserver, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("resolv.conf: %w", err)
	}
	var out []nameserver
	n := 0
	for line := range strings.Lines(string(data)) {
		n++
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "nameserver" {
			out = append(out, nameserver{addr: f[1], line: n})
		}
	}
	return out, nil
}

// errs collects validation errors.
type errs []error

func (e *errs) add(err error) { *e = append(*e, err) }
func (e errs) join() error    { return errors.Join(e...) }
