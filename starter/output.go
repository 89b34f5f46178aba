package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
)

// writeJSON prints v as indented JSON on stdout.
func (c *cli) writeJSON(v any) error {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write json: %w", err)
	}
	return nil
}

// table writes tab-separated rows aligned in columns.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header string, flags uint) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', flags)}
	fmt.Fprintln(t.tw, header)
	return t
}

func (t *table) row(format string, args ...any) { fmt.Fprintf(t.tw, format+"\n", args...) }

func (t *table) flush() error { return t.tw.Flush() }
