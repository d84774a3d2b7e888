package config

import (
	"slices"

	"github.com/dohfwd/dohfwd/engine"
)

// EngineConfig returns the engine's part of the configuration, its
// internationalized names in punycode (as the engine reads them; the edge
// module, which takes this on a reload, converts none).
func (c *Config) EngineConfig() engine.Config {
	ec := engine.Config{
		TransactionTimeout: c.Engine.TransactionTimeout,
		Attempts:           c.Engine.Attempts,
		DemotionPeriod:     c.Engine.DemotionPeriod,
		InFlightCeiling:    c.Engine.InFlightCeiling,
		QuestionTimeout:    c.Engine.QuestionTimeout,
		Probe:              c.Engine.Probe,
		ForwardECS:         c.Engine.ForwardECS,
		EDEHideServers:     !c.Engine.EDEServers,
		UpstreamCookies:    upstreamCookies,
		Upstream0x20:       true,
		FallbackServers:    slices.Clone(c.FallbackServers),

		EncryptedConnections: c.UpstreamTLS.MaxConnections,
		EncryptedIdle:        c.UpstreamTLS.IdleTimeout,
		Hosts:                asciiHosts(c.Hosts),
		Cache: engine.CacheConfig{
			MaxEntries:     c.Cache.MaxEntries,
			MinTTL:         c.Cache.MinTTL,
			MaxTTL:         c.Cache.MaxTTL,
			NegativeMaxTTL: c.Cache.NegativeMaxTTL,

			StaleMax:         c.Cache.StaleMax,
			StaleTTL:         c.Cache.StaleTTL,
			StaleAnswerAfter: c.Cache.StaleAnswerAfter,
			PrefetchMinHits:  c.Cache.PrefetchMinHits,
		},
	}
	for _, s := range c.Scopes {
		ec.Scopes = append(ec.Scopes, engine.ScopeConfig{
			Name: s.Name, Domains: asciiNames(s.Domains), DefaultRoute: s.DefaultRoute,
			Servers: slices.Clone(s.Servers), Search: asciiNames(s.Search),
			SourcesV4: slices.Clone(s.SourcesV4), SourcesV6: slices.Clone(s.SourcesV6),
			ECS:               ecsPolicies[s.ECS],
			ECSPrefixV4:       s.IPv4Prefix,
			ECSPrefixV6:       s.IPv6Prefix,
			NoUpstreamCookies: s.UpstreamCookies != nil && !*s.UpstreamCookies,
			NoUpstream0x20:    s.Upstream0x20 != nil && !*s.Upstream0x20,
		})
	}
	return ec
}

// ecsPolicies are the values of a scope's ecs key ("" defers to
// engine.forward_ecs).
var ecsPolicies = map[string]engine.ECSPolicy{"": engine.ECSDefault, "strip": engine.ECSStrip, "pass": engine.ECSPass, "add": engine.ECSAdd}
