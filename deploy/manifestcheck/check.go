package manifestcheck

import (
	"fmt"
	"net"
	"path"
	"slices"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// ConfigKey is the ConfigMap key holding dohfwd's configuration file.
const ConfigKey = "dohfwd.yaml"

// drainSeconds is dohfwd's SIGTERM drain bound (server.DefaultDrainTimeout).
const drainSeconds = 10

// DohfwdConfig is the part of a dohfwd configuration file the manifests
// must agree with. `dohfwd check-config` checks the whole file.
type DohfwdConfig struct {
	Listen struct {
		HTTPS         string   `json:"https"`
		HTTP          string   `json:"http"`
		Admin         string   `json:"admin"`
		ProxyProtocol []string `json:"proxy_protocol"`
		// HTTP3 is listen.http3; nil (absent) is dohfwd's default, on.
		HTTP3 *bool `json:"http3"`
	} `json:"listen"`
	TLS struct {
		Mode     string `json:"mode"`
		CertFile string `json:"cert_file"`
		KeyFile  string `json:"key_file"`
		ACME     struct {
			Domains []string `json:"domains"`
			Storage string   `json:"storage"`
			Redis   struct {
				PasswordFile string `json:"password_file"`
			} `json:"redis"`
		} `json:"acme"`
	} `json:"tls"`
}

// ParseDohfwdConfig reads the listen and tls sections of a dohfwd file.
func ParseDohfwdConfig(data []byte) (DohfwdConfig, error) {
	var c DohfwdConfig
	err := yaml.Unmarshal(data, &c)
	return c, err
}

// ListenPort is the port of a listen address ("0.0.0.0:8443" → 8443).
func ListenPort(addr string) (int32, error) {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, fmt.Errorf("listen address %q: %w", addr, err)
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return 0, fmt.Errorf("listen address %q: port: %w", addr, err)
	}
	return int32(n), nil
}

