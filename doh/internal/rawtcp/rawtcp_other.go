//go:build !linux

package rawtcp

const supported = false
