package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/otasim/sample"
)

func (c *cli) sampleCmd() *cobra.Command {
	var n int
	var file string
	var seed uint64
	var chans string
	cmd := &cobra.Command{
		Use:   "sample [--mutations N] [--out FILE] [--seed S] [--channels a,b]",
		Short: "Write a realistic sample batch as JSON lines (with a few invalid rows on purpose)",
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			if n < 10 {
				return usageError("sample: --mutations must be at least 10")
			}
			return c.sample(n, file, seed, strings.Split(chans, ","))
		},
	}
	cmd.Flags().IntVarP(&n, "mutations", "n", 300, "how many mutations")
	cmd.Flags().StringVar(&file, "out", "", "write to this file instead of stdout")
	cmd.Flags().Uint64Var(&seed, "seed", 1, "random seed: the same seed writes the same batch")
	cmd.Flags().StringVar(&chans, "channels", strings.Join(sample.Channels, ","), "comma-separated channels to spread the sample over")
	return cmd
}

func (c *cli) sample(n int, file string, seed uint64, chans []string) error {
	ms := sample.BatchFor(n, models.DateOf(time.Now()), time.Now().Unix(), seed, chans)
	var w io.Writer = c.stdout
	if file != "" {
		f, err := os.Create(file)
		if err != nil {
			return fmt.Errorf("sample: %w", err)
		}
		defer f.Close()
		w = f
	}
	enc := json.NewEncoder(w)
	for _, m := range ms {
		if err := enc.Encode(m); err != nil {
			return fmt.Errorf("sample: %w", err)
		}
	}
	if file != "" {
		c.diag("wrote %d mutations to %s", len(ms), file)
	}
	return nil
}