// Check returns every way the set's resources fail to fit together.
func Check(s *Set) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	var d *appsv1.Deployment
	n := 0
	for _, dep := range s.Deployments {
		if container(dep, "dohfwd") != nil {
			d, n = dep, n+1
		}
	}
	if n != 1 {
		bad("want exactly one Deployment with a dohfwd container, have %d", n)
		return errs
	}
	pod := d.Spec.Template
	if d.Spec.Selector == nil || !SelectorMatches(d.Spec.Selector.MatchLabels, pod.Labels) {
		bad("Deployment %s: selector does not match its pod labels", d.Name)
	}
	c := container(d, "dohfwd")
	if c == nil {
		bad("Deployment %s: no container named dohfwd", d.Name)
		return errs
	}
	for _, name := range []string{"doh", "admin"} {
		if containerPort(c, intstr.FromString(name)) == nil {
			bad("Deployment %s: container port %q missing", d.Name, name)
		}
	}
	admin := containerPort(c, intstr.FromString("admin"))
	for kind, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		switch {
		case p == nil || p.HTTPGet == nil:
			bad("Deployment %s: no HTTP %s probe", d.Name, kind)
		case p.HTTPGet.Path != "/healthz":
			bad("Deployment %s: %s probe path %q, want /healthz", d.Name, kind, p.HTTPGet.Path)
		case admin == nil || containerPort(c, p.HTTPGet.Port) != admin:
			bad("Deployment %s: %s probe port %s is not the admin port", d.Name, kind, p.HTTPGet.Port.String())
		}
	}
	errs = append(errs, checkHardening(d, c)...)
	if g := pod.Spec.TerminationGracePeriodSeconds; g == nil || *g <= drainSeconds {
		bad("Deployment %s: terminationGracePeriodSeconds must exceed dohfwd's %d s drain", d.Name, drainSeconds)
	}

	// Volumes: every mount has its volume, which comes from this set.
	configPath, tlsDir := "", ""
	for _, m := range c.VolumeMounts {
		v := volume(pod.Spec.Volumes, m.Name)
		switch {
		case v == nil:
			bad("Deployment %s: mount %q has no volume", d.Name, m.Name)
		case v.ConfigMap != nil:
			cm := configMap(s, v.ConfigMap.Name)
			if cm == nil {
				bad("Deployment %s: volume %q: ConfigMap %q is not in the kustomization", d.Name, v.Name, v.ConfigMap.Name)
			} else if m.SubPath == ConfigKey {
				configPath = m.MountPath
			}
		case v.Secret != nil:
			if certificateFor(s, v.Secret.SecretName) == nil {
				bad("Deployment %s: volume %q: Secret %q is not a Certificate's secretName", d.Name, v.Name, v.Secret.SecretName)
			} else if m.SubPath != "" {
				bad("Deployment %s: Secret mount %q uses subPath, so renewals never reach the pod", d.Name, m.Name)
			} else {
				tlsDir = m.MountPath
			}
		}
	}
	if configPath == "" {
		bad("Deployment %s: no mount of the ConfigMap's %s", d.Name, ConfigKey)
	} else if !slices.Contains(c.Args, configPath) {
		bad("Deployment %s: args %v do not name the mounted config %s", d.Name, c.Args, configPath)
	}
	errs = append(errs, checkConfig(s, d, c, tlsDir)...)

	for _, svc := range s.Services {
		if other := selected(s, svc); other != nil && other != d {
			continue // the Redis store's Service: checked with it
		}
		if !SelectorMatches(svc.Spec.Selector, pod.Labels) {
			bad("Service %s: selector matches no dohfwd pod", svc.Name)
		}
		for _, p := range svc.Spec.Ports {
			if containerPort(c, p.TargetPort) == nil {
				bad("Service %s: targetPort %s is no container port", svc.Name, p.TargetPort.String())
			}
		}
	}
	if len(s.PDBs) == 0 {
		bad("no PodDisruptionBudget")
	}
	for _, pdb := range s.PDBs {
		if pdb.Spec.Selector == nil || !SelectorMatches(pdb.Spec.Selector.MatchLabels, pod.Labels) {
			bad("PodDisruptionBudget %s: selector matches no dohfwd pod", pdb.Name)
		}
		if m := pdb.Spec.MinAvailable; m != nil && m.Type == intstr.Int && d.Spec.Replicas != nil && m.IntVal >= *d.Spec.Replicas {
			bad("PodDisruptionBudget %s: minAvailable %d blocks every eviction with %d replicas", pdb.Name, m.IntVal, *d.Spec.Replicas)
		}
	}
	if len(s.HPAs) == 0 {
		bad("no HorizontalPodAutoscaler")
	}
	for _, h := range s.HPAs {
		ref := h.Spec.ScaleTargetRef
		if ref.Kind != "Deployment" || ref.Name != d.Name || ref.APIVersion != "apps/v1" {
			bad("HorizontalPodAutoscaler %s: scales %s %s, not Deployment %s", h.Name, ref.Kind, ref.Name, d.Name)
		}
		if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 2 || *h.Spec.MinReplicas > h.Spec.MaxReplicas {
			bad("HorizontalPodAutoscaler %s: want 2 <= minReplicas <= maxReplicas", h.Name)
		}
	}
	for _, cert := range s.Certificates {
		if cert.Spec.SecretName == "" || cert.Spec.IssuerRef.Name == "" || len(cert.Spec.DNSNames)+len(cert.Spec.IPAddresses) == 0 {
			bad("Certificate %s: needs secretName, issuerRef.name and a DNS name or IP", cert.Name)
		}
	}
	return errs
}

// checkHardening wants the pod to run as a non-root user on a read-only
// root with no privilege escalation and no capabilities.
func checkHardening(d *appsv1.Deployment, c *corev1.Container) []error {
	var errs []error
	ps := d.Spec.Template.Spec.SecurityContext
	if ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.RunAsUser == nil || *ps.RunAsUser == 0 {
		errs = append(errs, fmt.Errorf("Deployment %s: pod must set runAsNonRoot and a non-zero runAsUser", d.Name))
	}
	sc := c.SecurityContext
	switch {
	case sc == nil:
		errs = append(errs, fmt.Errorf("Deployment %s: container has no securityContext", d.Name))
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem,
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation,
		sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL"):
		errs = append(errs, fmt.Errorf("Deployment %s: container must have a read-only root, no privilege escalation and drop ALL capabilities", d.Name))
	}
	return errs
}

