package config

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/dohfwd/dohfwd/engine"
)

// Encode is c as a program hands it to another that reads no YAML (the
// edge host to its WebAssembly module): every field, JSON, checked
// already, its internationalized names in punycode (the module converts
// none: engine.ASCIIName). Decode reads it back.
func Encode(c *Config) ([]byte, error) {
	e := *c
	e.Scopes = make([]Scope, len(c.Scopes))
	for i, s := range c.Scopes {
		s.Domains, s.Search = asciiNames(s.Domains), asciiNames(s.Search)
		e.Scopes[i] = s
	}
	e.Hosts = asciiHosts(c.Hosts)
	e.DDR.Names = asciiNames(c.DDR.Names)
	return json.Marshal(&e)
}

// asciiNames is names with the internationalized ones in punycode.
func asciiNames(names []string) []string {
	if names == nil {
		return nil
	}
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = engine.ASCIIName(n)
	}
	return out
}

// asciiHosts is hosts with its internationalized names in punycode; a
// name written both ways keeps the addresses of both.
func asciiHosts(hosts map[string][]string) map[string][]string {
	if hosts == nil {
		return nil
	}
	out := make(map[string][]string, len(hosts))
	for name, addrs := range hosts {
		a := engine.ASCIIName(name)
		out[a] = append(out[a], addrs...)
	}
	return out
}

// Decode reads a configuration Encode wrote and checks it again, as Parse
// does; keys left out (all of them, for empty data) keep their defaults,
// as in Parse. Errors name the file (c.Source) and the key; a line only
// the YAML reader knows, so the host that read the file reports those.
func Decode(data []byte) (*Config, error) {
	c := defaults()
	if len(bytes.TrimSpace(data)) == 0 {
		return c, nil
	}
	if err := json.Unmarshal(data, c); err != nil {
		return nil, fmt.Errorf("encoded configuration: %w", err)
	}
	if err := c.validate(newKeyIndex()); err != nil {
		return nil, err
	}
	return c, nil
}
