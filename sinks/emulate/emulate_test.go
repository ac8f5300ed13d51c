package emulate

import (
	"encoding/json"
	"net/http/httptest"
	"testing"
)

type item struct {
	ID     string `json:"id"`
	Answer string `json:"answer"`
}

func TestTheRecordIsListedAsTotalThenTheKeptItems(t *testing.T) {
	cases := []struct {
		name  string
		max   int
		add   []item
		field string
		want  string
	}{
		{"an empty record lists no items", 0, nil, "messages", `{"total":0,"messages":null}` + "\n"},
		{"every item is listed in the order read", 0, []item{{"a", "200"}, {"b", "reset"}}, "pushes",
			`{"total":2,"pushes":[{"id":"a","answer":"200"},{"id":"b","answer":"reset"}]}` + "\n"},
		{"a bounded record counts every item and lists the last ones", 1, []item{{"a", "200"}, {"b", "<slow>"}}, "pushes",
			`{"total":2,"pushes":[{"id":"b","answer":"\u003cslow\u003e"}]}` + "\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := NewLog[item](c.max)
			for _, it := range c.add {
				l.Add(it)
			}
			w := httptest.NewRecorder()
			l.Handler(c.field)(w, httptest.NewRequest("GET", "/emulator/"+c.field, nil))
			if got := w.Body.String(); got != c.want {
				t.Fatalf("body %s, want %s", got, c.want)
			}
			if ct := w.Header().Get("Content-Type"); ct != "application/json" {
				t.Fatalf("content type %q", ct)
			}
			var v map[string]json.RawMessage
			if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil || len(v) != 2 {
				t.Fatalf("not an object of two members: %v %v", v, err)
			}
		})
	}
}
