// Package config reads dohfwd's YAML configuration file.
//
// The file is strict: an unknown key, a value of the wrong type, a bad
// address, or anything else the engine would refuse (its own parsers do
// the checking, and engine.Validate runs last) is an error that names the
// file, the line and the key. Every key is optional and has a default;
// with no file at all dohfwd runs on the embedded default (default.yaml)
// plus a scope of the nameservers in /etc/resolv.conf. A Config converts
// to the engine's configuration (EngineConfig); package assembly builds
// the rest of a running dohfwd from it.
package config
