//go:build wasip1

package doh

// SetupPages is empty in the module: the setup pages are served by the
// native listeners (package setup is an http.Handler, and the module
// links no net/http), so Options.Setup is left nil there.
type SetupPages interface{}

// serveSetup is never reached in the module (Options.Setup is nil): a
// setup path is not found, as with no setup pages natively.
func (h *Handler) serveSetup(c *call) { h.fail(c, statusNotFound, h.notFound) }
