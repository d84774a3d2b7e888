package config

import "strings"

// keyIndex remembers where each key of a file is, so errors found after
// decoding can name the line and the key.
type keyIndex struct {
	lineOf map[string]int // key path -> line
	keyAt  map[int]string // line -> the deepest key path written there
}

func newKeyIndex() *keyIndex {
	return &keyIndex{lineOf: map[string]int{}, keyAt: map[int]string{}}
}

func (x *keyIndex) note(path string, line int) {
	x.lineOf[path] = line
	if cur, ok := x.keyAt[line]; !ok || len(path) > len(cur) {
		x.keyAt[line] = path
	}
}

// errorAt returns an Error for the key at path.
func (x *keyIndex) errorAt(file, path, msg string) *Error {
	line := x.lineOf[path]
	if path == "" {
		return &Error{File: file, Line: line, Msg: msg}
	}
	// A defaulted key has no line; point at its nearest written parent.
	for p := path; line == 0 && p != ""; {
		p = parentPath(p)
		line = x.lineOf[p]
	}
	return &Error{File: file, Line: line, Key: path, Msg: msg}
}

func parentPath(p string) string {
	if i := strings.LastIndexAny(p, ".["); i >= 0 {
		return p[:i]
	}
	return ""
}
