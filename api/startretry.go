package api

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// startListPatience is how long Start lists end offsets again while the
// listing fails for another reason than a missing topic.
const startListPatience = 2 * time.Minute

// listEndOffsets lists the topics' end offsets for Start, again with a
// backoff up to 5 s while the listing fails, for up to startListPatience:
// a broker being bounced or a leader election fails it for a while, and
// herald api used to exit at start then, though the cluster served (found
// by the nemesis suite, scripts/chaos). A missing topic fails at once.
func (s *Server) listEndOffsets(ctx context.Context, adm *kadm.Client, topics ...string) (kadm.ListedOffsets, error) {
	deadline := time.Now().Add(startListPatience)
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		ends, err := adm.ListEndOffsets(ctx, topics...)
		if err == nil {
			err = ends.Error()
		}
		if err == nil || errors.Is(err, kerr.UnknownTopicOrPartition) || ctx.Err() != nil || time.Now().Add(wait).After(deadline) {
			return ends, err
		}
		s.log.Warn("cannot list end offsets at start; trying again", "topics", topics, "err", err, "backoff", wait)
		select {
		case <-ctx.Done():
			return ends, ctx.Err()
		case <-time.After(wait):
		}
	}
}
