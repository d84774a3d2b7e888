// Package config reads dohfwd's YAML configuration file.
//
// The file is strict: an unknown key, a value of the wrong type or a bad
// address is an error that names the file, the line and the key. Every key
// is optional and has a default; with no file at all dohfwd runs on the
// embedded default (default.yaml). A Config converts to the engine's
// configuration and the certificate manager's.
package config
