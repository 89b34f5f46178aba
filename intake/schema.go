package main

// mutationSchema is the JSON Schema of a mutation the API serves and its OpenAPI
// document refers to.
//
// TODO(parse): models/mutation.schema.json replaces this provisional copy once the
// parse branch lands; the switch is this one line.
var mutationSchema = []byte(provisionalMutationSchema)

const provisionalMutationSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "$id": "https://paritysync.dev/schemas/mutation.json",
  "title": "Mutation",
  "type": "object",
  "additionalProperties": false,
  "required": ["id", "property_id", "room_type_code", "rate_plan_code", "channel", "stay_date", "version"],
  "properties": {
    "id": {"type": "string", "minLength": 1},
    "property_id": {"type": "string"},
    "room_type_code": {"type": "string"},
    "rate_plan_code": {"type": "string"},
    "channel": {"type": "string"},
    "stay_date": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"},
    "amount": {"type": "string", "pattern": "^[0-9]+(\\.[0-9]+)?$"},
    "currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
    "inventory": {"type": "integer", "minimum": 0, "maximum": 999},
    "stop_sell": {"type": "boolean"},
    "min_los": {"type": "integer"},
    "max_los": {"type": "integer"},
    "cta": {"type": "boolean"},
    "ctd": {"type": "boolean"},
    "version": {"type": "integer", "minimum": 1},
    "priority": {"type": "integer", "minimum": 1, "maximum": 5},
    "full_sync": {"type": "boolean"},
    "correlation_id": {"type": "string"}
  }
}`
