// Package manifestcheck checks dohfwd's deployment manifests offline.
//
// It decodes every resource that deploy/kubernetes/kustomization.yaml lists
// strictly into its k8s.io/api type (unknown fields, wrong types and
// duplicate keys are errors), decodes the cert-manager Certificate into a
// local strict struct, and checks that the pieces fit together: selectors
// match the pod labels, probes and Service ports name container ports, the
// ConfigMap's dohfwd configuration listens where the container says and
// reads its certificate from the mounted Secret. It lives in its own
// module so the main module carries no Kubernetes dependency.
package manifestcheck
