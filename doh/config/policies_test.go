package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// policies: and policies_reload: are read, and their errors name the
// file, the line and the key: a missing list file, an unknown action.
func TestPoliciesKeys(t *testing.T) {
	dir := t.TempDir()
	list := filepath.Join(dir, "ads.txt")
	if err := os.WriteFile(list, []byte("ads.example\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Parse("p.yaml", []byte("policies:\n  kids:\n    block: ["+list+"]\n    allow: [ok.example]\n    action: \"null\"\npolicies_reload: 30s\n"))
	if err != nil {
		t.Fatal(err)
	}
	specs := c.PolicySpecs()
	if len(specs) != 1 || specs[0].Name != "kids" || specs[0].Block[0] != list || specs[0].Action.String() != "null" || c.PoliciesReload.String() != "30s" {
		t.Fatalf("%+v %v", specs, c.PoliciesReload)
	}
	for file, want := range map[string]string{
		"policies:\n  kids:\n    block: [/nonexistent/ads.txt]\n":           "p.yaml:3: policies.kids.block[0]: stat /nonexistent/ads.txt",
		"policies:\n  kids:\n    block: [" + list + "]\n    action: drop\n": "p.yaml:4: policies.kids.action: \"drop\": want nxdomain, null or refused",
		"policies:\n  kids:\n    allow: [\"bad name\"]\n":                   "p.yaml:3: policies.kids.allow[0]:",
		"policies_reload: -1m\n":                                            "p.yaml:1: policies_reload: -1m0s: must not be negative",
		"policies:\n  kids:\n    blocks: [a]\n":                             "p.yaml:3: policies.kids.blocks: unknown key",
	} {
		_, err := Parse("p.yaml", []byte(file))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", file, err, want)
		}
	}
}

// YAML reads an unquoted null as no value; in a policy's action it is
// the null action all the same, as written, and not the default.
func TestUnquotedNullActionIsTheNullAction(t *testing.T) {
	dir := t.TempDir()
	list := filepath.Join(dir, "ads.txt")
	if err := os.WriteFile(list, []byte("ads.example\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for doc, want := range map[string]string{
		"action: null":     "null",
		"action: Null":     "null",
		"action: \"null\"": "null",
		"action: ~":        "nxdomain",
		"action:":          "nxdomain",
		"action: refused":  "refused",
	} {
		c, err := Parse("p.yaml", []byte("policies:\n  kids:\n    block: ["+list+"]\n    "+doc+"\n"))
		if err != nil {
			t.Fatalf("%q: %v", doc, err)
		}
		if got := c.PolicySpecs()[0].Action.String(); got != want {
			t.Errorf("%q: action %s, want %s", doc, got, want)
		}
	}
	// The policy's other keys still decode, and their type errors still
	// name their line and key.
	_, err := Parse("p.yaml", []byte("policies:\n  kids:\n    block: "+list+"\n    action: null\n"))
	if err == nil || !strings.Contains(err.Error(), "p.yaml:3: policies.kids.block: wrong type") {
		t.Errorf("a block that is not a list: %v", err)
	}
}
