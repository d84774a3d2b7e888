//go:build !wasip1

package config

// Reading the YAML file: natively only. The WebAssembly module links no
// YAML decoder (nor the regexp package it needs): its host reads the file
// and hands the module the configuration encoded (Encode, Decode).

import (
	"bufio"
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/dohfwd/dohfwd/engine"
)

//go:embed default.yaml
var defaultYAML []byte

// Load reads and checks the file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(path, data)
}

// LoadOrDefault reads the file at path, or the embedded default (Default)
// when path is "": what `dohfwd serve --config` and dohfwd-edge read.
func LoadOrDefault(path string) (*Config, error) {
	if path == "" {
		return Default()
	}
	return Load(path)
}

// Default returns the embedded default with a default-route scope named
// "system" whose servers are the nameservers of /etc/resolv.conf.
func Default() (*Config, error) {
	c, err := Parse(DefaultSource, defaultYAML)
	if err != nil {
		return nil, err // the embedded file is tested; this is a build bug
	}
	servers, err := systemServers(resolvConf)
	if err == nil && len(servers) > 0 {
		s := Scope{Name: "system", DefaultRoute: true}
		for _, ns := range servers {
			// Checked as a file's servers are: the engine refuses what
			// it cannot use (an IPv6 zone, say).
			if _, err := engine.ParseServer(ns.addr); err != nil {
				return nil, &Error{File: resolvConf, Line: ns.line, Key: "nameserver", Msg: err.Error()}
			}
			s.Servers = append(s.Servers, ns.addr)
		}
		c.Scopes = append(c.Scopes, s)
	}
	return c, nil
}

// Parse reads a configuration from data; name is the file name used in
// errors. Keys left out keep their defaults.
func Parse(name string, data []byte) (*Config, error) {
	c := defaults()
	c.Source = name
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, syntaxError(name, data, err)
	}
	if len(root.Content) == 0 {
		return c, nil // an empty file: all defaults
	}
	idx := newKeyIndex()
	if err := idx.walk(name, root.Content[0], typeOfConfig, ""); err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil {
		return nil, idx.decodeError(name, err)
	}
	if err := c.validate(idx); err != nil {
		return nil, err
	}
	if err := c.checkPolicyFiles(idx); err != nil {
		return nil, err
	}
	return c, nil
}

var yamlLine = regexp.MustCompile(`line (\d+): (.*)`)

// syntaxError locates a YAML syntax error by line and, when the line holds
// one, by its key.
func syntaxError(name string, data []byte, err error) error {
	m := yamlLine.FindStringSubmatch(err.Error())
	if m == nil {
		return &Error{File: name, Msg: err.Error()}
	}
	line, _ := strconv.Atoi(m[1])
	return &Error{File: name, Line: line, Key: keyOnLine(data, line), Msg: "malformed YAML at or just after this line: " + m[2]}
}

// keyOnLine returns the mapping key written on line n (1-based), if any.
func keyOnLine(data []byte, n int) string {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for i := 1; sc.Scan(); i++ {
		if i != n {
			continue
		}
		s := strings.TrimLeft(strings.TrimSpace(sc.Text()), "- ")
		if k, _, ok := strings.Cut(s, ":"); ok && k != "" && !strings.ContainsAny(k, " \t{[\"'") {
			return k
		}
		return ""
	}
	return ""
}

var typeOfConfig = reflect.TypeFor[Config]()

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
