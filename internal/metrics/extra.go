package metrics

import "net/http"

// WithHandlers serves extra paths beside a NewHandler handler, for
// endpoints owned by other packages (the debug state of `svcproxy
// explain`) that metrics should not import. An extra path shadows the base
// handler's; paths follow http.ServeMux patterns.
func WithHandlers(base http.Handler, extra map[string]http.Handler) http.Handler {
	if len(extra) == 0 {
		return base
	}
	mux := http.NewServeMux()
	mux.Handle("/", base)
	for path, h := range extra {
		mux.Handle(path, h)
	}
	return mux
}
