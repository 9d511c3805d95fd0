package host

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mspipe/mspipe/plugins"
)

// tryTLS connects to a plugin's socket with cfg and reads the server's
// first bytes: with TLS 1.3 a server that refuses the client certificate
// says so only after the client has finished its side of the handshake.
func tryTLS(t *testing.T, addr string, cfg *tls.Config) error {
	t.Helper()
	cfg.NextProtos = []string{"h2"} // gRPC's servers require ALPN h2
	dialer := &tls.Dialer{Config: cfg}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := dialer.DialContext(ctx, "unix", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	_, err = conn.Read(make([]byte, 64)) // a gRPC server starts with its SETTINGS frame
	return err
}

func TestPluginRequiresTheHostClientCertificate(t *testing.T) {
	c, _ := launchTest(t, context.Background(), LaunchConfig{})
	reattach := c.pc.ReattachConfig()
	if reattach == nil || reattach.Addr.Network() != "unix" {
		t.Fatalf("plugin address: %+v", reattach)
	}
	addr := reattach.Addr.String()

	if err := tryTLS(t, addr, c.tls.Clone()); err != nil {
		t.Fatalf("the host's own client configuration fails: %v", err)
	}

	noCert := c.tls.Clone()
	noCert.Certificates = nil
	err := tryTLS(t, addr, noCert)
	t.Log("without a client certificate:", err)
	if err == nil || !strings.Contains(err.Error(), "certificate required") {
		t.Errorf("without a client certificate: err = %v, want the server to require one", err)
	}

	otherHost, err := newHostTLS() // a well-formed certificate of another host
	if err != nil {
		t.Fatal(err)
	}
	other, err := otherHost.forLaunch()
	if err != nil {
		t.Fatal(err)
	}
	strange := c.tls.Clone()
	strange.Certificates = other.client.Certificates
	err = tryTLS(t, addr, strange)
	t.Log("with another host's client certificate:", err)
	if err == nil || !strings.Contains(err.Error(), "bad certificate") && !strings.Contains(err.Error(), "unknown certificate authority") {
		t.Errorf("with another client certificate: err = %v, want it refused", err)
	}

	// The client side checks the server in turn: the server certificate of
	// another launch, even of this host, is not this plugin's.
	host, err := hostCredentials()
	if err != nil {
		t.Fatal(err)
	}
	sibling, err := host.forLaunch()
	if err != nil {
		t.Fatal(err)
	}
	for what, cfg := range map[string]*tls.Config{"another host's": other.client, "another launch's": sibling.client} {
		err = tryTLS(t, addr, cfg.Clone())
		var unknown x509.UnknownAuthorityError
		if !errors.As(err, &unknown) {
			t.Errorf("against %s roots: err = %v, want an unknown authority", what, err)
		}
	}
}

func TestServerTLSConfig(t *testing.T) {
	host, err := newHostTLS()
	if err != nil {
		t.Fatal(err)
	}
	creds, err := host.forLaunch()
	if err != nil {
		t.Fatal(err)
	}
	name, value, _ := strings.Cut(creds.env, "=")
	t.Setenv(name, value)
	cfg, err := plugins.ServerTLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg == nil || cfg.ClientAuth != tls.RequireAndVerifyClientCert || cfg.ClientCAs == nil || len(cfg.Certificates) != 1 {
		t.Fatalf("config = %+v, want a certificate and required, verified client certificates", cfg)
	}
	if v, ok := os.LookupEnv(plugins.EnvTLS); ok {
		t.Errorf("%s still in the environment: %.40q", plugins.EnvTLS, v)
	}

	cfg, err = plugins.ServerTLSConfig()
	if cfg != nil || err != nil {
		t.Errorf("without %s: %v, %v, want nil, nil", plugins.EnvTLS, cfg, err)
	}
	t.Setenv(plugins.EnvTLS, value[:strings.LastIndex(value, "-----BEGIN")])
	if _, err := plugins.ServerTLSConfig(); err == nil || !strings.Contains(err.Error(), "want 3 PEM blocks") {
		t.Errorf("two blocks: err = %v", err)
	}
}

// A plugin built with an SDK that relied on go-plugin's AutoMTLS still
// works: it answers the host's PLUGIN_CLIENT_CERT with its own certificate.
func TestAutoMTLSPlugin(t *testing.T) {
	ctx := context.Background()
	c, log := launchTest(t, ctx, LaunchConfig{Env: []string{"TESTPLUGIN_AUTOMTLS=1"}})
	out, err := c.Run(ctx, plugins.RunRequest{WorkDir: t.TempDir(), With: map[string]any{"mode": "empty"}}, nil)
	if err != nil || out["count"] != int64(0) {
		t.Fatalf("Run = %v, %v\nstage log:\n%s", out, err, log)
	}
}