// checkConfig holds the ConfigMap's dohfwd file against the container: the
// listeners on the container's ports, and either the certificate files from
// the cert-manager Secret (keys tls.crt and tls.key) under tlsDir, or ACME
// with the fleet's shared store (checkFleet).
func checkConfig(s *Set, d *appsv1.Deployment, c *corev1.Container, tlsDir string) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(s.ConfigMaps) != 1 || s.ConfigMaps[0].Data[ConfigKey] == "" {
		return []error{fmt.Errorf("want one ConfigMap with key %s", ConfigKey)}
	}
	cfg, err := ParseDohfwdConfig([]byte(s.ConfigMaps[0].Data[ConfigKey]))
	if err != nil {
		return []error{fmt.Errorf("ConfigMap %s: %s: %w", s.ConfigMaps[0].Name, ConfigKey, err)}
	}
	for name, addr := range map[string]string{"doh": cfg.Listen.HTTPS, "admin": cfg.Listen.Admin} {
		port, err := ListenPort(addr)
		if err != nil {
			bad("ConfigMap %s: %w", s.ConfigMaps[0].Name, err)
			continue
		}
		if cp := containerPort(c, intstr.FromString(name)); cp == nil || cp.ContainerPort != port {
			bad("ConfigMap %s: listens on %d, not on the container's %s port", s.ConfigMaps[0].Name, port, name)
		}
		if host, _, _ := net.SplitHostPort(addr); host != "0.0.0.0" && host != "" && host != "::" {
			bad("ConfigMap %s: %s listens on %q, unreachable from outside the pod", s.ConfigMaps[0].Name, name, addr)
		}
	}
	errs = append(errs, checkHTTP3(s, c, cfg)...)
	errs = append(errs, checkProxyProtocol(s, d, cfg)...)
	if cfg.TLS.Mode == "acme" {
		return append(errs, checkFleet(s, c, cfg, tlsDir)...)
	}
	if cfg.TLS.Mode != "files" {
		bad("ConfigMap %s: tls.mode %q, want files (the cert-manager Secret) or acme", s.ConfigMaps[0].Name, cfg.TLS.Mode)
	}
	for file, want := range map[string]string{cfg.TLS.CertFile: "tls.crt", cfg.TLS.KeyFile: "tls.key"} {
		if tlsDir == "" || file != path.Join(tlsDir, want) {
			bad("ConfigMap %s: tls file %q is not %s in the Secret mount %q", s.ConfigMaps[0].Name, file, want, tlsDir)
		}
	}
	return errs
}

// checkHTTP3 holds the QUIC side of the HTTPS listener (listen.http3,
// on unless false) against the container and the Services: the container
// names the HTTPS port on UDP doh-quic, and a Service that sends TCP to
// doh sends UDP on the same port to doh-quic, since the TCP answers
// advertise HTTP/3 on the port the client reached (Alt-Svc).
func checkHTTP3(s *Set, c *corev1.Container, cfg DohfwdConfig) []error {
	if cfg.Listen.HTTPS == "" || (cfg.Listen.HTTP3 != nil && !*cfg.Listen.HTTP3) {
		return nil
	}
	var errs []error
	port, err := ListenPort(cfg.Listen.HTTPS)
	if err != nil {
		return nil // reported with the listeners
	}
	if cp := containerPort(c, intstr.FromString("doh-quic")); cp == nil || cp.ContainerPort != port || cp.Protocol != corev1.ProtocolUDP {
		errs = append(errs, fmt.Errorf("listen.http3 is on: the container needs port doh-quic, %d/UDP", port))
	}
	for _, svc := range s.Services {
		for _, p := range svc.Spec.Ports {
			if p.TargetPort.String() != "doh" {
				continue
			}
			udp := false
			for _, q := range svc.Spec.Ports {
				udp = udp || (q.Port == p.Port && q.Protocol == corev1.ProtocolUDP && q.TargetPort.String() == "doh-quic")
			}
			if !udp {
				errs = append(errs, fmt.Errorf("Service %s: port %d sends TCP to doh but no UDP to doh-quic: HTTP/3 (Alt-Svc for port %d) is unreachable", svc.Name, p.Port, p.Port))
			}
		}
	}
	return errs
}

// SelectorMatches reports whether every selector label is on the pod.
func SelectorMatches(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func container(d *appsv1.Deployment, name string) *corev1.Container {
	for i := range d.Spec.Template.Spec.Containers {
		if c := &d.Spec.Template.Spec.Containers[i]; c.Name == name {
			return c
		}
	}
	return nil
}

// containerPort finds the port a probe or Service names, by name or number.
func containerPort(c *corev1.Container, p intstr.IntOrString) *corev1.ContainerPort {
	for i := range c.Ports {
		cp := &c.Ports[i]
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return cp
		}
	}
	return nil
}

// selected returns the Deployment whose pods svc selects, if any.
func selected(s *Set, svc *corev1.Service) *appsv1.Deployment {
	for _, d := range s.Deployments {
		if SelectorMatches(svc.Spec.Selector, d.Spec.Template.Labels) {
			return d
		}
	}
	return nil
}

func volume(vs []corev1.Volume, name string) *corev1.Volume {
	for i := range vs {
		if vs[i].Name == name {
			return &vs[i]
		}
	}
	return nil
}

func configMap(s *Set, name string) *corev1.ConfigMap {
	for _, cm := range s.ConfigMaps {
		if cm.Name == name {
			return cm
		}
	}
	return nil
}

func certificateFor(s *Set, secret string) *Certificate {
	for _, c := range s.Certificates {
		if c.Spec.SecretName == secret {
			return c
		}
	}
	return nil
}
