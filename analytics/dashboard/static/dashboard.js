// herald's dashboard: reads the /v1/dashboard endpoints with the API key
// the user gives (kept in this tab's sessionStorage, sent as a Bearer
// token, never put in a URL) and draws them with Chart.js. Every answer is
// the key's tenant's only: the server narrows each query to it.
//
// document.body.dataset.state is "loaded" once every chart and table shows
// the last answers, "problem" when a request failed (the #problem banner
// says why), "needs-key" without a key; #timeline's data-state likewise.
"use strict";

(function () {
  const keyName = "herald.dashboard.apiKey";
  const colors = ["#2f6fdf", "#e8710a", "#1a7f37", "#b42318", "#8250df", "#0e8a9c", "#9a6700", "#c2185b", "#5c6577"];
  const resultColors = { sent: "#1a7f37", delivered: "#1a7f37", retryable: "#e8710a", ambiguous: "#9a6700", permanent: "#b42318",
    dead_lettered: "#b42318", device_retired: "#5c6577" };
  const charts = {};

  const $ = (id) => document.getElementById(id);

  // apiKey is the key the user gave in this tab, else the development key
  // the page was served with (herald dev only: data-dev-key).
  function apiKey() {
    return sessionStorage.getItem(keyName) || $("api-key").dataset.devKey || "";
  }

  function showProblem(text) {
    const p = $("problem");
    p.textContent = text;
    p.hidden = !text;
  }

  // get fetches one endpoint; it throws an Error whose message is the
  // problem's title and detail.
  async function get(path) {
    const resp = await fetch(path, { headers: { Authorization: "Bearer " + apiKey(), Accept: "application/json" } });
    const type = resp.headers.get("Content-Type") || "";
    const body = type.includes("json") ? await resp.json() : null;
    if (!resp.ok) {
      const err = new Error(body && body.title ? body.title + ": " + (body.detail || "") : "HTTP " + resp.status);
      err.status = resp.status;
      throw err;
    }
    return body;
  }

  function windowQuery() {
    const hours = Number($("window").value);
    const until = new Date();
    const since = new Date(until.getTime() - hours * 3600 * 1000);
    return "since=" + encodeURIComponent(since.toISOString().replace(/\.\d+Z$/, "Z")) +
      "&until=" + encodeURIComponent(until.toISOString().replace(/\.\d+Z$/, "Z"));
  }

  function hourLabel(iso) {
    // "2026-12-01T13:00:00Z" -> "12-01 13:00" (UTC)
    return iso.slice(5, 10) + " " + iso.slice(11, 16);
  }

  // draw replaces the chart on canvas id; an empty chart is hidden and its
  // note shown.
  function draw(id, config, empty) {
    if (charts[id]) {
      charts[id].destroy();
      delete charts[id];
    }
    const canvas = $(id);
    canvas.parentElement.hidden = empty;
    document.querySelector('.empty[data-for="' + id + '"]').hidden = !empty;
    if (empty) {
      return;
    }
    config.options = Object.assign({ animation: false, responsive: true, maintainAspectRatio: false }, config.options || {});
    charts[id] = new Chart(canvas, config);
  }

  function drawHitRate(answer) {
    // Every hour of the window, so the axis is time; one bar per type and
    // hour with decisions, none in an hour without them. Bars, not lines:
    // a type seen in one hour of the window is one bar a reader sees, not
    // a dot at the edge of an empty chart.
    const hours = [];
    if (answer.series.length > 0) {
      for (let t = Date.parse(answer.since); t < Date.parse(answer.until); t += 3600 * 1000) {
        hours.push(new Date(t).toISOString().replace(/\.\d+Z$/, "Z"));
      }
    }
    const datasets = answer.series.map((s, i) => {
      const at = new Map(s.points.map((p) => [p.hour, p]));
      return {
        label: s.type,
        data: hours.map((h) => (at.has(h) ? Math.round(at.get(h).hitRate * 10000) / 100 : null)),
        borderColor: colors[i % colors.length],
        backgroundColor: colors[i % colors.length],
        // An hour without this type's decisions takes no room in its group,
        // and a 0 % hour is a bar too (3 px), not nothing.
        skipNull: true,
        minBarLength: 3,
      };
    });
    draw("chart-hit-rate", {
      type: "bar",
      data: { labels: hours.map(hourLabel), datasets },
      options: {
        scales: { y: { min: 0, max: 100, title: { display: true, text: "hit rate %" } } },
        plugins: { tooltip: { callbacks: { label: (c) => c.dataset.label + ": " + c.parsed.y + "%" } } },
      },
    }, hours.length === 0);
  }

  function drawDecisions(answer) {
    const rows = answer.reasons;
    const stages = [...new Set(rows.map((r) => r.stage))];
    draw("chart-decisions", {
      type: "bar",
      data: {
        labels: rows.map((r) => r.stage + " · " + r.reason),
        datasets: [{
          label: "decisions",
          data: rows.map((r) => r.decisions),
          backgroundColor: rows.map((r) => colors[stages.indexOf(r.stage) % colors.length]),
        }],
      },
      options: { indexAxis: "y", plugins: { legend: { display: false } } },
    }, rows.length === 0);
  }

  // drawStacked draws one stacked bar per channel, one dataset per value of
  // field (result or status).
  function drawStacked(id, rows, field, count) {
    const channels = [...new Set(rows.map((r) => r.channel))].sort();
    const kinds = [...new Set(rows.map((r) => r[field]))].sort();
    const datasets = kinds.map((k, i) => ({
      label: k,
      data: channels.map((c) => {
        const r = rows.find((x) => x.channel === c && x[field] === k);
        return r ? r[count] : null;
      }),
      backgroundColor: resultColors[k] || colors[i % colors.length],
    }));
    draw(id, {
      type: "bar",
      data: { labels: channels, datasets },
      options: { scales: { x: { stacked: true }, y: { stacked: true, beginAtZero: true } } },
    }, rows.length === 0);
  }

  function cell(tr, text) {
    const td = document.createElement("td");
    td.textContent = text;
    tr.appendChild(td);
    return td;
  }

  function fillShownTwice(answer) {
    const body = $("shown-twice").querySelector("tbody");
    body.replaceChildren();
    for (const d of answer.deliveries) {
      const tr = document.createElement("tr");
      tr.dataset.deliveryId = d.deliveryId;
      cell(tr, d.lastAt.replace("T", " ").replace(/\.\d+Z$|Z$/, ""));
      cell(tr, d.channel);
      const a = document.createElement("a");
      a.href = "#" + encodeURIComponent(d.notificationId);
      a.textContent = d.notificationId;
      a.addEventListener("click", (e) => {
        e.preventDefault();
        $("search").value = d.notificationId;
        openTimeline(d.notificationId);
      });
      cell(tr, "").appendChild(a);
      cell(tr, d.recipient);
      cell(tr, d.deviceId);
      cell(tr, String(d.ambiguousAttempts));
      cell(tr, String(d.possibleCopies));
      body.appendChild(tr);
    }
    $("shown-twice").hidden = answer.deliveries.length === 0;
    document.querySelector('.empty[data-for="shown-twice"]').hidden = answer.deliveries.length !== 0;
    $("shown-twice-more").hidden = !answer.truncated;
  }

  // The dead-letter panel reads /v1/deadletters (herald.deadletters, not
  // ClickHouse) on its own: its data-state is "loaded" or "problem"
  // whatever the charts' is.
  async function loadDeadLetters() {
    const section = $("dead-letters");
    section.dataset.state = "loading";
    try {
      const answer = await get("/v1/deadletters");
      const counts = $("dead-letter-counts");
      counts.replaceChildren();
      for (const c of answer.counts) {
        const li = document.createElement("li");
        li.textContent = c.letters + " × " + c.stage + " · " + c.class + " · " + c.reason + (c.redriven ? " (" + c.redriven + " redriven)" : "");
        counts.appendChild(li);
      }
      const body = $("dead-letter-list").querySelector("tbody");
      body.replaceChildren();
      for (const l of answer.deadLetters) {
        const tr = document.createElement("tr");
        tr.dataset.id = l.id;
        const box = document.createElement("input");
        box.type = "checkbox";
        box.value = l.id;
        box.disabled = !!(l.redrives && l.redrives.length);
        box.setAttribute("aria-label", "select dead letter " + l.id);
        cell(tr, "").appendChild(box);
        cell(tr, l.at.replace("T", " ").replace(/\.\d+Z$|Z$/, ""));
        cell(tr, l.id);
        cell(tr, l.channel || l.stage);
        cell(tr, l.class);
        cell(tr, l.reason);
        if (l.notificationId) {
          const a = document.createElement("a");
          a.href = "#" + encodeURIComponent(l.notificationId);
          a.textContent = l.notificationId;
          a.addEventListener("click", (e) => {
            e.preventDefault();
            $("search").value = l.notificationId;
            openTimeline(l.notificationId);
          });
          cell(tr, "").appendChild(a);
        } else {
          cell(tr, "");
        }
        cell(tr, l.recipient || "");
        cell(tr, l.attempts ? String(l.attempts) : "");
        cell(tr, (l.redrives || []).map((m) => "by " + m.by + ": " + m.reason).join("; "));
        body.appendChild(tr);
      }
      $("dead-letter-list").hidden = answer.deadLetters.length === 0;
      document.querySelector('.empty[data-for="dead-letter-list"]').hidden = answer.deadLetters.length !== 0;
      $("dead-letter-problem").hidden = true;
      section.dataset.state = "loaded";
    } catch (err) {
      $("dead-letter-problem").textContent = err.message;
      $("dead-letter-problem").hidden = false;
      section.dataset.state = "problem";
    }
  }

  // redrive posts the selected dead letters with the reason given; the
  // panel says what was redriven and skipped, and reloads.
  async function redrive(dryRun) {
    const ids = [...document.querySelectorAll("#dead-letter-list tbody input:checked")].map((b) => b.value);
    const reason = $("redrive-reason").value.trim();
    const result = $("redrive-result");
    const section = $("dead-letters");
    if (ids.length === 0 || !reason) {
      result.textContent = ids.length === 0 ? "Select the dead letters to redrive." : "Say why they can be sent now: the redrive is audited with it.";
      return;
    }
    section.dataset.redrive = "running";
    try {
      const resp = await fetch("/v1/deadletters:redrive", {
        method: "POST",
        headers: { Authorization: "Bearer " + apiKey(), "Content-Type": "application/json", Accept: "application/json" },
        body: JSON.stringify({ ids, reason, dryRun }),
      });
      const body = await resp.json();
      if (!resp.ok) {
        throw new Error(body && body.title ? body.title + ": " + (body.detail || "") : "HTTP " + resp.status);
      }
      const skipped = body.skipped.map((s) => s.letter.id + ": " + s.why).join("; ");
      result.textContent = (dryRun ? "Dry run: " + body.redriven.length + " would be redriven" : body.redriven.length + " redriven") +
        (body.skipped.length ? ", " + body.skipped.length + " skipped (" + skipped + ")" : "") + ". Redrive " + body.id + ".";
      section.dataset.redrive = dryRun ? "dry-run" : "done";
    } catch (err) {
      result.textContent = err.message;
      section.dataset.redrive = "problem";
    }
    if (!dryRun) {
      await loadDeadLetters();
    }
  }

  let generation = 0;

  async function load() {
    const mine = ++generation;
    if (!apiKey()) {
      document.body.dataset.state = "needs-key";
      showProblem("Enter an API key: the dashboard shows that key's tenant.");
      return;
    }
    document.body.dataset.state = "loading";
    const q = windowQuery();
    try {
      const [hit, decisions, attempts, outcomes, twice] = await Promise.all([
        get("/v1/dashboard/hit-rate?" + q),
        get("/v1/dashboard/decisions?" + q),
        get("/v1/dashboard/attempts?" + q),
        get("/v1/dashboard/outcomes?" + q),
        get("/v1/dashboard/shown-twice?" + q),
      ]);
      if (mine !== generation) {
        return;
      }
      drawHitRate(hit);
      drawDecisions(decisions);
      drawStacked("chart-attempts", attempts.attempts, "result", "attempts");
      drawStacked("chart-outcomes", outcomes.outcomes, "status", "deliveries");
      fillShownTwice(twice);
      showProblem("");
      document.body.dataset.state = "loaded";
    } catch (err) {
      if (mine !== generation) {
        return;
      }
      showProblem(err.message);
      document.body.dataset.state = "problem";
    }
  }

  async function openTimeline(id) {
    const section = $("timeline");
    section.hidden = false;
    section.dataset.state = "loading";
    $("timeline-id").textContent = id;
    const events = $("timeline-events");
    events.replaceChildren();
    $("verdict-reasons").replaceChildren();
    $("verdict").textContent = "";
    $("verdict").className = "";
    delete section.dataset.status;
    try {
      const tl = await get("/v1/dashboard/notifications/" + encodeURIComponent(id) + "/timeline");
      for (const e of tl.events) {
        const li = document.createElement("li");
        li.dataset.kind = e.kind;
        const t = document.createElement("time");
        t.dateTime = e.at;
        t.textContent = e.at.replace("T", " ").replace("Z", "");
        const k = document.createElement("span");
        k.className = "kind";
        k.textContent = e.kind;
        const x = document.createElement("span");
        x.textContent = e.text;
        li.append(t, k, x);
        events.appendChild(li);
      }
      section.dataset.status = tl.status || "";
      $("verdict").textContent = (tl.status ? "Status: " + tl.status + ". " : "") + tl.verdict.sentence;
      $("verdict").className = tl.verdict.answer;
      for (const r of tl.verdict.reasons) {
        const li = document.createElement("li");
        li.textContent = r;
        $("verdict-reasons").appendChild(li);
      }
      section.dataset.state = "loaded";
    } catch (err) {
      $("verdict").textContent = err.status === 404 ? "herald holds nothing for this id (in your tenant): no request, decision, attempt, outcome or receipt of it is in the audit record." : err.message;
      section.dataset.state = err.status === 404 ? "not-found" : "problem";
    }
    section.scrollIntoView({ block: "nearest" });
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("api-key").value = apiKey();
    $("key-form").addEventListener("submit", (e) => {
      e.preventDefault();
      sessionStorage.setItem(keyName, $("api-key").value.trim());
      load();
      loadDeadLetters();
    });
    $("redrive-form").addEventListener("submit", (e) => {
      e.preventDefault();
      redrive(false);
    });
    $("redrive-dry-run").addEventListener("click", () => redrive(true));
    $("dead-letter-all").addEventListener("change", (e) => {
      for (const b of document.querySelectorAll("#dead-letter-list tbody input:not(:disabled)")) {
        b.checked = e.target.checked;
      }
    });
    $("window").addEventListener("change", load);
    $("search-form").addEventListener("submit", (e) => {
      e.preventDefault();
      const id = $("search").value.trim();
      if (id) {
        openTimeline(id);
      }
    });
    $("timeline-close").addEventListener("click", () => {
      $("timeline").hidden = true;
    });
    load();
    if (apiKey()) {
      loadDeadLetters();
    }
  });
})();
