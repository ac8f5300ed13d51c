package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// node is a JSON value that keeps the order of an object's members, so the
// generated types list fields in the order openapi.json gives them.
type node struct {
	obj  []member // an object's members, in order (nil for other kinds)
	arr  []*node
	val  any // a scalar: string, json.Number, bool or nil
	kind byte
}

type member struct {
	key string
	val *node
}

const (
	kindObject = 'o'
	kindArray  = 'a'
	kindScalar = 's'
)

func parse(b []byte) (*node, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	n, err := parseValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("trailing data after the document")
	}
	return n, nil
}

func parseValue(dec *json.Decoder) (*node, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			n := &node{kind: kindObject, obj: []member{}}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := parseValue(dec)
				if err != nil {
					return nil, err
				}
				n.obj = append(n.obj, member{key: kt.(string), val: v})
			}
			_, err := dec.Token()
			return n, err
		case '[':
			n := &node{kind: kindArray, arr: []*node{}}
			for dec.More() {
				v, err := parseValue(dec)
				if err != nil {
					return nil, err
				}
				n.arr = append(n.arr, v)
			}
			_, err := dec.Token()
			return n, err
		}
		return nil, fmt.Errorf("unexpected %v", t)
	}
	return &node{kind: kindScalar, val: tok}, nil
}

// get returns an object's member, or nil.
func (n *node) get(key string) *node {
	if n == nil || n.kind != kindObject {
		return nil
	}
	for _, m := range n.obj {
		if m.key == key {
			return m.val
		}
	}
	return nil
}

// str returns a string scalar, or "".
func (n *node) str() string {
	if n == nil {
		return ""
	}
	s, _ := n.val.(string)
	return s
}

// strs returns an array of strings (a lone string as a list of one).
func (n *node) strs() []string {
	if n == nil {
		return nil
	}
	if n.kind == kindScalar {
		if s, ok := n.val.(string); ok {
			return []string{s}
		}
		return nil
	}
	var out []string
	for _, e := range n.arr {
		out = append(out, e.str())
	}
	return out
}
