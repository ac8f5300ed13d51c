package dedupe

import "time"

func msTime(ms int64) time.Time { return time.UnixMilli(ms) }
