package dedupe

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/stage"
)

func outRecords(o *stage.Out) []*kgo.Record { return o.Records() }
