package admin

import (
	"embed"
	"net/http"
)

// The status page: plain HTML, CSS and JavaScript embedded in the binary.
// No CDN and no build step; the script reads /status and /metrics.
//
//go:embed page/index.html page/status.css page/status.js
var pageFiles embed.FS

var pageAssets = http.FileServerFS(pageFiles)

func servePage(w http.ResponseWriter, r *http.Request) {
	b, err := pageFiles.ReadFile("page/index.html")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	// The page loads only its own files and talks only to its own origin.
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:")
	h.Set("X-Content-Type-Options", "nosniff")
	w.Write(b)
}
