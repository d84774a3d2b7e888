package config

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Encode is c as a program hands it to another that reads no YAML (the
// edge host to its WebAssembly module): every field, JSON, checked
// already. Decode reads it back.
func Encode(c *Config) ([]byte, error) { return json.Marshal(c) }

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
