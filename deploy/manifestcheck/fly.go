package manifestcheck

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/BurntSushi/toml"
)

// FlyConfig is the part of fly.toml dohfwd uses; keys outside it are errors.
type FlyConfig struct {
	App           string            `toml:"app"`
	PrimaryRegion string            `toml:"primary_region"`
	KillSignal    string            `toml:"kill_signal"`
	KillTimeout   string            `toml:"kill_timeout"`
	Env           map[string]string `toml:"env"`
	Files         []struct {
		GuestPath string `toml:"guest_path"`
		LocalPath string `toml:"local_path"`
	} `toml:"files"`
	HTTPService struct {
		InternalPort       int    `toml:"internal_port"`
		ForceHTTPS         bool   `toml:"force_https"`
		AutoStopMachines   string `toml:"auto_stop_machines"`
		AutoStartMachines  bool   `toml:"auto_start_machines"`
		MinMachinesRunning int    `toml:"min_machines_running"`
		HTTPOptions        struct {
			H2Backend bool `toml:"h2_backend"`
		} `toml:"http_options"`
		Concurrency struct {
			Type      string `toml:"type"`
			SoftLimit int    `toml:"soft_limit"`
			HardLimit int    `toml:"hard_limit"`
		} `toml:"concurrency"`
	} `toml:"http_service"`
	Services []struct {
		InternalPort       int    `toml:"internal_port"`
		Protocol           string `toml:"protocol"`
		AutoStopMachines   string `toml:"auto_stop_machines"`
		AutoStartMachines  bool   `toml:"auto_start_machines"`
		MinMachinesRunning int    `toml:"min_machines_running"`
		Ports              []struct {
			Port              int      `toml:"port"`
			Handlers          []string `toml:"handlers"`
			ProxyProtoOptions struct {
				Version string `toml:"version"`
			} `toml:"proxy_proto_options"`
		} `toml:"ports"`
		Concurrency struct {
			Type      string `toml:"type"`
			SoftLimit int    `toml:"soft_limit"`
			HardLimit int    `toml:"hard_limit"`
		} `toml:"concurrency"`
	} `toml:"services"`
	Checks map[string]struct {
		Type        string `toml:"type"`
		Port        int    `toml:"port"`
		Method      string `toml:"method"`
		Path        string `toml:"path"`
		Interval    string `toml:"interval"`
		Timeout     string `toml:"timeout"`
		GracePeriod string `toml:"grace_period"`
	} `toml:"checks"`
	VM []struct {
		Size   string `toml:"size"`
		Memory string `toml:"memory"`
	} `toml:"vm"`
}

// checkFlyServices holds TCP services against dohfwd's file: a port whose
// handlers include proxy_proto passes TLS through to listen.https, with
// listen.proxy_protocol set and an ACME certificate in a shared Redis (a
// machine's own folder would make every machine order its own).
func checkFlyServices(f *FlyConfig, cfg *DohfwdConfig, bad func(string, ...any)) []error {
	proxied := false
	for i, svc := range f.Services {
		for _, p := range svc.Ports {
			if !flyProxyProtoPort(p.Handlers) {
				continue
			}
			proxied = true
			for _, h := range p.Handlers {
				if h == "tls" || h == "http" {
					bad("services[%d] port %d: handler %q with proxy_proto: dohfwd expects TLS passed through", i, p.Port, h)
				}
			}
			if v := p.ProxyProtoOptions.Version; v != "" && v != "v1" && v != "v2" {
				bad("services[%d] port %d: proxy_proto_options.version %q, want v1 or v2", i, p.Port, v)
			}
			if hp, err := ListenPort(cfg.Listen.HTTPS); err != nil || int(hp) != svc.InternalPort {
				bad("services[%d]: internal_port %d is not listen.https (%q)", i, svc.InternalPort, cfg.Listen.HTTPS)
			}
		}
	}
	switch {
	case proxied && len(cfg.Listen.ProxyProtocol) == 0:
		bad("a proxy_proto service, but listen.proxy_protocol is empty: dohfwd would read every header as a broken TLS hello")
	case !proxied && len(cfg.Listen.ProxyProtocol) > 0:
		bad("listen.proxy_protocol is set, but no service port has the proxy_proto handler: every connection would be refused")
	}
	if proxied {
		a := cfg.TLS.ACME
		u, err := url.Parse(a.Storage)
		switch {
		case cfg.TLS.Mode != "acme":
			bad("TLS passes through to dohfwd, so tls.mode must be acme (it is %q)", cfg.TLS.Mode)
		case err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") || u.Host == "":
			bad("tls.acme.storage must be a redis:// or rediss:// URL the machines share, not each machine's own folder")
		default:
			if _, has := u.User.Password(); has {
				bad("tls.acme.storage holds the Redis password; use the secret %s", EnvRedisPassword)
			}
		}
	}
	return nil
}

// CheckFly decodes fly.toml strictly and holds it against the dohfwd file
// it ships: the proxy's h2c goes to listen.http, the health check to the
// admin port, and Fly waits out the drain. Local paths are relative to
// repoRoot, where `fly deploy` runs.
func CheckFly(flyToml, repoRoot string) []error {
	var f FlyConfig
	md, err := toml.DecodeFile(flyToml, &f)
	if err != nil {
		return []error{fmt.Errorf("%s: %w", flyToml, err)}
	}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(flyToml+": "+format, args...)) }
	for _, k := range md.Undecoded() {
		bad("unknown key %s", k)
	}
	if t, err := time.ParseDuration(f.KillTimeout); err != nil || t <= drainSeconds*time.Second || f.KillSignal != "SIGTERM" {
		bad("kill_signal SIGTERM and a kill_timeout over %d s are needed for the drain", drainSeconds)
	}
	var cfg *DohfwdConfig
	for _, file := range f.Files {
		if file.GuestPath != "/etc/dohfwd/dohfwd.yaml" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(repoRoot, file.LocalPath))
		if err != nil {
			bad("files: %v", err)
			continue
		}
		c, err := ParseDohfwdConfig(data)
		if err != nil {
			bad("%s: %v", file.LocalPath, err)
			continue
		}
		cfg = &c
	}
	if cfg == nil {
		bad("no [[files]] entry puts a configuration at /etc/dohfwd/dohfwd.yaml")
		return errs
	}
	if f.HTTPService.InternalPort == 0 && len(f.Services) == 0 {
		bad("neither [http_service] nor [[services]]: nothing reaches dohfwd")
	}
	if f.HTTPService.InternalPort != 0 {
		if p, err := ListenPort(cfg.Listen.HTTP); err != nil || int(p) != f.HTTPService.InternalPort || !f.HTTPService.HTTPOptions.H2Backend {
			bad("http_service must send h2c to listen.http (%q), internal_port is %d", cfg.Listen.HTTP, f.HTTPService.InternalPort)
		}
	}
	errs = append(errs, checkFlyServices(&f, cfg, bad)...)
	admin, err := ListenPort(cfg.Listen.Admin)
	healthy := false
	for _, c := range f.Checks {
		healthy = healthy || (err == nil && c.Type == "http" && c.Port == int(admin) && c.Path == "/healthz")
	}
	if !healthy {
		bad("no http check of /healthz on the admin port (%q)", cfg.Listen.Admin)
	}
	return errs
}
