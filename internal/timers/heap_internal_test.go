package timers

import "testing"

func TestTimersOrderByDueTimeThenByKey(t *testing.T) {
	h := timerHeap{{Key: "b", At: 1}, {Key: "a", At: 1}, {Key: "a", At: 2}, {Key: "b", At: 1}}
	tests := []struct {
		name string
		i, j int
		want bool
	}{
		{"an earlier due time comes first whatever the key", 0, 2, true},
		{"a later due time comes after whatever the key", 2, 0, false},
		{"at one due time the smaller key comes first", 1, 0, true},
		{"at one due time the larger key comes after", 0, 1, false},
		{"a timer does not come before an equal one", 0, 3, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := h.Less(tt.i, tt.j); got != tt.want {
				t.Fatalf("Less(%+v, %+v) = %v, want %v", h[tt.i], h[tt.j], got, tt.want)
			}
		})
	}
}
