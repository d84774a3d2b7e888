package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// adminGet fetches path (with its query) from a running server's admin
// listener at addr and decodes the JSON answer into v. A status other
// than 200 is an error that carries the admin's own message, if it sent
// one ({"error": ...}).
func adminGet(ctx context.Context, addr, path string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return fmt.Errorf("admin %q: %w", addr, err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("admin %s: %w", addr, err)
	}
	defer res.Body.Close()
	name := path
	if u, err := req.URL.Parse(path); err == nil {
		name = u.Path
	}
	if res.StatusCode != http.StatusOK {
		var e struct{ Error string }
		if json.NewDecoder(res.Body).Decode(&e) == nil && e.Error != "" {
			return fmt.Errorf("admin %s: GET %s: %s: %s", addr, name, res.Status, e.Error)
		}
		return fmt.Errorf("admin %s: GET %s: %s", addr, name, res.Status)
	}
	if err := json.NewDecoder(res.Body).Decode(v); err != nil {
		return fmt.Errorf("admin %s: reading %s: %w", addr, name, err)
	}
	return nil
}
