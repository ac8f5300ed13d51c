package audit

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// PrintOptions shape the printed timeline.
type PrintOptions struct {
	// Width wraps every line at this many columns (0: no wrapping); a
	// continued line is indented under the text it continues.
	Width int
	// SameContentWindow, when positive, adds a warning for every device
	// that the same content reached under two notification ids within it
	// (see SameContent).
	SameContentWindow time.Duration
}

// Empty reports whether the audit holds nothing of the selection: no
// request, decision, attempt, outcome or receipt.
func (tl *Timeline) Empty() bool {
	return len(tl.Requests)+len(tl.Decisions)+len(tl.Attempts)+len(tl.Outcomes)+len(tl.Receipts) == 0
}

// Nothing is the sentence for an empty timeline: "herald holds nothing
// for this id", recipient or dedupe key, with what was looked in.
func (tl *Timeline) Nothing() string {
	s := tl.Selector
	var what string
	switch {
	case s.NotificationID != "":
		what = "herald holds nothing for this id (notification " + s.NotificationID + ")"
	case s.Recipient != "":
		what = fmt.Sprintf("herald holds nothing for this recipient (%s) since %s", s.Recipient, stamp(s.Since))
		if !s.Until.IsZero() {
			what += " until " + stamp(s.Until)
		}
	default:
		what = fmt.Sprintf("herald holds nothing for this dedupe key (%q)", s.DedupeKey)
		if s.Type != "" {
			what += " of type " + s.Type
		}
	}
	if s.Tenant != "" {
		what += " in tenant " + s.Tenant
	}
	return what + ": no request, decision, attempt, outcome or receipt of it is in the audit record"
}

// Print writes the timeline, one event per line, then the answer; a
// recipient's timeline is grouped by notification. Lines are not wrapped.
func (tl *Timeline) Print(w io.Writer) error {
	return tl.Fprint(w, PrintOptions{})
}

// Fprint writes the timeline as Print does, shaped by opts.
func (tl *Timeline) Fprint(w io.Writer, opts PrintOptions) error {
	var b strings.Builder
	s := tl.Selector
	switch {
	case s.NotificationID != "":
		fmt.Fprintf(&b, "Timeline of notification %s", s.NotificationID)
	case s.Recipient != "":
		fmt.Fprintf(&b, "Timeline of recipient %s since %s", s.Recipient, stamp(s.Since))
		if !s.Until.IsZero() {
			fmt.Fprintf(&b, " until %s", stamp(s.Until))
		}
	default:
		fmt.Fprintf(&b, "Timeline of dedupe key %q", s.DedupeKey)
		if s.Type != "" {
			fmt.Fprintf(&b, " (type %s)", s.Type)
		}
	}
	if s.Tenant != "" {
		fmt.Fprintf(&b, " in tenant %s", s.Tenant)
	}
	fmt.Fprintf(&b, ": %d request(s), %d decision(s), %d attempt(s), %d outcome(s), %d receipt(s)",
		len(tl.Requests), len(tl.Decisions), len(tl.Attempts), len(tl.Outcomes), len(tl.Receipts))
	head := wrap(b.String(), opts.Width, 0)
	b.Reset()
	b.WriteString(head)
	b.WriteString("\n\n")

	evs := tl.events()
	line := func(e event, indent string) {
		prefix := fmt.Sprintf("%s%s  %-8s  ", indent, stamp(e.at), e.label)
		b.WriteString(prefix)
		b.WriteString(wrap(e.text, opts.Width, len(prefix)))
		b.WriteString("\n")
	}
	if s.Recipient == "" {
		for _, e := range evs {
			line(e, "")
		}
	} else {
		// Grouped by notification, the groups in the order of their first
		// line.
		var order []string
		groups := map[string][]event{}
		for _, e := range evs {
			if _, ok := groups[e.nid]; !ok {
				order = append(order, e.nid)
			}
			groups[e.nid] = append(groups[e.nid], e)
		}
		for i, nid := range order {
			if i > 0 {
				b.WriteString("\n")
			}
			b.WriteString(wrap(tl.groupTitle(nid), opts.Width, 2))
			b.WriteString("\n")
			for _, e := range groups[nid] {
				line(e, "  ")
			}
		}
	}
	b.WriteString("\n")
	b.WriteString(wrap(tl.Verdict.Sentence(), opts.Width, 2))
	b.WriteString("\n")
	for _, r := range tl.Verdict.Reasons {
		b.WriteString("  - " + wrap(r, opts.Width, 4) + "\n")
	}
	if opts.SameContentWindow > 0 {
		for _, sc := range tl.SameContent(opts.SameContentWindow) {
			b.WriteString("WARNING: " + wrap(sc.Warning(), opts.Width, 9) + "\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// groupTitle heads a notification's lines in a recipient's timeline.
func (tl *Timeline) groupTitle(nid string) string {
	for _, r := range tl.Requests {
		if r.NotificationID == nid {
			return fmt.Sprintf("Notification %s: %s %q", nid, r.Type, r.Title)
		}
	}
	for _, d := range tl.Decisions {
		if d.NotificationID == nid {
			return fmt.Sprintf("Notification %s: %s", nid, d.Type)
		}
	}
	return "Notification " + orNone(nid)
}

// wrap breaks text at spaces so that no line, after the first's `first`
// columns already written and every later line's indent of the same
// width, runs past width (a word longer than the room keeps its own line).
// width 0 leaves text as it is.
func wrap(text string, width, first int) string {
	room := width - first
	if width <= 0 || room < 20 {
		return text
	}
	var b strings.Builder
	col := 0
	for i, word := range strings.Split(text, " ") {
		n := len([]rune(word))
		switch {
		case i == 0:
		case col+1+n > room:
			b.WriteString("\n" + strings.Repeat(" ", first))
			col = 0
		default:
			b.WriteByte(' ')
			col++
		}
		b.WriteString(word)
		col += n
	}
	return b.String()
}
