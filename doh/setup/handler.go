package setup

import (
	_ "embed"
	"html/template"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/dohfwd/dohfwd/doh/internal/ddr"
)

//go:embed page.html
var pageHTML string

var pageTemplate = template.Must(template.New("page").Parse(pageHTML))

// Handler serves the setup page at "/" and the Apple profile at
// ProfilePath. The DoH front end hands it those paths.
type Handler struct {
	// Path is the DoH path, used until Designate says otherwise.
	Path string
	// Signer, when set, signs the profile.
	Signer *Signer

	designation atomic.Pointer[ddr.Designation]
}

// Designate tells the handler the configured names and addresses and the
// listeners' ports, once they are bound.
func (h *Handler) Designate(d ddr.Designation) { h.designation.Store(&d) }

func (h *Handler) site(r *http.Request) Site {
	var d ddr.Designation
	if p := h.designation.Load(); p != nil {
		d = *p
	}
	return SiteFrom(d, h.Path, r.Host)
}

// Security headers of every page: nothing may load from anywhere, the
// inline style excepted.
const contentSecurityPolicy = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed: use GET", http.StatusMethodNotAllowed)
		return
	}
	switch r.URL.Path {
	case "/":
		h.servePage(w, r)
	case ProfilePath:
		h.serveProfile(w, r)
	default:
		http.NotFound(w, r)
	}
}

func (h *Handler) servePage(w http.ResponseWriter, r *http.Request) {
	s := h.site(r)
	qr, err := qrSVG(s.DoHURL)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	var b strings.Builder
	err = pageTemplate.Execute(&b, struct {
		Site
		QR          any
		ProfilePath string
		DoTPortNote string
	}{s, qr, ProfilePath, dotPortNote(s)})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	hdr := w.Header()
	hdr.Set("Content-Type", "text/html; charset=utf-8")
	hdr.Set("Content-Security-Policy", contentSecurityPolicy)
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set("Vary", "Accept")
	hdr.Set("Content-Length", strconv.Itoa(b.Len()))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write([]byte(b.String()))
	}
}

// dotPortNote warns that Android only reaches DoT on port 853.
func dotPortNote(s Site) string {
	if !s.DoT || s.DoTPort == 853 {
		return ""
	}
	return "This server's DoT listener is on port " + strconv.Itoa(int(s.DoTPort)) + "; Android Private DNS only uses port 853."
}

func (h *Handler) serveProfile(w http.ResponseWriter, r *http.Request) {
	body := AppleProfile(h.site(r))
	if h.Signer != nil {
		signed, err := h.Signer.Sign(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		body = signed
	}
	hdr := w.Header()
	hdr.Set("Content-Type", ProfileContentType)
	hdr.Set("Content-Disposition", `attachment; filename="dohfwd.mobileconfig"`)
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(body)
	}
}
