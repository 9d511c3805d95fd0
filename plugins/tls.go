package plugins

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
)

// EnvTLS is the environment variable that carries a plugin's TLS
// credentials from the host: PEM blocks of the server certificate, the
// server's private key and the host's client certificate, in this order.
// The host makes the server's at each launch and its client's once per
// process (see plugins/host), so only the host and the plugin it started
// take part in a connection.
const EnvTLS = "MSPIPE_PLUGIN_TLS"

// ServerTLSConfig returns the TLS configuration of a plugin's gRPC server,
// built from the credentials the host put in EnvTLS: the plugin presents
// the host's server certificate and accepts only clients with the host's
// client certificate. It removes EnvTLS from the environment, so that
// commands a stage runs do not inherit the key. Without EnvTLS it returns
// nil, and go-plugin falls back to what the host asked for otherwise
// (AutoMTLS for an older host). It is the TLSProvider of plugins/sdk's
// Serve.
func ServerTLSConfig() (*tls.Config, error) {
	creds, ok := os.LookupEnv(EnvTLS)
	if !ok {
		return nil, nil
	}
	if err := os.Unsetenv(EnvTLS); err != nil {
		return nil, fmt.Errorf("%s: %w", EnvTLS, err)
	}
	var blocks [][]byte
	rest := []byte(creds)
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		blocks = append(blocks, pem.EncodeToMemory(b))
	}
	if len(blocks) != 3 {
		return nil, fmt.Errorf("%s: want 3 PEM blocks (server certificate, server key, client certificate), got %d", EnvTLS, len(blocks))
	}
	cert, err := tls.X509KeyPair(blocks[0], blocks[1])
	if err != nil {
		return nil, fmt.Errorf("%s: server certificate: %w", EnvTLS, err)
	}
	clients := x509.NewCertPool()
	if !clients.AppendCertsFromPEM(blocks[2]) {
		return nil, fmt.Errorf("%s: unreadable client certificate", EnvTLS)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    clients,
		MinVersion:   tls.VersionTLS13,
	}, nil
}
