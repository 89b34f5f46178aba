// Package opentraveltest validates OpenTravel documents against OpenTravel's
// published schemas (channels/testdata/opentravel, see its README) with xmllint
// (Debian's libxml2-utils, which make test installs), for the tests of every
// package that sees OpenTravel bodies: the client's, and end-to-end runs that
// capture a live run's requests and the simulator's answers.
package opentraveltest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
)

// Releases are the schema releases in testdata: the 2017B the simulator answers in,
// and 2003B, which the request bodies also follow.
var Releases = []string{"ota2017b", "ota2003b"}

// schemaDir is channels/testdata/opentravel, found from this file, so that a test
// of any package reaches it whatever its working directory.
func schemaDir(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("opentraveltest: cannot locate the schemas")
	}
	return filepath.Join(filepath.Dir(file), "..", "testdata", "opentravel")
}

// Validate validates docs (by name) against one schema of a release (such as
// "ota2017b", "OTA_HotelRateAmountNotifRQ") and fails the test for each document
// that does not validate, with xmllint's words and the document. An empty docs
// fails too: a check of nothing is no check.
func Validate(t testing.TB, release, schema string, docs map[string][]byte) {
	t.Helper()
	bin, err := exec.LookPath("xmllint")
	if err != nil {
		t.Fatalf("xmllint not found (%v): install Debian's libxml2-utils (make test installs it)", err)
	}
	if len(docs) == 0 {
		t.Fatalf("%s/%s: nothing to validate", release, schema)
	}
	dir := t.TempDir()
	names := make([]string, 0, len(docs))
	for name, doc := range docs {
		path := filepath.Join(dir, name+".xml")
		if err := os.WriteFile(path, doc, 0o644); err != nil {
			t.Fatal(err)
		}
		names = append(names, path)
	}
	sort.Strings(names)
	xsd, err := filepath.Abs(filepath.Join(schemaDir(t), release, schema+".xsd"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, append([]string{"--noout", "--nonet", "--schema", xsd}, names...)...).CombinedOutput()
	if err != nil {
		var failures []string
		for _, line := range strings.Split(string(out), "\n") {
			if !strings.HasSuffix(line, " validates") && line != "" {
				failures = append(failures, line)
			}
		}
		t.Errorf("%s %s: %d documents, xmllint: %v\n%s", release, schema, len(docs), err, strings.Join(failures, "\n"))
		for name, doc := range docs {
			if bytes.Contains(out, []byte(name+".xml fails")) {
				t.Logf("%s: %s", name, doc)
			}
		}
	}
}
