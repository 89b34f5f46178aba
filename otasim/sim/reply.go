package sim

import (
	"encoding/json"
	"net/http"
	"slices"

	"github.com/paritysync/paritysync/models"
)

// reply is a complete response, kept whole so an idempotent replay is verbatim.
type reply struct {
	status int
	header http.Header
	body   []byte
}

func errorReply(status int, code, msg string) reply {
	return jsonReply(status, models.ARIError{Error: code, Message: msg})
}

func jsonReply(status int, v any) reply {
	body, err := json.Marshal(v)
	if err != nil {
		// Every value passed here is a plain wire struct.
		body, status = []byte(`{"error":"server_error","message":"encode"}`), http.StatusInternalServerError
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	return reply{status: status, header: h, body: append(body, '\n')}
}

func (r reply) clone() reply {
	return reply{status: r.status, header: r.header.Clone(), body: slices.Clone(r.body)}
}

func (r reply) write(w http.ResponseWriter) {
	for k, v := range r.header {
		w.Header()[k] = v
	}
	w.WriteHeader(r.status)
	_, _ = w.Write(r.body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	jsonReply(status, v).write(w)
}
