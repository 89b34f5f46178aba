package dial

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/paritysync/paritysync/config"
)

// TemporalOptions completes base with the address, namespace and the connection
// security the settings ask for:
//
//   - TEMPORAL_TLS_CERT + TEMPORAL_TLS_KEY: a client certificate (mutual TLS);
//   - TEMPORAL_TLS_CA: trust this CA bundle instead of the system roots;
//   - TEMPORAL_TLS_SERVER_NAME: the name the server's certificate carries, when it
//     differs from the host in TEMPORAL_ADDRESS;
//   - TEMPORAL_API_KEY_FILE: a file holding an API key (Temporal Cloud); it is read
//     on every call, so a rotated key is picked up without a restart, and it turns
//     TLS on.
//
// Files are read here, so a missing or unreadable one is an error at start naming
// the variable; their contents never appear in an error or a log.
func TemporalOptions(s config.Settings, base client.Options) (client.Options, error) {
	o := base
	o.HostPort, o.Namespace = s.TemporalAddress, s.TemporalNamespace
	t := s.TemporalTLS
	if t.Enabled() || s.TemporalAPIKeyFile != "" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
		if t.CertFile != "" || t.KeyFile != "" {
			cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
			if err != nil {
				return o, fmt.Errorf("TEMPORAL_TLS_CERT/TEMPORAL_TLS_KEY: %w", err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		if t.CAFile != "" {
			pem, err := os.ReadFile(t.CAFile)
			if err != nil {
				return o, fmt.Errorf("TEMPORAL_TLS_CA: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return o, fmt.Errorf("TEMPORAL_TLS_CA %s: no PEM certificate in the file", t.CAFile)
			}
			cfg.RootCAs = pool
		}
		o.ConnectionOptions.TLS = cfg
	}
	if path := s.TemporalAPIKeyFile; path != "" {
		if _, err := readAPIKey(path); err != nil {
			return o, err
		}
		o.Credentials = client.NewAPIKeyDynamicCredentials(func(context.Context) (string, error) {
			return readAPIKey(path)
		})
	}
	return o, nil
}

func readAPIKey(path string) (string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("TEMPORAL_API_KEY_FILE: %w", err)
	}
	key := strings.TrimSpace(string(raw))
	if key == "" {
		return "", fmt.Errorf("TEMPORAL_API_KEY_FILE %s: the file is empty", path)
	}
	return key, nil
}

// Temporal dials the Temporal frontend with TemporalOptions, within 10 s, so an
// unreachable or misconfigured server is one error at start.
func Temporal(ctx context.Context, s config.Settings, base client.Options) (client.Client, error) {
	o, err := TemporalOptions(s, base)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := client.DialContext(ctx, o)
	if err != nil {
		return nil, &UnreachableError{What: "temporal at " + s.TemporalAddress, Err: err}
	}
	return c, nil
}
