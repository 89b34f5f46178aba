// Command probe is the container healthcheck of paritysync's images: they are
// distroless, with no shell, wget or curl, so compose's healthcheck runs this
// instead. It GETs one URL and exits 0 on a 2xx answer, 1 otherwise, with one line
// on stderr saying why.
//
//	probe http://127.0.0.1:9464/healthz
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// timeout bounds one probe; compose's own healthcheck timeout is longer.
const timeout = 3 * time.Second

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: probe URL")
		os.Exit(2)
	}
	if err := probe(context.Background(), os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		os.Exit(1)
	}
}

// probe GETs url and wants a 2xx answer within timeout.
func probe(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("url %q: %w", url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("get %s: %w", url, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("get %s: %s", url, resp.Status)
	}
	return nil
}
