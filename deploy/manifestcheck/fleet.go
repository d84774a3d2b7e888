package manifestcheck

import (
	"fmt"
	"net/url"
	"path"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// EnvRedisPassword is the variable dohfwd reads the Redis password from
// when tls.acme.redis.password_file is empty (certs.EnvRedisPassword).
const EnvRedisPassword = "DOHFWD_REDIS_PASSWORD"

// proxyProtocolAnnotations are the Service annotations with which cloud
// load balancers are asked to send a PROXY protocol header.
var proxyProtocolAnnotations = []string{
	"service.beta.kubernetes.io/aws-load-balancer-proxy-protocol",
	"service.beta.kubernetes.io/do-loadbalancer-enable-proxy-protocol",
	"service.beta.kubernetes.io/scw-loadbalancer-proxy-protocol-v2",
	"service.beta.linode.com/linode-loadbalancer-proxy-protocol",
	"load-balancer.hetzner.cloud/uses-proxyprotocol",
}

// checkProxyProtocol wants the load balancer and dohfwd to agree: a
// balancer told to send PROXY headers to a dohfwd that does not expect
// them breaks every connection, and the reverse refuses every connection.
func checkProxyProtocol(s *Set, d *appsv1.Deployment, cfg DohfwdConfig) []error {
	var errs []error
	annotated := ""
	for _, svc := range s.Services {
		if selected(s, svc) != d || svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
			continue
		}
		for _, a := range proxyProtocolAnnotations {
			if v := svc.Annotations[a]; v != "" && v != "false" {
				annotated = svc.Name
			}
		}
	}
	switch {
	case annotated != "" && len(cfg.Listen.ProxyProtocol) == 0:
		errs = append(errs, fmt.Errorf("Service %s asks its load balancer for PROXY protocol, but listen.proxy_protocol is empty: dohfwd would read every header as a broken TLS hello", annotated))
	case annotated == "" && len(cfg.Listen.ProxyProtocol) > 0:
		errs = append(errs, fmt.Errorf("listen.proxy_protocol is set, but no LoadBalancer Service asks for PROXY protocol: dohfwd would refuse every connection from the balancer"))
	}
	return errs
}

// checkFleet checks an ACME fleet: certificates in a Redis every replica
// reaches (a folder in a pod is each replica's own, so each would order its
// own certificate), its password from a Secret, port 443 reaching the DoH
// port for TLS-ALPN-01, and an in-cluster Redis that keeps its data.
func checkFleet(s *Set, c *corev1.Container, cfg DohfwdConfig, tlsDir string) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	a := cfg.TLS.ACME
	if len(a.Domains) == 0 {
		bad("tls.mode acme: tls.acme.domains is empty")
	}
	for _, cert := range s.Certificates {
		bad("Certificate %s: unused with tls.mode acme (dohfwd obtains its own)", cert.Name)
	}
	u, err := url.Parse(a.Storage)
	if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") || u.Host == "" {
		bad("tls.mode acme with %d replicas' own storage: tls.acme.storage must be a redis:// or rediss:// URL every replica shares", replicasOf(s))
		return errs
	}
	if _, has := u.User.Password(); has {
		bad("tls.acme.storage: the Redis password is in the URL; use a Secret")
	}
	switch pf := a.Redis.PasswordFile; {
	case pf != "":
		if !mountedFromSecret(s, c, pf) {
			bad("tls.acme.redis.password_file %q is not in a Secret mount of the dohfwd container", pf)
		}
	case secretEnv(c, EnvRedisPassword) == nil:
		bad("the Redis password: set %s from a Secret (secretKeyRef) or tls.acme.redis.password_file", EnvRedisPassword)
	}
	doh := containerPort(c, intstr.FromString("doh"))
	reaches443 := false
	for _, svc := range s.Services {
		for _, p := range svc.Spec.Ports {
			if p.Port == 443 && doh != nil && containerPort(c, p.TargetPort) == doh {
				reaches443 = true
			}
		}
	}
	if !reaches443 {
		bad("no Service port 443 reaches the doh port: the CA's TLS-ALPN-01 validation connects to 443")
	}

	// A Redis in this set: its Service, port, password and volume.
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "6379"
	}
	for _, svc := range s.Services {
		if svc.Name != host && !strings.HasPrefix(host, svc.Name+".") {
			continue
		}
		rd := selected(s, svc)
		if rd == nil {
			bad("Service %s (the Redis store) selects no Deployment in the set", svc.Name)
			return errs
		}
		errs = append(errs, checkRedis(s, svc, rd, port, secretEnv(c, EnvRedisPassword))...)
	}
	return errs
}

func checkRedis(s *Set, svc *corev1.Service, d *appsv1.Deployment, port string, password *corev1.EnvVar) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(d.Spec.Template.Spec.Containers) != 1 {
		bad("Deployment %s: want one Redis container", d.Name)
		return errs
	}
	rc := &d.Spec.Template.Spec.Containers[0]
	served := false
	for _, p := range svc.Spec.Ports {
		if strconv.Itoa(int(p.Port)) == port && containerPort(rc, p.TargetPort) != nil {
			served = true
		}
	}
	if !served {
		bad("Service %s: no port %s reaching a port of Deployment %s", svc.Name, port, d.Name)
	}
	if d.Spec.Replicas != nil && *d.Spec.Replicas != 1 {
		bad("Deployment %s: %d Redis replicas without replication; want 1", d.Name, *d.Spec.Replicas)
	}
	if password != nil {
		ref := password.ValueFrom.SecretKeyRef
		same := false
		for _, e := range rc.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil &&
				e.ValueFrom.SecretKeyRef.Name == ref.Name && e.ValueFrom.SecretKeyRef.Key == ref.Key &&
				strings.Contains(strings.Join(rc.Args, " "), "--requirepass $("+e.Name+")") {
				same = true
			}
		}
		if !same {
			bad("Deployment %s: Redis does not require the password dohfwd sends (--requirepass from Secret %s key %s)", d.Name, ref.Name, ref.Key)
		}
	}
	persistent := false
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		for _, pvc := range s.PVCs {
			if pvc.Name == v.PersistentVolumeClaim.ClaimName {
				persistent = true
			}
		}
	}
	if !persistent {
		bad("Deployment %s: the certificate store is on no PersistentVolumeClaim of the set: a restart would lose certificates and the ACME account", d.Name)
	}
	return errs
}

// secretEnv is the container's variable name when it comes from a Secret.
func secretEnv(c *corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		e := &c.Env[i]
		if e.Name == name && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			return e
		}
	}
	return nil
}

// mountedFromSecret reports whether file lies in a Secret volume mount.
func mountedFromSecret(s *Set, c *corev1.Container, file string) bool {
	for _, d := range s.Deployments {
		if container(d, c.Name) != c {
			continue
		}
		for _, m := range c.VolumeMounts {
			v := volume(d.Spec.Template.Spec.Volumes, m.Name)
			if v != nil && v.Secret != nil && strings.HasPrefix(path.Clean(file), path.Clean(m.MountPath)+"/") {
				return true
			}
		}
	}
	return false
}

func replicasOf(s *Set) int {
	for _, h := range s.HPAs {
		return int(h.Spec.MaxReplicas)
	}
	return 1
}

// flyProxyProtoPort reports whether a fly.toml service port sends the
// PROXY protocol header (handlers ["proxy_proto"]).
func flyProxyProtoPort(handlers []string) bool {
	for _, h := range handlers {
		if h == "proxy_proto" {
			return true
		}
	}
	return false
}
