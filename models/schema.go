package models

import (
	_ "embed"
	"slices"
)

//go:embed mutation.schema.json
var mutationSchema []byte

// MutationSchema is the JSON Schema (draft 2020-12) of one mutation on the wire, for
// the intake server to serve and its OpenAPI document to reference. It states every
// rule DecodeMutations and Validate check that a schema can express; the others
// (configured channels and property pattern, horizon, past dates, currency minor
// units, min_los <= max_los, unique ids) are in its descriptions. A copy: callers
// may keep or change it.
func MutationSchema() []byte { return slices.Clone(mutationSchema) }
