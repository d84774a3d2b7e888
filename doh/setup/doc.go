// Package setup helps people point their devices at this server: the
// setup page (GET / with Accept: text/html) with the DoH URL, the DoT host
// name, a QR code of the URL and the steps for each browser and operating
// system, and the Apple configuration profile (GET /apple.mobileconfig,
// and `dohfwd profile apple`). Everything it serves is built in: the page
// makes no request of its own.
package setup
