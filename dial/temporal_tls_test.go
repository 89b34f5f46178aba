package dial

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/paritysync/paritysync/config"
)

// frontend is the one RPC a Temporal client makes when it dials.
type frontend struct {
	workflowservice.UnimplementedWorkflowServiceServer
	mu   sync.Mutex
	auth []string
}

func (f *frontend) GetSystemInfo(ctx context.Context, _ *workflowservice.GetSystemInfoRequest) (*workflowservice.GetSystemInfoResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	f.mu.Lock()
	f.auth = append(f.auth, md.Get("authorization")...)
	f.mu.Unlock()
	return &workflowservice.GetSystemInfoResponse{ServerVersion: "test"}, nil
}

// testPKI is a CA with a server certificate for localhost and a client certificate.
type testPKI struct {
	caFile, certFile, keyFile string
	server                    tls.Certificate
	pool                      *x509.CertPool
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "paritysync test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	leaf := func(n int64, cn string, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(n), Subject: pkix.Name{CommonName: cn},
			DNSNames: []string{cn}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		require.NoError(t, err)
		return der, key
	}
	write := func(name string, block *pem.Block) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, pem.EncodeToMemory(block), 0o600))
		return p
	}
	keyBlock := func(k *ecdsa.PrivateKey) *pem.Block {
		der, err := x509.MarshalECPrivateKey(k)
		require.NoError(t, err)
		return &pem.Block{Type: "EC PRIVATE KEY", Bytes: der}
	}
	var p testPKI
	p.caFile = write("ca.pem", &pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	srvDER, srvKey := leaf(2, "temporal.test", x509.ExtKeyUsageServerAuth)
	p.server, err = tls.X509KeyPair(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER}), pem.EncodeToMemory(keyBlock(srvKey)))
	require.NoError(t, err)
	cliDER, cliKey := leaf(3, "paritysync-worker", x509.ExtKeyUsageClientAuth)
	p.certFile = write("client.pem", &pem.Block{Type: "CERTIFICATE", Bytes: cliDER})
	p.keyFile = write("client.key", keyBlock(cliKey))
	p.pool = x509.NewCertPool()
	p.pool.AddCert(ca)
	return p
}

// startFrontend serves GetSystemInfo over TLS that requires a client certificate
// signed by the test CA.
func startFrontend(t *testing.T, p testPKI) (string, *frontend) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f := &frontend{}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{p.server}, ClientCAs: p.pool, ClientAuth: tls.RequireAndVerifyClientCert,
		MinVersion: tls.VersionTLS12,
	})))
	workflowservice.RegisterWorkflowServiceServer(srv, f)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return ln.Addr().String(), f
}

func TestTemporalDialsOverMutualTLSWithAnAPIKey(t *testing.T) {
	p := newTestPKI(t)
	addr, f := startFrontend(t, p)
	keyFile := filepath.Join(t.TempDir(), "api-key")
	require.NoError(t, os.WriteFile(keyFile, []byte("tk-first\n"), 0o600))

	s := config.DefaultSettings()
	s.TemporalAddress = addr
	s.TemporalTLS = config.TemporalTLS{CertFile: p.certFile, KeyFile: p.keyFile, CAFile: p.caFile, ServerName: "temporal.test"}
	s.TemporalAPIKeyFile = keyFile
	c, err := Temporal(context.Background(), s, client.Options{})
	require.NoError(t, err, "dial over mutual TLS")
	c.Close()

	// A rotated key is used by the next connection without a restart of the process.
	require.NoError(t, os.WriteFile(keyFile, []byte("tk-second\n"), 0o600))
	c, err = Temporal(context.Background(), s, client.Options{})
	require.NoError(t, err)
	c.Close()
	f.mu.Lock()
	require.Contains(t, f.auth, "Bearer tk-first")
	require.Contains(t, f.auth, "Bearer tk-second")
	f.mu.Unlock()

	// Without the client certificate the server refuses the handshake; without the
	// CA the client refuses the server: both are one error naming the address.
	noCert := s
	noCert.TemporalTLS.CertFile, noCert.TemporalTLS.KeyFile = "", ""
	noCA := s
	noCA.TemporalTLS.CAFile = ""
	for name, bad := range map[string]config.Settings{"no client certificate": noCert, "no CA": noCA} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := Temporal(ctx, bad, client.Options{})
		cancel()
		require.Error(t, err, name)
		require.True(t, IsUnreachable(err), name)
		require.Contains(t, err.Error(), "temporal at "+addr, name)
		require.NotContains(t, err.Error(), "tk-", name)
	}
}
