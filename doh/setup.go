package doh

import (
	"net/http"
	"strings"
)

// SetupProfilePath is the Apple profile's path, served by Options.Setup.
const SetupProfilePath = "/apple.mobileconfig"

// acceptsHTML reports whether the client is a browser asking for a page:
// only then does GET / show the setup page.
func acceptsHTML(h http.Header) bool {
	for _, v := range h["Accept"] {
		if strings.Contains(strings.ToLower(v), "text/html") {
			return true
		}
	}
	return false
}
