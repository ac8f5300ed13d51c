package api

import "net/http"

// getVAPIDPublicKey serves the Web Push application server key browsers
// subscribe with (PushManager.subscribe's applicationServerKey): public,
// no API key needed. 404 when this API has no Web Push configured.
func (s *Server) getVAPIDPublicKey(w http.ResponseWriter, _ *http.Request, _ principal) {
	if s.cfg.VAPIDPublicKey == "" {
		writeProblem(w, notFound("web push is not configured: a VAPID public key"))
		return
	}
	w.Header().Set("Cache-Control", "public, max-age=300")
	writeJSON(w, http.StatusOK, map[string]string{"publicKey": s.cfg.VAPIDPublicKey})
}
