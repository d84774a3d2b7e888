// Package config reads dohfwd's YAML configuration file.
//
// The file is strict: an unknown key, a value of the wrong type or a bad
// address is an error that names the file, the line and the key. Every key
// is optional and has a default; with no file at all dohfwd runs on the
// embedded default (default.yaml). A Config converts to the engine's
// configuration and the certificate manager's.
//
// Besides the DoH listeners, listen.dot (DNS over TLS, with the HTTPS
// listener's certificates) and listen.dns (plain DNS on UDP and TCP) are
// off unless set. The ddr section only names what Discovery of Designated
// Resolvers advertises (ddr.names, ddr.addresses); DDR itself is on
// whenever an encrypted listener is. apple_profile signs the Apple
// configuration profile when set.
package config
