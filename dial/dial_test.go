package dial

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/paritysync/paritysync/config"
	"github.com/paritysync/paritysync/dial/redistest"
)

func TestRedisOptionsSingleNode(t *testing.T) {
	c, err := ParseRedisURL("redis://:s3cret@10.0.0.5:6380/2?dial_timeout=3s&pool_timeout=7s")
	require.NoError(t, err)
	require.Nil(t, c.Cluster)
	o := c.Node
	require.Equal(t, "10.0.0.5:6380", o.Addr)
	require.Equal(t, 2, o.DB)
	require.Equal(t, "s3cret", o.Password)
	require.Equal(t, 3*time.Second, o.DialTimeout)
	require.Equal(t, 7*time.Second, o.PoolTimeout, "every go-redis option applies")
}

func TestRedisOptionsClusterForms(t *testing.T) {
	for raw, want := range map[string][]string{
		"redis://:pw@h1:7000,h2:7001,h3:7002":            {"h1:7000", "h2:7001", "h3:7002"},
		"redis://h1:7000?cluster=true":                   {"h1:7000"},
		"redis://h1:7000?addr=h2:7001&addr=h3:7002":      {"h1:7000", "h2:7001", "h3:7002"},
		"rediss://u:pw@h1:7000,h2:7001/?read_timeout=2s": {"h1:7000", "h2:7001"},
	} {
		c, err := ParseRedisURL(raw)
		require.NoError(t, err, raw)
		require.Nil(t, c.Node, raw)
		require.ElementsMatch(t, want, c.Cluster.Addrs, raw)
	}
}

func TestRedisOptionsErrorsNameTheRuleNotThePassword(t *testing.T) {
	for raw, want := range map[string]string{
		"localhost:6379":                    "want redis://host:port",
		"http://:s3cret@h:1":                `scheme "http": want redis or rediss`,
		"redis://:s3cret@h1:7000,h2:7001/3": `database "3": a cluster has only database 0`,
		"redis://:s3cret@h1:7000,,h2:1":     "address 2 is empty",
		"redis://:s3cret@h1:7000/x":         "invalid database number",
	} {
		_, err := ParseRedisURL(raw)
		require.Error(t, err, raw)
		require.Contains(t, err.Error(), want, raw)
		require.NotContains(t, err.Error(), "s3cret", raw)
	}
}

func TestRedisUnreachableIsOneTypedError(t *testing.T) {
	_, err := Redis(context.Background(), "redis://:s3cret@127.0.0.1:1/0?dial_timeout=200ms&max_retries=-1")
	require.Error(t, err)
	require.True(t, IsUnreachable(err))
	require.Contains(t, err.Error(), "redis at redis://:xxxxx@127.0.0.1:1/0")
	require.NotContains(t, err.Error(), "s3cret")
}

func TestScanKeysOnOneNode(t *testing.T) {
	ctx := context.Background()
	rdb, err := Redis(ctx, redistest.Reachable(t))
	require.NoError(t, err)
	prefix := "paritysync-test:dial:" + t.Name() + ":"
	for i := range 5 {
		require.NoError(t, rdb.Set(ctx, prefix+string(rune('a'+i)), "1", time.Minute).Err())
	}
	t.Cleanup(func() {
		keys, _ := ScanKeys(ctx, rdb, prefix+"*")
		if len(keys) > 0 {
			rdb.Del(ctx, keys...)
		}
		_ = rdb.Close()
	})
	keys, err := ScanKeys(ctx, rdb, prefix+"*")
	require.NoError(t, err)
	require.Len(t, keys, 5)
}

func TestTemporalOptionsPlainByDefault(t *testing.T) {
	s := config.DefaultSettings()
	o, err := TemporalOptions(s, client.Options{})
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:7233", o.HostPort)
	require.Equal(t, "default", o.Namespace)
	require.Nil(t, o.ConnectionOptions.TLS)
	require.Nil(t, o.Credentials)
}

func TestTemporalOptionsTLSAndAPIKeyFromFiles(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := writeSelfSigned(t, dir)
	keyPath := filepath.Join(dir, "api-key")
	require.NoError(t, os.WriteFile(keyPath, []byte("tk-secret-value\n"), 0o600))
	s := config.DefaultSettings()
	s.TemporalAddress = "ns.acct.tmprl.cloud:7233"
	s.TemporalTLS = config.TemporalTLS{CertFile: certFile, KeyFile: keyFile, CAFile: certFile, ServerName: "ns.acct.tmprl.cloud"}
	s.TemporalAPIKeyFile = keyPath
	o, err := TemporalOptions(s, client.Options{})
	require.NoError(t, err)
	require.NotNil(t, o.ConnectionOptions.TLS)
	require.Len(t, o.ConnectionOptions.TLS.Certificates, 1)
	require.NotNil(t, o.ConnectionOptions.TLS.RootCAs)
	require.Equal(t, "ns.acct.tmprl.cloud", o.ConnectionOptions.TLS.ServerName)
	require.NotNil(t, o.Credentials)
}

func TestTemporalOptionsAPIKeyAloneTurnsTLSOn(t *testing.T) {
	keyPath := filepath.Join(t.TempDir(), "api-key")
	require.NoError(t, os.WriteFile(keyPath, []byte("tk-secret-value"), 0o600))
	s := config.DefaultSettings()
	s.TemporalAPIKeyFile = keyPath
	o, err := TemporalOptions(s, client.Options{})
	require.NoError(t, err)
	require.NotNil(t, o.ConnectionOptions.TLS)
	require.NotNil(t, o.Credentials)
}

func TestTemporalOptionsErrorsNameTheVariable(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.WriteFile(empty, []byte("\n"), 0o600))
	notPEM := filepath.Join(dir, "ca.txt")
	require.NoError(t, os.WriteFile(notPEM, []byte("tk-secret-value"), 0o600))
	for name, tc := range map[string]struct {
		set  func(*config.Settings)
		want string
	}{
		"missing cert": {func(s *config.Settings) {
			s.TemporalTLS.CertFile, s.TemporalTLS.KeyFile = dir+"/nope.pem", dir+"/nope.key"
		}, "TEMPORAL_TLS_CERT/TEMPORAL_TLS_KEY"},
		"CA not PEM":    {func(s *config.Settings) { s.TemporalTLS.CAFile = notPEM }, "TEMPORAL_TLS_CA " + notPEM + ": no PEM certificate"},
		"missing key":   {func(s *config.Settings) { s.TemporalAPIKeyFile = dir + "/nope" }, "TEMPORAL_API_KEY_FILE"},
		"empty API key": {func(s *config.Settings) { s.TemporalAPIKeyFile = empty }, "the file is empty"},
	} {
		s := config.DefaultSettings()
		tc.set(&s)
		_, err := TemporalOptions(s, client.Options{})
		require.Error(t, err, name)
		require.Contains(t, err.Error(), tc.want, name)
		require.NotContains(t, err.Error(), "tk-secret-value", name)
	}
}

func TestSettingsWantCertAndKeyTogether(t *testing.T) {
	env := map[string]string{"TEMPORAL_TLS_CERT": "/etc/c.pem"}
	_, err := config.LoadSettings(func(k string) string { return env[k] })
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), "TEMPORAL_TLS_CERT and TEMPORAL_TLS_KEY: set both or neither"), err.Error())
}

func writeSelfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "paritysync-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, "client.pem"), filepath.Join(dir, "client.key")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600))
	return certFile, keyFile
}
