package certs

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// replicaEnv carries a replicaSpec to a child process of the test binary,
// which then runs as a second dohfwd replica (see TestMain).
const replicaEnv = "DOHFWD_CERTS_TEST_REPLICA"

type replicaSpec struct {
	Config ACMEConfig
	// Renewal tuning (see tuning); zero = production values.
	RenewCheck   time.Duration
	RenewalRatio float64
	DisableARI   bool
	// Listen is the HTTPS address; "" = a free port.
	Listen string
}

func TestMain(m *testing.M) {
	if spec := os.Getenv(replicaEnv); spec != "" {
		os.Exit(runReplica(spec))
	}
	code := m.Run()
	removeBuilt()
	os.Exit(code)
}

// runReplica is a second process: a Manager in acme mode serving HTTPS on a
// port of its own. It prints "READY addr fingerprint" once it has a
// certificate and exits when its stdin closes.
func runReplica(specJSON string) int {
	var spec replicaSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "replica spec:", err)
		return 2
	}
	listen := spec.Listen
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	spec.Config.TLSALPNListen = ln.Addr().String()
	cfg := Config{Mode: ModeACME, ACME: spec.Config}
	cfg.tuning.renewCheckInterval, cfg.tuning.renewalWindowRatio = spec.RenewCheck, spec.RenewalRatio
	cfg.tuning.disableARI = spec.DisableARI
	log := zerolog.New(os.Stderr).With().Str("replica", "child").Logger()
	m, err := New(context.Background(), cfg, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer m.Close()
	srv := newTestHTTPSServer(m)
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), obtainTimeout)
	defer cancel()
	if err := m.WaitReady(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("READY %s %s\n", ln.Addr(), m.Fingerprint())
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// startReplica runs a second replica process sharing cfg's storage.
func startReplica(t *testing.T, cfg ACMEConfig) (ready <-chan [2]string) {
	t.Helper()
	return startReplicaSpec(t, replicaSpec{Config: cfg}, nil)
}

// startReplicaSpec runs a replica process; its log goes to logs when set.
func startReplicaSpec(t *testing.T, rs replicaSpec, logs *logBuffer) (ready <-chan [2]string) {
	t.Helper()
	spec, _ := json.Marshal(rs)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), replicaEnv+"="+string(spec))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := logs
	if stderr == nil {
		stderr = &logBuffer{}
	}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("replica process log:\n%s", stderr)
		}
	})
	out := make(chan [2]string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "READY" {
				out <- [2]string{f[1], f[2]}
				return
			}
		}
		close(out)
	}()
	return out
}

func TestACMESharedStorageReplicasObtainOneCertificate(t *testing.T) {
	t.Parallel()
	ln, tlsPort := listenLoopback(t)
	ca := startPebble(t, tlsPort)
	const domain = "shared.doh.test"
	storage := t.TempDir()

	// Replica 2 is another process; replica 1 (here) owns the port Pebble
	// validates TLS-ALPN-01 on, so whichever replica wins the storage lock,
	// the challenge is answered through the shared storage.
	cfg := ca.acmeConfig(t, domain, storage)
	ready2 := startReplica(t, cfg.ACME)

	log, _ := testLogger(t)
	cfg.ACME.TLSALPNListen = ln.Addr().String()
	m, addr1 := startManager(t, cfg, log, ln)

	var second [2]string
	select {
	case r, ok := <-ready2:
		if !ok {
			t.Fatal("replica process ended without a certificate")
		}
		second = r
	case <-time.After(obtainTimeout):
		t.Fatal("replica process did not get a certificate in time")
	}

	roots, _ := ca.issuingRoots(t)
	_, leaf1 := dohGet(t, addr1, domain, "www.example.", roots)
	_, leaf2 := dohGet(t, second[0], domain, "www.example.", roots)
	if fingerprint(leaf1.Raw) != fingerprint(leaf2.Raw) {
		t.Errorf("replicas serve different certificates: %s and %s", fingerprint(leaf1.Raw), fingerprint(leaf2.Raw))
	}
	if second[1] != m.Fingerprint() {
		t.Errorf("replica fingerprints differ: %s and %s", m.Fingerprint(), second[1])
	}
	if n := ca.orders.Load(); n != 1 {
		t.Errorf("Pebble saw %d orders from two replicas sharing storage, want 1", n)
	}
}
