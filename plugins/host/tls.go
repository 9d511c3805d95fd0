package host

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"sync"
	"time"

	"github.com/mspipe/mspipe/plugins"
)

// The host and a plugin talk gRPC over mutually authenticated TLS on a unix
// socket. go-plugin's AutoMTLS would set this up, but it makes a P-521 key
// and certificate on both sides at every launch, about 8 ms of CPU each.
// Instead the host makes a P-256 key pair with a self-signed certificate
// for itself as the client once per process, and one for each plugin's
// server at its launch (a P-256 key is cheap), and hands each plugin its
// server key and certificate and the client's certificate through the
// environment variable [plugins.EnvTLS]. Only the host and the plugin it
// started can then take part in a connection; one plugin cannot pose as
// another.
//
// Trust model: a process's environment is readable only by its user (and
// root), the same trust go-plugin's AutoMTLS places in PLUGIN_CLIENT_CERT
// and in the handshake line a plugin prints. A process of the same user
// could as well read the host's memory. The SDK removes the variable from
// the plugin's environment once read ([plugins.ServerTLSConfig]), so that
// commands a stage runs do not inherit the key.

// tlsServerName is the name in the server certificate. It is the name
// go-plugin's AutoMTLS uses, so that a plugin built with an SDK that still
// relied on AutoMTLS is verified by the same configuration.
const tlsServerName = "localhost"

// certLifetime bounds the certificates, which live only as long as the host
// process; a run may take weeks.
const certLifetime = 10 * 365 * 24 * time.Hour

// hostTLS is the host's client credentials, for all its plugins.
type hostTLS struct {
	client        tls.Certificate
	clientCertPEM []byte
}

// hostCredentials makes the host's client credentials on first use, once
// per process.
var hostCredentials = sync.OnceValues(newHostTLS)

func newHostTLS() (*hostTLS, error) {
	clientCert, clientKey, err := selfSignedCert(x509.ExtKeyUsageClientAuth)
	if err != nil {
		return nil, fmt.Errorf("plugin client certificate: %w", err)
	}
	client, err := tls.X509KeyPair(clientCert, clientKey)
	if err != nil {
		return nil, fmt.Errorf("plugin client certificate: %w", err)
	}
	return &hostTLS{client: client, clientCertPEM: clientCert}, nil
}

// launchTLS is the TLS material of one plugin launch.
type launchTLS struct {
	client *tls.Config // the host's side: its certificate, and the plugin's as the only root
	env    string      // MSPIPE_PLUGIN_TLS=... for the plugin's environment
}

// forLaunch makes a server key and certificate for one plugin.
func (h *hostTLS) forLaunch() (*launchTLS, error) {
	serverCert, serverKey, err := selfSignedCert(x509.ExtKeyUsageServerAuth)
	if err != nil {
		return nil, fmt.Errorf("plugin server certificate: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(serverCert) {
		return nil, errors.New("plugin server certificate: unreadable")
	}
	var env bytes.Buffer
	env.WriteString(plugins.EnvTLS + "=")
	env.Write(serverCert)
	env.Write(serverKey)
	env.Write(h.clientCertPEM)
	return &launchTLS{
		client: &tls.Config{
			Certificates: []tls.Certificate{h.client},
			RootCAs:      roots,
			ServerName:   tlsServerName,
			MinVersion:   tls.VersionTLS13,
		},
		env: env.String(),
	}, nil
}

// selfSignedCert returns a new P-256 key and a self-signed certificate for
// tlsServerName, both PEM encoded.
func selfSignedCert(usage x509.ExtKeyUsage) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "mspipe plugin " + tlsServerName},
		DNSNames:              []string{tlsServerName},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(certLifetime),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{usage},
		BasicConstraintsValid: true,
		IsCA:                  true, // its own root: each side trusts exactly this certificate
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}
