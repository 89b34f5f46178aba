package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/paritysync/paritysync/models"
)

func sample(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("sample", flag.ContinueOnError)
	n := fs.Int("mutations", 300, "how many mutations")
	file := fs.String("out", "", "write here instead of stdout")
	seed := fs.Uint64("seed", 1, "random seed")
	chans := fs.String("channels", strings.Join(models.SampleChannels, ","), "comma-separated channels to spread the sample over")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *n < 10 {
		return usageError{"sample: --mutations must be at least 10"}
	}
	ms := models.SampleBatchFor(*n, models.DateOf(time.Now()), time.Now().Unix(), *seed, strings.Split(*chans, ","))
	w := out
	if *file != "" {
		f, err := os.Create(*file)
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
	return nil
}
