// Package e2e holds paritysync's system tests: the whole path on real parts — a
// Temporal dev server, Redis, PostgreSQL, the simulator over HTTP and the worker's
// application (worker/app) — started by one harness (e2e/stack, which the API's
// and the starter's end-to-end tests use too) that the end-to-end tests, the push
// engine's benchmarks (make bench-e2e) and the production-topology scenarios
// (build tag prod, make test-prod) share.
//
//	go test ./e2e                          # with make test's services
//	go test -tags prod -run TestProd ./e2e # make test-prod
package e2e
