package manifestcheck

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// Kustomization is the part of kustomization.yaml this checker reads;
// strict decoding rejects any other field, so a new kustomize feature in
// the file is noticed here first.
type Kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace,omitempty"`
	Resources  []string `json:"resources"`
	Labels     []struct {
		Pairs            map[string]string `json:"pairs"`
		IncludeSelectors bool              `json:"includeSelectors,omitempty"`
	} `json:"labels,omitempty"`
	Images []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
		Digest  string `json:"digest,omitempty"`
	} `json:"images,omitempty"`
}

// Certificate is cert-manager.io/v1 Certificate, the fields dohfwd uses
// (a local type: cert-manager's API module is heavy).
type Certificate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		SecretName  string   `json:"secretName"`
		DNSNames    []string `json:"dnsNames,omitempty"`
		IPAddresses []string `json:"ipAddresses,omitempty"`
		Duration    string   `json:"duration,omitempty"`
		RenewBefore string   `json:"renewBefore,omitempty"`
		PrivateKey  *struct {
			Algorithm      string `json:"algorithm,omitempty"`
			Size           int    `json:"size,omitempty"`
			Encoding       string `json:"encoding,omitempty"`
			RotationPolicy string `json:"rotationPolicy,omitempty"`
		} `json:"privateKey,omitempty"`
		Usages    []string `json:"usages,omitempty"`
		IssuerRef struct {
			Name  string `json:"name"`
			Kind  string `json:"kind,omitempty"`
			Group string `json:"group,omitempty"`
		} `json:"issuerRef"`
	} `json:"spec"`
}

// Set is every decoded resource of one kustomization.
type Set struct {
	Kustomization Kustomization
	Namespaces    []*corev1.Namespace
	ConfigMaps    []*corev1.ConfigMap
	Services      []*corev1.Service
	Deployments   []*appsv1.Deployment
	PDBs          []*policyv1.PodDisruptionBudget
	HPAs          []*autoscalingv2.HorizontalPodAutoscaler
	Certificates  []*Certificate
	PVCs          []*corev1.PersistentVolumeClaim
}

// LoadKustomization reads dir/kustomization.yaml and every resource file it
// lists, decoding each document strictly by its apiVersion and kind.
func LoadKustomization(dir string) (*Set, error) {
	path := filepath.Join(dir, "kustomization.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("kustomization: %w", err)
	}
	s := new(Set)
	if err := yaml.UnmarshalStrict(data, &s.Kustomization); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if k := s.Kustomization; k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		return nil, fmt.Errorf("%s: not a kustomize.config.k8s.io/v1beta1 Kustomization", path)
	}
	for _, r := range s.Kustomization.Resources {
		file := filepath.Join(dir, r)
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("kustomization resource %q: %w", r, err)
		}
		for i, doc := range Documents(data) {
			if err := s.add(doc); err != nil {
				return nil, fmt.Errorf("%s (document %d): %w", file, i+1, err)
			}
		}
	}
	return s, nil
}

// LoadOverlay renders the kustomization in dir with kustomize's own
// library (as `kubectl apply -k` would: bases, patches, deletions) and
// decodes every resource of the result strictly.
func LoadOverlay(dir string) (*Set, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize %s: %w", dir, err)
	}
	out, err := rm.AsYaml()
	if err != nil {
		return nil, fmt.Errorf("kustomize %s: %w", dir, err)
	}
	s := new(Set)
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return nil, fmt.Errorf("kustomization: %w", err)
	}
	var k8s struct {
		Namespace string   `json:"namespace"`
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(data, &k8s); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	s.Kustomization.Namespace, s.Kustomization.Resources = k8s.Namespace, k8s.Resources
	for i, doc := range Documents(out) {
		if err := s.add(doc); err != nil {
			return nil, fmt.Errorf("%s (rendered document %d): %w", dir, i+1, err)
		}
	}
	return s, nil
}

var separator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// Documents splits a multi-document YAML file, dropping empty documents.
func Documents(data []byte) [][]byte {
	var docs [][]byte
	for _, d := range separator.Split(string(data), -1) {
		if len(bytes.TrimSpace(stripComments([]byte(d)))) > 0 {
			docs = append(docs, []byte(d))
		}
	}
	return docs
}

func stripComments(b []byte) []byte {
	var out []byte
	for _, line := range bytes.Split(b, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' {
			out = append(out, line...)
			out = append(out, '\n')
		}
	}
	return out
}

// add decodes one document into the type its apiVersion and kind name.
func (s *Set) add(doc []byte) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return err
	}
	switch tm.APIVersion + " " + tm.Kind {
	case "v1 Namespace":
		return decodeInto(doc, &s.Namespaces)
	case "v1 ConfigMap":
		return decodeInto(doc, &s.ConfigMaps)
	case "v1 Service":
		return decodeInto(doc, &s.Services)
	case "apps/v1 Deployment":
		return decodeInto(doc, &s.Deployments)
	case "policy/v1 PodDisruptionBudget":
		return decodeInto(doc, &s.PDBs)
	case "autoscaling/v2 HorizontalPodAutoscaler":
		return decodeInto(doc, &s.HPAs)
	case "cert-manager.io/v1 Certificate":
		return decodeInto(doc, &s.Certificates)
	case "v1 PersistentVolumeClaim":
		return decodeInto(doc, &s.PVCs)
	}
	return fmt.Errorf("apiVersion %q kind %q: not a kind this checker knows", tm.APIVersion, tm.Kind)
}

// decodeInto decodes doc strictly into a new T and appends it to list.
func decodeInto[T any](doc []byte, list *[]*T) error {
	v := new(T)
	if err := yaml.UnmarshalStrict(doc, v); err != nil {
		return err
	}
	*list = append(*list, v)
	return nil
}
