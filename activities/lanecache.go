package activities

import (
	"strconv"
	"sync"
	"time"

	"github.com/paritysync/paritysync/models"
)

// maxRemembered bounds each of the worker's memories of lanes; a worker has a few
// hundred lanes in flight at most, and a forgotten entry only costs a read or a
// decision.
const maxRemembered = 4096

// requestCache keeps stored requests a push read ahead for the lane's next push. A
// chunk's requests do not change while its lanes run (a retried PrepareBatch
// rewrites them before any lane starts), and an entry is taken by its push, so a
// retry reads the store again.
type requestCache struct {
	mu   sync.Mutex
	reqs map[string]models.ChannelRequest
}

func (c *requestCache) put(chunkKey string, i int, r models.ChannelRequest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reqs == nil || len(c.reqs) >= maxRemembered {
		c.reqs = map[string]models.ChannelRequest{}
	}
	c.reqs[cacheKey(chunkKey, i)] = r
}

func (c *requestCache) peek(chunkKey string, i int) (models.ChannelRequest, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.reqs[cacheKey(chunkKey, i)]
	return r, ok
}

func (c *requestCache) take(chunkKey string, i int) (models.ChannelRequest, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := cacheKey(chunkKey, i)
	r, ok := c.reqs[k]
	delete(c.reqs, k)
	return r, ok
}

func cacheKey(chunkKey string, i int) string { return chunkKey + "#" + strconv.Itoa(i) }

// heldSlots keeps, per reservation, when the slot this worker held for it is due
// by the local clock (measured after the answer came, so never early).
type heldSlots struct {
	mu  sync.Mutex
	due map[string]time.Time
}

func (h *heldSlots) put(id string, due time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.due == nil || len(h.due) >= maxRemembered {
		h.due = map[string]time.Time{}
	}
	h.due[id] = due
}

func (h *heldSlots) take(id string) (time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	due, ok := h.due[id]
	delete(h.due, id)
	return due, ok
}
