package config

import (
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

var typeOfConfig = reflect.TypeFor[Config]()

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

// walk checks every mapping key of n against the YAML fields of t,
// recording lines. An unknown key is an error naming the key and the keys
// that would be known there.
func (x *keyIndex) walk(file string, n *yaml.Node, t reflect.Type, path string) error {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return nil // the decoder reports the wrong type
		}
		fields := yamlFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := join(path, k.Value)
			x.note(p, k.Line)
			f, ok := fields[k.Value]
			if !ok {
				return &Error{File: file, Line: k.Line, Key: p, Msg: "unknown key (known here: " + knownKeys(fields) + ")"}
			}
			if err := x.walk(file, v, f.Type, p); err != nil {
				return err
			}
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return nil
		}
		for i, v := range n.Content {
			p := path + "[" + strconv.Itoa(i) + "]"
			x.note(p, v.Line)
			if err := x.walk(file, v, t.Elem(), p); err != nil {
				return err
			}
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return nil
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := join(path, k.Value)
			x.note(p, k.Line)
			if err := x.walk(file, v, t.Elem(), p); err != nil {
				return err
			}
		}
	}
	return nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func yamlFields(t reflect.Type) map[string]reflect.StructField {
	m := map[string]reflect.StructField{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		m[name] = f
	}
	return m
}

func knownKeys(fields map[string]reflect.StructField) string {
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return strings.Join(keys, ", ")
}

// decodeError turns the decoder's "line N: ..." messages into Errors that
// name the key on that line.
func (x *keyIndex) decodeError(file string, err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return syntaxError(file, nil, err)
	}
	var out []error
	for _, msg := range te.Errors {
		m := yamlLine.FindStringSubmatch(msg)
		if m == nil {
			out = append(out, &Error{File: file, Msg: msg})
			continue
		}
		line, _ := strconv.Atoi(m[1])
		out = append(out, &Error{File: file, Line: line, Key: x.keyAt[line], Msg: typeMessage(m[2])})
	}
	return errors.Join(out...)
}

var cannotUnmarshal = typeWords()

func typeWords() *strings.Replacer {
	return strings.NewReplacer("cannot unmarshal ", "wrong type: cannot use ", " into ", " as ",
		"!!str", "string", "!!int", "integer", "!!bool", "boolean", "!!seq", "list",
		"!!map", "mapping", "!!float", "number", "time.Duration", "duration (e.g. 2s)")
}

// typeMessage rewords the decoder's type errors for operators.
func typeMessage(s string) string { return cannotUnmarshal.Replace(s) }
